// IdleTrace when the project is built without eBPF (HALTPOLL_BUILD_BPF=OFF: no clang, bpftool or
// libbpf for the target): the same API, and open() says so.
#include "idle_trace.hpp"

#include <cerrno>

namespace haltpolld {

struct IdleTrace::Impl {
  std::string status;
  std::vector<std::string> missing;
};

IdleTrace::IdleTrace(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
IdleTrace::~IdleTrace() = default;

bool idle_trace_built_with_bpf() noexcept { return false; }

std::unique_ptr<IdleTrace> IdleTrace::open(const IdleTraceOptions&, std::string* why_not) noexcept {
  if (why_not) *why_not = "kernel signals unavailable: built without eBPF support (HALTPOLL_BUILD_BPF=OFF)";
  return nullptr;
}

// Unreachable (open() never constructs one), but defined so the API links.
IdleTraceSnapshot IdleTrace::read() const { return {}; }
const std::string& IdleTrace::status() const noexcept { return impl_->status; }
const std::vector<std::string>& IdleTrace::missing() const noexcept { return impl_->missing; }
unsigned IdleTrace::possible_cpus() const noexcept { return 0; }
std::optional<unsigned> IdleTrace::poll_state() const noexcept { return std::nullopt; }
long IdleTrace::consume(const std::function<void(const IdleRecord&)>&) const { return -ENOSYS; }
std::uint64_t IdleTrace::records_dropped() const noexcept { return 0; }
int IdleTrace::program_fd(const std::string&) const noexcept { return -1; }
int IdleTrace::set_attached(bool) noexcept { return -ENOSYS; }
bool IdleTrace::attached() const noexcept { return false; }

}  // namespace haltpolld
