/* Kernel side of IdleTrace (idle_trace.hpp): aggregates power:cpu_idle, power:guest_halt_poll_ns and
 * sched:sched_wake_idle_without_ipi into per-CPU counters and histograms (idle_trace_abi.h) that user
 * space reads once per tick; in record mode it also writes one ring-buffer record per idle period and
 * limit change. Every tracepoint has a tp_btf and a raw_tp version of the same handler; the loader
 * keeps one of the two (bpf_program__set_autoload) depending on the kernel.
 *
 * No vmlinux.h: the handlers read only tracepoint arguments, which both attach types pass as an
 * array of u64, so the object touches no kernel structure, needs no CO-RE relocation and builds
 * without the build machine's BTF. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "idle_trace_abi.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Set by the loader before load; the verifier prunes the record path when record_mode is 0. */
const volatile __u32 poll_state = 0xffffffffu; /* cpuidle index of POLL; none by default */
const volatile __u32 record_mode = 0;

struct hp_cpu cpus[HP_MAX_CPUS] = {};
__u64 ipi_skipped[HP_MAX_CPUS] = {};
__u64 bad_cpu = 0;        /* events naming a CPU >= HP_MAX_CPUS */
__u64 record_dropped = 0; /* ring buffer full */

/* cpu * HP_HIST_KINDS + kind; max_entries is set by the loader to possible CPUs * kinds. */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(map_flags, BPF_F_MMAPABLE);
  __uint(max_entries, HP_HIST_KINDS);
  __type(key, __u32);
  __type(value, struct hp_hist);
} hists SEC(".maps");

/* Resized by the loader: one page unless recording. */
struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 4096);
} records SEC(".maps");

#define PWR_EVENT_EXIT 0xffffffffu

static __always_inline void seq_bump(struct hp_cpu *c) {
  barrier();
  *(volatile __u64 *)&c->seq = c->seq + 1;
  barrier();
}

static __always_inline void hist_add(__u32 cpu, __u32 kind, __u64 ns) {
  __u32 key = cpu * HP_HIST_KINDS + kind;
  struct hp_hist *h = bpf_map_lookup_elem(&hists, &key);
  if (!h) return;
  /* Bounded and used in one 64-bit register: with a __u32 index clang compared one zero-extended
   * copy and indexed with another, and the verifier of Debian 12's 6.1 kernel (arm64 guest, 2026-12-02)
   * carried no bound to it: "R2 unbounded memory access". */
  __u64 i = hp_hist_index(ns);
  barrier_var(i); /* opaque from here: no second zero-extension after the check */
  if (i >= HP_HIST_BUCKETS) return; /* cannot happen; the verifier wants the bound */
  h->buckets[i]++;
  h->count++;
  h->sum_ns += ns;
  if (ns > h->max_ns) h->max_ns = ns;
}

static __always_inline void emit(__u32 cpu, __u32 kind, __u64 now, __u64 residency, __u32 old_ns, __u32 new_ns,
                                 __u32 grow) {
  if (!record_mode) return;
  struct hp_record *r = bpf_ringbuf_reserve(&records, sizeof(*r), 0);
  if (!r) {
    __sync_fetch_and_add(&record_dropped, 1);
    return;
  }
  r->ts_ns = now;
  r->cpu = cpu;
  r->kind = kind;
  r->residency_ns = residency;
  r->old_ns = old_ns;
  r->new_ns = new_ns;
  r->grow = grow;
  r->pad0 = 0;
  /* No wake-up per record: the reader drains on its own timer, so an idle period costs no irq_work. */
  bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
}

