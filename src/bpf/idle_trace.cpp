// The libbpf loader of IdleTrace: chooses tp_btf or raw_tp per tracepoint, sizes the maps for this
// machine, attaches, and copies the maps out on read(). Every failure becomes a message that names
// the signal and the errno; libbpf's own messages are captured (never printed) and the last useful
// one is appended, without its RLIMIT_MEMLOCK hint: on any kernel since 5.11 BPF memory is charged
// to the memory cgroup, so that hint only misleads when the real cause is a missing capability.
#include "idle_trace.hpp"

#include "cpuidle_totals.hpp"

#include "idle_trace_abi.h"

#include <haltpoll/clock.hpp>

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
#pragma GCC diagnostic ignored "-Wcast-align"
#pragma GCC diagnostic ignored "-Wpedantic"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include "idle_trace.skel.h"
#pragma GCC diagnostic pop

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string_view>

namespace haltpolld {
namespace {

// libbpf's print hook is process-wide; open() points it at its own buffer for the duration.
thread_local std::string* libbpf_sink = nullptr;
thread_local bool verifier_said = false;

// HALTPOLL_LIBBPF_DEBUG=1 shows everything libbpf says (the verifier's log included) on stderr.
const bool libbpf_verbose = [] {
  const char* v = std::getenv("HALTPOLL_LIBBPF_DEBUG");
  return v != nullptr && v[0] == '1';
}();

int capture_libbpf(enum libbpf_print_level level, const char* fmt, va_list args) {
  if (libbpf_verbose) {
    va_list copy;
    va_copy(copy, args);
    std::vfprintf(stderr, fmt, copy);
    va_end(copy);
  }
  if (level == LIBBPF_DEBUG || libbpf_sink == nullptr) return 0;
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  if (n <= 0) return 0;
  std::string msg(static_cast<std::size_t>(n) + 1, '\0');
  std::vsnprintf(msg.data(), msg.size(), fmt, args);
  msg.resize(static_cast<std::size_t>(n));
  // A verifier log: its last line before the statistics is the reason.
  if (auto end = msg.find("\nprocessed "); end != std::string::npos && msg.find("BEGIN PROG LOAD LOG") != std::string::npos) {
    const auto start = msg.rfind('\n', end - 1);
    *libbpf_sink = "verifier: " + msg.substr(start + 1, end - start - 1);
    verifier_said = true;
    return 0;
  }
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  if (auto hint = msg.find(" Make sure your kernel supports BPF"); hint != std::string::npos) msg.resize(hint);
  if (msg.find("RLIMIT_MEMLOCK") != std::string::npos || msg.empty()) return 0;
  // The verifier's reason is the one to keep: libbpf's later lines only say that the load failed.
  if (!verifier_said) *libbpf_sink = msg;
  return 0;
}

struct LibbpfCapture {
  std::string last;
  LibbpfCapture() {
    static std::once_flag once;
    std::call_once(once, [] { libbpf_set_print(capture_libbpf); });
    libbpf_sink = &last;
    verifier_said = false;
  }
  ~LibbpfCapture() { libbpf_sink = nullptr; }
  LibbpfCapture(const LibbpfCapture&) = delete;
  LibbpfCapture& operator=(const LibbpfCapture&) = delete;
};

std::string errno_name(int e) {
  if (e < 0) e = -e;
  const char* n = strerrorname_np(e);
  return n ? n : "errno " + std::to_string(e);
}

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (f) std::getline(f, s);
  return s;
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// Why the bpf() system call refused, in words an operator can act on.
std::string load_failure(int err, const std::string& libbpf_msg) {
  std::string m = "kernel signals unavailable (" + errno_name(err) + "): ";
  switch (err < 0 ? -err : err) {
    case EPERM: {
      m += "loading eBPF needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN)";
      const std::string lockdown = read_line("/sys/kernel/security/lockdown");
      if (lockdown.find("[integrity]") != std::string::npos || lockdown.find("[confidentiality]") != std::string::npos)
        m += ", and the kernel is locked down (" + lockdown + ")";
      break;
    }
    case ENOSYS:
      m += "no bpf() system call (a kernel without CONFIG_BPF_SYSCALL, or a seccomp filter)";
      break;
    case EACCES:
      m += "the kernel's verifier refused the program";
      break;
    case EINVAL:
      m += "the kernel does not support this program (too old, or eBPF restricted)";
      break;
    default:
      m += std::strerror(err < 0 ? -err : err);
  }
  if (!libbpf_msg.empty()) m += " [" + libbpf_msg + "]";
  return m;
}

struct Tracepoint {
  const char* category;
  const char* name;
  bool required;
};
constexpr std::array<Tracepoint, 3> tracepoints{{
    {"power", "cpu_idle", true},
    {"power", "guest_halt_poll_ns", false},
    {"sched", "sched_wake_idle_without_ipi", false},
}};

bpf_program* program_of(idle_trace_bpf* skel, std::size_t tp, bool btf) {
  switch (tp) {
    case 0: return btf ? skel->progs.cpu_idle_btf : skel->progs.cpu_idle_raw;
    case 1: return btf ? skel->progs.limit_btf : skel->progs.limit_raw;
    default: return btf ? skel->progs.ipi_btf : skel->progs.ipi_raw;
  }
}

bpf_link*& link_of(idle_trace_bpf* skel, std::size_t tp, bool btf) {
  switch (tp) {
    case 0: return btf ? skel->links.cpu_idle_btf : skel->links.cpu_idle_raw;
    case 1: return btf ? skel->links.limit_btf : skel->links.limit_raw;
    default: return btf ? skel->links.ipi_btf : skel->links.ipi_raw;
  }
}

// Whether tracefs lists the event: false only when tracefs is mounted and the event is absent.
bool tracefs_may_have(const Tracepoint& tp) {
  for (const char* root : {"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}) {
    if (!exists(std::string(root) + "/events")) continue;
    return exists(std::string(root) + "/events/" + tp.category + "/" + tp.name);
  }
  return true;
}

std::optional<unsigned> find_poll_state(const std::string& sysfs_root, std::string& driver) {
  driver = read_line(sysfs_root + "/devices/system/cpu/cpuidle/current_driver");
  const auto states = read_cpuidle_states(sysfs_root, 0);
  for (unsigned i = 0; i < states.size(); ++i)
    if (states[i].name == "POLL") return i;
  return std::nullopt;
}

}  // namespace

struct IdleTrace::Impl {
  idle_trace_bpf* skel = nullptr;
  const hp_hist* hists = nullptr;
  std::size_t hists_len = 0;
  ring_buffer* ring = nullptr;
  unsigned ncpu = 0;
  std::optional<unsigned> poll_state;
  std::array<bpf_program*, tracepoints.size()> attached{};  // the program kept per tracepoint
  bool use_btf = true;
  bool detached = false;  // set_attached(false)
  std::string status;
  std::vector<std::string> missing;
  mutable const std::function<void(const IdleRecord&)>* sink = nullptr;

