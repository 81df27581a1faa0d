// Picks the architecture layer at compile time: `arch::native` names x86, arm64 or generic, and
// HALTPOLL_ARCH_X86 / HALTPOLL_ARCH_ARM64 say which. Which *backend* runs is decided at start-up
// from CPUID / getauxval (see barrier.hpp); this header only decides what can be compiled.
#pragma once

#include "haltpoll/arch/generic.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include "haltpoll/arch/x86.hpp"
#define HALTPOLL_ARCH_X86 1
#define HALTPOLL_ARCH_ARM64 0
namespace haltpoll::arch {
namespace native = x86;
}
#elif defined(__aarch64__)
#include "haltpoll/arch/arm64.hpp"
#define HALTPOLL_ARCH_X86 0
#define HALTPOLL_ARCH_ARM64 1
namespace haltpoll::arch {
namespace native = arm64;
}
#else
#define HALTPOLL_ARCH_X86 0
#define HALTPOLL_ARCH_ARM64 0
namespace haltpoll::arch {
namespace native = generic;
}
#endif