static __always_inline int on_cpu_idle(__u32 state, __u32 cpu) {
  __u64 now = bpf_ktime_get_ns();
  if (cpu >= HP_MAX_CPUS) {
    __sync_fetch_and_add(&bad_cpu, 1);
    return 0;
  }
  barrier_var(cpu);
  cpu &= HP_MAX_CPUS - 1;
  struct hp_cpu *c = &cpus[cpu];
  seq_bump(c);
  if (state == PWR_EVENT_EXIT) {
    if (!c->in_idle) {
      c->unmatched++;
    } else {
      __u64 res = now - c->entry_ns;
      c->in_idle = 0;
      if (c->entered_state == poll_state) {
        c->poll_ns += res;
        c->pending_poll = 1;
        c->pending_poll_ns = res;
        emit(cpu, HP_REC_POLL, now, res, 0, 0, 0);
      } else {
        c->halts++;
        c->halt_ns += res;
        hist_add(cpu, HP_HIST_HALT_RESIDENCY, res);
        if (c->halt_after_poll) {
          c->poll_timeouts++;
          hist_add(cpu, HP_HIST_POLL_HALT, c->pending_poll_ns + res);
          c->halt_after_poll = 0;
        } else {
          hist_add(cpu, HP_HIST_HALT, res);
        }
        emit(cpu, HP_REC_HALT, now, res, 0, 0, 0);
      }
    }
  } else {
    if (c->in_idle) c->unmatched++; /* the exit was missed */
    c->idle_entries++;
    if (state == poll_state) {
      c->poll_entries++;
      if (c->pending_poll) {
        c->poll_hits++;
        hist_add(cpu, HP_HIST_POLL_HIT, c->pending_poll_ns);
      }
      c->halt_after_poll = 0;
    } else {
      /* The haltpoll governor halts right after a poll only when that poll timed out. */
      c->halt_after_poll = c->pending_poll;
    }
    c->pending_poll = 0;
    c->in_idle = 1;
    c->entered_state = state;
    c->entry_ns = now;
  }
  seq_bump(c);
  return 0;
}

static __always_inline int on_limit(__u32 grow, __u32 new_ns, __u32 old_ns) {
  __u32 cpu = bpf_get_smp_processor_id(); /* the governor adjusts the CPU it runs on */
  if (cpu >= HP_MAX_CPUS) return 0;
  barrier_var(cpu);
  cpu &= HP_MAX_CPUS - 1;
  struct hp_cpu *c = &cpus[cpu];
  seq_bump(c);
  c->limit_events++;
  if (grow)
    c->grows++;
  else
    c->shrinks++;
  c->poll_limit_ns = new_ns;
  c->limit_known = 1;
  seq_bump(c);
  emit(cpu, HP_REC_LIMIT, bpf_ktime_get_ns(), 0, old_ns, new_ns, grow);
  return 0;
}

static __always_inline int on_wake_without_ipi(int cpu) {
  __u32 c = cpu;
  if (c >= HP_MAX_CPUS) return 0;
  barrier_var(c); /* else clang drops the mask it knows is redundant, and the verifier needs it */
  c &= HP_MAX_CPUS - 1;
  __sync_fetch_and_add(&ipi_skipped[c], 1);
  return 0;
}

/* TP_PROTO(unsigned int state, unsigned int cpu_id) */
SEC("tp_btf/cpu_idle")
int BPF_PROG(cpu_idle_btf, unsigned int state, unsigned int cpu_id) { return on_cpu_idle(state, cpu_id); }
SEC("raw_tp/cpu_idle")
int BPF_PROG(cpu_idle_raw, unsigned int state, unsigned int cpu_id) { return on_cpu_idle(state, cpu_id); }

/* TP_PROTO(bool grow, unsigned int new, unsigned int old); bool arrives as 0 or 1 in its u64 slot. */
SEC("tp_btf/guest_halt_poll_ns")
int BPF_PROG(limit_btf, unsigned long long grow, unsigned int new_ns, unsigned int old_ns) {
  return on_limit(grow != 0, new_ns, old_ns);
}
SEC("raw_tp/guest_halt_poll_ns")
int BPF_PROG(limit_raw, unsigned long long grow, unsigned int new_ns, unsigned int old_ns) {
  return on_limit(grow != 0, new_ns, old_ns);
}

/* TP_PROTO(int cpu): the target CPU, fired on the waker. */
SEC("tp_btf/sched_wake_idle_without_ipi")
int BPF_PROG(ipi_btf, int cpu) { return on_wake_without_ipi(cpu); }
SEC("raw_tp/sched_wake_idle_without_ipi")
int BPF_PROG(ipi_raw, int cpu) { return on_wake_without_ipi(cpu); }