  ~Impl() {
    if (ring) ring_buffer__free(ring);
    if (hists) ::munmap(const_cast<hp_hist*>(hists), hists_len);
    if (skel) idle_trace_bpf__destroy(skel);
  }

  static int on_record(void* ctx, void* data, std::size_t size) {
    auto* self = static_cast<const Impl*>(ctx);
    if (size < sizeof(hp_record) || self->sink == nullptr) return 0;
    hp_record r;
    std::memcpy(&r, data, sizeof r);
    IdleRecord out;
    out.kind = r.kind == HP_REC_POLL ? IdleRecord::Kind::poll : r.kind == HP_REC_HALT ? IdleRecord::Kind::halt : IdleRecord::Kind::limit;
    out.cpu = r.cpu;
    out.ts_ns = r.ts_ns;
    out.residency_ns = r.residency_ns;
    out.old_ns = r.old_ns;
    out.new_ns = r.new_ns;
    out.grow = r.grow != 0;
    (*self->sink)(out);
    return 0;
  }
};

IdleTrace::IdleTrace(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
IdleTrace::~IdleTrace() = default;

bool idle_trace_built_with_bpf() noexcept { return true; }

std::unique_ptr<IdleTrace> IdleTrace::open(const IdleTraceOptions& options, std::string* why_not) noexcept try {
  std::string scratch;
  std::string& why = why_not ? *why_not : scratch;
  why.clear();
  LibbpfCapture capture;

  auto impl = std::make_unique<Impl>();
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) {
    why = "kernel signals unavailable (" + errno_name(ncpu) + "): cannot read the possible CPUs";
    return nullptr;
  }
  if (static_cast<unsigned>(ncpu) > HP_MAX_CPUS) {
    why = "kernel signals unavailable: " + std::to_string(ncpu) + " possible CPUs, more than the " +
          std::to_string(HP_MAX_CPUS) + " the program is built for";
    return nullptr;
  }
  impl->ncpu = static_cast<unsigned>(ncpu);
  std::string driver;
  impl->poll_state = find_poll_state(options.sysfs_root, driver);
  if (options.record_ring_bytes != 0 &&
      (options.record_ring_bytes & (options.record_ring_bytes - 1)) != 0) {
    why = "kernel signals unavailable: record ring size " + std::to_string(options.record_ring_bytes) +
          " is not a power of two";
    return nullptr;
  }

  // tp_btf needs the kernel's BTF to describe the tracepoint (btf_trace_<name>); raw_tp needs only
  // the tracepoint. A kernel missing an optional tracepoint keeps the others.
  bool use_btf = options.attach != IdleTraceOptions::Attach::raw_tp;
  std::array<bool, tracepoints.size()> present{};
  {
    btf* vmlinux = options.attach == IdleTraceOptions::Attach::raw_tp ? nullptr : btf__load_vmlinux_btf();
    if (vmlinux == nullptr && options.attach == IdleTraceOptions::Attach::tp_btf) {
      why = "kernel signals unavailable (" + errno_name(errno) + "): tp_btf forced but the kernel's BTF cannot be loaded";
      return nullptr;
    }
    if (vmlinux == nullptr) use_btf = false;
    for (std::size_t i = 0; i < tracepoints.size(); ++i) {
      if (use_btf) {
        const std::string type = std::string("btf_trace_") + tracepoints[i].name;
        present[i] = btf__find_by_name_kind(vmlinux, type.c_str(), BTF_KIND_TYPEDEF) >= 0;
      } else {
        present[i] = tracefs_may_have(tracepoints[i]);
      }
    }
    if (vmlinux) btf__free(vmlinux);
  }

  int load_err = 0;
  for (int attempt = 0; attempt < 2; ++attempt) {
    idle_trace_bpf* skel = idle_trace_bpf__open();
    if (skel == nullptr) {
      why = "kernel signals unavailable (" + errno_name(errno) + "): cannot open the embedded eBPF object";
      return nullptr;
    }
    skel->rodata->poll_state = impl->poll_state.value_or(0xffffffffu);
    skel->rodata->record_mode = options.record_ring_bytes != 0;
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    bpf_map__set_max_entries(skel->maps.hists, impl->ncpu * HP_HIST_KINDS);
    bpf_map__set_max_entries(skel->maps.records,
                             static_cast<std::uint32_t>(std::max(options.record_ring_bytes, page)));
    for (std::size_t i = 0; i < tracepoints.size(); ++i) {
      bpf_program__set_autoload(program_of(skel, i, true), use_btf && present[i]);
      bpf_program__set_autoload(program_of(skel, i, false), !use_btf && present[i]);
    }
    if (!present[0]) {
      idle_trace_bpf__destroy(skel);
      why = std::string("kernel signals unavailable (ENOENT): the kernel has no power:cpu_idle tracepoint");
      return nullptr;
    }
    load_err = idle_trace_bpf__load(skel);
    if (load_err == 0) {
      impl->skel = skel;
      break;
    }
    idle_trace_bpf__destroy(skel);
    // A permission or missing-syscall failure is the same for raw_tp; anything else may be tp_btf's.
    const int e = load_err < 0 ? -load_err : load_err;
    if (!use_btf || options.attach == IdleTraceOptions::Attach::tp_btf || e == EPERM || e == ENOSYS) break;
    use_btf = false;
    for (std::size_t i = 0; i < tracepoints.size(); ++i) present[i] = tracefs_may_have(tracepoints[i]);
  }
  if (impl->skel == nullptr) {
    why = load_failure(load_err, capture.last);
    return nullptr;
  }
  impl->use_btf = use_btf;

  impl->status = "cpuidle driver " + (driver.empty() ? std::string("unknown") : driver) + ", POLL " +
                 (impl->poll_state ? "= state" + std::to_string(*impl->poll_state) : std::string("absent")) + ";";
  for (std::size_t i = 0; i < tracepoints.size(); ++i) {
    const std::string tp = std::string(tracepoints[i].category) + ":" + tracepoints[i].name;
    if (!present[i]) {
      impl->missing.push_back(tp + ": not in this kernel");
      impl->status += " " + tp + " missing;";
      continue;
    }
    bpf_link* link = bpf_program__attach(program_of(impl->skel, i, use_btf));
    if (link == nullptr) {
      const int e = errno;
      if (tracepoints[i].required) {
        why = "kernel signals unavailable (" + errno_name(e) + "): cannot attach to " + tp +
              (capture.last.empty() ? "" : " [" + capture.last + "]");
        return nullptr;
      }
      impl->missing.push_back(tp + ": attach failed (" + errno_name(e) + ")");
      impl->status += " " + tp + " failed (" + errno_name(e) + ");";
      continue;
    }
    // The skeleton's destroy() detaches what its links array holds.
    link_of(impl->skel, i, use_btf) = link;
    impl->attached[i] = program_of(impl->skel, i, use_btf);
    impl->status += " " + tp + " " + (use_btf ? "tp_btf" : "raw_tp") + ";";
  }
  if (impl->status.back() == ';') impl->status.pop_back();

  if (impl->skel->bss == nullptr) {
    why = "kernel signals unavailable: the kernel cannot map the program's global data (needs Linux 5.5)";
    return nullptr;
  }
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  impl->hists_len = (sizeof(hp_hist) * impl->ncpu * HP_HIST_KINDS + page - 1) / page * page;
  void* m = ::mmap(nullptr, impl->hists_len, PROT_READ, MAP_SHARED, bpf_map__fd(impl->skel->maps.hists), 0);
  if (m == MAP_FAILED) {
    why = "kernel signals unavailable (" + errno_name(errno) + "): cannot map the histogram array";
    return nullptr;
  }
  impl->hists = static_cast<const hp_hist*>(m);

  if (options.record_ring_bytes != 0) {
    impl->ring = ring_buffer__new(bpf_map__fd(impl->skel->maps.records), &Impl::on_record, impl.get(), nullptr);
    if (impl->ring == nullptr) {
      why = "kernel signals unavailable (" + errno_name(errno) + "): cannot map the record ring buffer";
      return nullptr;
    }
  }
  return std::unique_ptr<IdleTrace>(new IdleTrace(std::move(impl)));
} catch (const std::exception& e) {
  if (why_not) *why_not = std::string("kernel signals unavailable: ") + e.what();
  return nullptr;
}

IdleTraceSnapshot IdleTrace::read() const {
  IdleTraceSnapshot s;
  s.cpus.resize(impl_->ncpu);
  s.taken_ns = static_cast<std::uint64_t>(haltpoll::clock_monotonic_ns());  // bpf_ktime_get_ns's clock
  const hp_cpu* cpus = impl_->skel->bss->cpus;
  const __u64* ipi = impl_->skel->bss->ipi_skipped;
  for (unsigned cpu = 0; cpu < impl_->ncpu; ++cpu) {
    const hp_cpu* src = &cpus[cpu];
    const hp_hist* hsrc = impl_->hists + static_cast<std::size_t>(cpu) * HP_HIST_KINDS;
    hp_cpu c;
    std::array<hp_hist, HP_HIST_KINDS> h;
    // The kernel side is a sequence count: an odd or changed seq means an update raced the copy.
    for (int tries = 0;; ++tries) {
      const __u64 s1 = __atomic_load_n(&src->seq, __ATOMIC_ACQUIRE);
      if ((s1 & 1) == 0) {
        std::memcpy(&c, src, sizeof c);
        std::memcpy(h.data(), hsrc, sizeof(hp_hist) * HP_HIST_KINDS);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&src->seq, __ATOMIC_RELAXED) == s1) break;
      }
      if (tries == 1000) {
        ++s.torn_reads;
        break;
      }
    }
    IdleCpuStats& o = s.cpus[cpu];
    o.cpu = cpu;
    o.idle_entries = c.idle_entries;
    o.poll_entries = c.poll_entries;
    o.poll_hits = c.poll_hits;
    o.poll_timeouts = c.poll_timeouts;
    o.halts = c.halts;
    o.poll_ns = c.poll_ns;
    o.halt_ns = c.halt_ns;
    o.ipi_skipped = __atomic_load_n(&ipi[cpu], __ATOMIC_RELAXED);
    if (c.limit_known) o.poll_limit_ns = c.poll_limit_ns;
    o.limit_events = c.limit_events;
    o.grows = c.grows;
    o.shrinks = c.shrinks;
    o.unmatched = c.unmatched;
    haltpoll::LatencyHistogram* dst[HP_HIST_KINDS] = {&o.poll_hit, &o.poll_halt, &o.halt, &o.halt_residency};
    // __u64 is unsigned long long, std::uint64_t unsigned long: same bits, different types.
    std::array<std::uint64_t, HP_HIST_BUCKETS> counts;
    static_assert(sizeof counts == sizeof h[0].buckets);
    for (unsigned k = 0; k < HP_HIST_KINDS; ++k) {
      std::memcpy(counts.data(), h[k].buckets, sizeof counts);
      dst[k]->add_buckets(counts.data(), counts.size(), h[k].sum_ns, h[k].max_ns);
    }
  }
  return s;
}

