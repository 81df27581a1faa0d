// An outside program built against the installed libhaltpoll (find_package or pkg-config): the
// headers and the library agree on the version, a WorkerPool task runs on its pinned worker and
// hands a value back, and a Parker hands data to its owner on both wake paths (poll and futex).
#include <haltpoll/parker.hpp>
#include <haltpoll/version.hpp>
#include <haltpoll/worker_pool.hpp>

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <thread>

namespace {

int fail(const char* what) {
  std::fprintf(stderr, "consumer: %s\n", what);
  return 1;
}

// The owner parks with `window_ns` of polling and reads what the notifier wrote before unpark().
bool parker_hand_off(std::int64_t window_ns, std::chrono::milliseconds notify_after) {
  haltpoll::Parker parker;
  int payload = 0;
  std::atomic<int> seen{-1};
  std::thread owner([&] {
    parker.park(window_ns);
    seen.store(payload, std::memory_order_relaxed);
  });
  std::this_thread::sleep_for(notify_after);
  payload = 42;  // plain write: unpark()'s release / park()'s acquire must order it
  parker.unpark();
  owner.join();
  return seen.load(std::memory_order_relaxed) == 42;
}

}  // namespace

int main() {
  if (std::strcmp(haltpoll::version_string(), HALTPOLL_VERSION_STRING) != 0)
    return fail("the library's version differs from its headers'");

  int task_cpu = -1;
  {
    haltpoll::WorkerPool pool;
    const auto cpus = pool.cpus();
    if (cpus.empty()) return fail("the pool has no worker");
    std::promise<int> ran;
    auto result = ran.get_future();
    if (pool.submit(cpus.back(), [&ran] { ran.set_value(sched_getcpu()); }) == haltpoll::SubmitOutcome::rejected)
      return fail("submit was rejected");
    if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) return fail("the task did not run");
    task_cpu = result.get();
    // A worker that could not pin itself runs anywhere; one that did must be on its CPU.
    if (pool.pin_failures().empty() && task_cpu != cpus.back()) return fail("the task ran on another CPU");
  }

  if (!parker_hand_off(10'000'000, std::chrono::milliseconds(0))) return fail("poll-path hand-off lost the data");
  if (!parker_hand_off(0, std::chrono::milliseconds(20))) return fail("futex-path hand-off lost the data");

  std::printf("haltpoll %s: pool task ran on CPU %d; parker hand-offs: 2\n", haltpoll::version_string(), task_cpu);
  return 0;
}
