// FakeSysfs: a throw-away sysfs/procfs tree in a temporary directory, shaped like the parts of
// the real one that haltpolld reads and writes (haltpoll module parameters, the cpuidle driver
// and governor, per-CPU cpuidle states, /proc/stat, the present and online CPU lists, each CPU's
// pm_qos_resume_latency_us, the QoS device dev/cpu_dma_latency as a regular file holding the
// kernel's s32 and, for holders of it, proc/PID/{comm,fd}). Removed on destruction.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

namespace testsupport {

class FakeSysfs {
 public:
  struct Options {
    bool haltpoll_module = true;
    std::string driver = "haltpoll";
    std::string governor = "haltpoll";
    int cpus = 2;
    bool cpuidle_states = true;  // stateK directories per CPU
    // dev/cpu_dma_latency at the kernel's no-constraint default, each CPU's resume latency "0" (no
    // constraint) and the present list, as on a real guest.
    bool qos_files = true;
  };

  // The aggregate /dev/cpu_dma_latency reads when nothing is requested (PM_QOS_CPU_LATENCY_DEFAULT_VALUE).
  static constexpr std::int32_t kNoLatencyConstraint = 2000000000;

  FakeSysfs() : FakeSysfs(Options{}) {}
  explicit FakeSysfs(Options o) {
    char tmpl[] = "/tmp/haltpolld-fake-sysfs-XXXXXX";
    if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp");
    root_ = tmpl;
    if (o.haltpoll_module) {
      set_param("guest_halt_poll_ns", "200000");
      set_param("guest_halt_poll_grow", "2");
      set_param("guest_halt_poll_grow_start", "50000");
      set_param("guest_halt_poll_shrink", "2");
      set_param("guest_halt_poll_allow_shrink", "Y");
    }
    write("sys/devices/system/cpu/cpuidle/current_driver", o.driver);
    write("sys/devices/system/cpu/cpuidle/current_governor", o.governor);
    write("sys/devices/system/cpu/cpuidle/available_governors", "ladder menu haltpoll ");
    write("sys/devices/system/cpu/online", o.cpus == 1 ? "0" : "0-" + std::to_string(o.cpus - 1));
    for (int c = 0; c < o.cpus; ++c) {
      if (!o.cpuidle_states) {
        std::filesystem::create_directories(root_ + "/sys/devices/system/cpu/cpu" + std::to_string(c));
        continue;
      }
      set_state(c, 0, "POLL", 0, 0);
      set_state(c, 1, "haltpoll", 0, 0);
    }
    set_proc_stat(0, 0);
    if (o.qos_files) {
      write("sys/devices/system/cpu/present", o.cpus == 1 ? "0" : "0-" + std::to_string(o.cpus - 1));
      set_cpu_dma_latency(kNoLatencyConstraint);
      for (int c = 0; c < o.cpus; ++c) set_resume_latency(c, "0");
    }
  }
  ~FakeSysfs() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  FakeSysfs(const FakeSysfs&) = delete;
  FakeSysfs& operator=(const FakeSysfs&) = delete;

  const std::string& root() const { return root_; }
  std::string params_dir() const { return root_ + "/sys/module/haltpoll/parameters"; }

  void write(const std::string& rel, const std::string& content) const {
    const std::filesystem::path p = root_ + "/" + rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << content << "\n";
  }
  std::string read(const std::string& rel) const {
    std::ifstream f(root_ + "/" + rel);
    std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  void set_param(const std::string& name, const std::string& v) const {
    write("sys/module/haltpoll/parameters/" + name, v);
  }
  std::string param(const std::string& name) const { return read("sys/module/haltpoll/parameters/" + name); }

  // cpuidle state K of CPU c: `time_us` as the kernel reports it (µs).
  void set_state(int c, int k, const std::string& name, std::uint64_t usage, std::uint64_t time_us) const {
    const std::string d = "sys/devices/system/cpu/cpu" + std::to_string(c) + "/cpuidle/state" + std::to_string(k) + "/";
    write(d + "name", name);
    write(d + "usage", std::to_string(usage));
    write(d + "time", std::to_string(time_us));
  }
  // Aggregate "cpu" line with `busy` user ticks, `steal` steal ticks and a fixed idle count.
  void set_proc_stat(std::uint64_t idle, std::uint64_t steal) const {
    write("proc/stat", "cpu  100 0 50 " + std::to_string(idle) + " 0 0 0 " + std::to_string(steal) +
                           " 0 0\ncpu0 50 0 25 0 0 0 0 0 0 0\nintr 0\n");
  }
  // /proc/stat verbatim, for the per-CPU `cpuN` lines.
  void set_proc_stat_text(const std::string& text) const { write("proc/stat", text); }
  // A file holding exactly `bytes` (no newline): a QoS device's content.
  void write_bytes(const std::string& rel, const std::string& bytes) const {
    const std::filesystem::path p = root_ + "/" + rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << bytes;
  }
  // The QoS devices as the kernel reads them out: an s32 in the CPU's byte order (little-endian on
  // x86-64 and arm64).
  static std::string s32_bytes(std::int32_t v) {
    std::string b(sizeof v, '\0');
    std::memcpy(b.data(), &v, sizeof v);
    return b;
  }
  void set_cpu_dma_latency(std::int32_t us) const { write_bytes("dev/cpu_dma_latency", s32_bytes(us)); }
  void set_cpu_wakeup_latency(std::int32_t us) const { write_bytes("dev/cpu_wakeup_latency", s32_bytes(us)); }
  // CPU c's power/pm_qos_resume_latency_us as the kernel shows it: "n/a", "0" or a number of µs.
  void set_resume_latency(int c, const std::string& text) const {
    write("sys/devices/system/cpu/cpu" + std::to_string(c) + "/power/pm_qos_resume_latency_us", text);
  }
  // A process `pid` named `comm` with descriptor 3 open on `target` (a path as /proc shows it).
  void add_holder(int pid, const std::string& comm, const std::string& target) const {
    const std::string d = "proc/" + std::to_string(pid);
    write(d + "/comm", comm);
    std::filesystem::create_directories(root_ + "/" + d + "/fd");
    std::filesystem::create_symlink(target, root_ + "/" + d + "/fd/3");
  }
  // Makes the parameter directory read-only to this process's writes (as EROFS/EACCES would).
  void make_params_unwritable() const {
    for (const auto& e : std::filesystem::directory_iterator(params_dir()))
      std::filesystem::permissions(e.path(), std::filesystem::perms::owner_read | std::filesystem::perms::group_read);
  }

 private:
  std::string root_;
};

// A temporary directory for state files.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/haltpolld-state-XXXXXX";
    if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace testsupport
