// The API without eBPF (HALTPOLL_BUILD_BPF=OFF, e.g. the arm64 cross build): open() fails with the
// stated reason and nothing throws.
#include <catch2/catch.hpp>

#include "idle_trace.hpp"

TEST_CASE("without eBPF support IdleTrace::open says so and returns nullptr") {
  REQUIRE_FALSE(haltpolld::idle_trace_built_with_bpf());
  std::string why = "stale";
  auto t = haltpolld::IdleTrace::open({}, &why);
  REQUIRE(t == nullptr);
  REQUIRE(why == "kernel signals unavailable: built without eBPF support (HALTPOLL_BUILD_BPF=OFF)");
  REQUIRE(haltpolld::IdleTrace::open({}, nullptr) == nullptr);
}