const std::string& IdleTrace::status() const noexcept { return impl_->status; }
const std::vector<std::string>& IdleTrace::missing() const noexcept { return impl_->missing; }
unsigned IdleTrace::possible_cpus() const noexcept { return impl_->ncpu; }
std::optional<unsigned> IdleTrace::poll_state() const noexcept { return impl_->poll_state; }

long IdleTrace::consume(const std::function<void(const IdleRecord&)>& sink) const {
  if (impl_->ring == nullptr) return -EINVAL;
  impl_->sink = &sink;
  const int n = ring_buffer__consume(impl_->ring);
  impl_->sink = nullptr;
  return n;
}

int IdleTrace::program_fd(const std::string& tracepoint) const noexcept {
  for (std::size_t i = 0; i < tracepoints.size(); ++i)
    if (tracepoint == tracepoints[i].name && impl_->attached[i]) return bpf_program__fd(impl_->attached[i]);
  return -1;
}

bool IdleTrace::attached() const noexcept { return !impl_->detached; }

int IdleTrace::set_attached(bool on) noexcept {
  Impl& m = *impl_;
  if (on != m.detached) return 0;
  if (!on) {
    for (std::size_t i = 0; i < tracepoints.size(); ++i) {
      bpf_link*& link = link_of(m.skel, i, m.use_btf);
      if (link == nullptr) continue;
      bpf_link__destroy(link);
      link = nullptr;
    }
    m.detached = true;
    return 0;
  }
  // No program runs while detached (the last one ended long before: detaching waits for no
  // in-flight run, but a tick passes before this), so the period state can be written from here.
  // Without this reset the first exit after the gap would count the whole gap as one period.
  for (unsigned cpu = 0; cpu < m.ncpu; ++cpu) {
    hp_cpu& c = m.skel->bss->cpus[cpu];
    c.seq += 2;  // a reader holding an older copy sees it changed
    c.in_idle = 0;
    c.pending_poll = 0;
    c.halt_after_poll = 0;
    c.limit_known = 0;
  }
  int first_err = 0;
  for (std::size_t i = 0; i < tracepoints.size(); ++i) {
    if (m.attached[i] == nullptr) continue;
    bpf_link* link = bpf_program__attach(m.attached[i]);
    if (link == nullptr) {
      if (first_err == 0) first_err = -errno;
      continue;
    }
    link_of(m.skel, i, m.use_btf) = link;
  }
  m.detached = false;
  return first_err;
}

std::uint64_t IdleTrace::records_dropped() const noexcept {
  return __atomic_load_n(&impl_->skel->bss->record_dropped, __ATOMIC_RELAXED);
}

}  // namespace haltpolld
