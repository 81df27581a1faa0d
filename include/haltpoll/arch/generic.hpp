// Generic arch layer: the defaults every architecture starts from.
//
// An architecture header (x86.hpp, arm64.hpp) supplies a few raw primitives: a relax hint, a cheap
// counter and, where the CPU has one, a compare-and-wait. This header holds what needs no CPU
// support at all: a relax that is only a compiler barrier and a yield of the time slice. None of
// these functions orders memory; the barrier's loads carry the ordering (see barrier.hpp).
#pragma once

#include <sched.h>

namespace haltpoll::arch::generic {

// A compiler barrier only: keeps the loop's load from being hoisted on CPUs without a spin hint.
inline void cpu_relax() noexcept { asm volatile("" ::: "memory"); }

// Gives the CPU to another runnable thread; the right wait on an oversubscribed machine, where
// spinning would keep the thread we wait for from running.
inline void yield_cpu() noexcept { sched_yield(); }

}  // namespace haltpoll::arch::generic
