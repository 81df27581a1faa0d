// Threads a library or the daemon starts for itself do not take the process's signals.
#pragma once

#include <pthread.h>

#include <csignal>

namespace haltpoll {

// Blocks every asynchronous signal on the calling thread (the faults a thread raises itself stay
// deliverable), so that a signal sent to the process (SIGTERM, SIGINT, SIGHUP) reaches a thread
// that waits for it rather than a worker parked in a futex. Under ThreadSanitizer a signal that
// landed on such a worker was deferred until the worker woke, and a parked worker never woke: the
// daemon then ignored SIGTERM. Call first thing in the thread's function.
inline void block_async_signals() noexcept {
  sigset_t set;
  sigfillset(&set);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS}) sigdelset(&set, sig);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

}  // namespace haltpoll
