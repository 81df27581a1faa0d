/* The layout shared by the eBPF program (idle_trace.bpf.c) and its loader (idle_trace.cpp): per-CPU
 * counters in the program's .bss, one log-linear histogram per CPU and outcome in an mmapable array
 * map, and the ring-buffer record of `haltpolld record`. Plain C so that both clang -target bpf and
 * the C++ compiler read the same definitions; every field is a fixed-width kernel type so the two
 * sides agree on offsets without BTF.
 *
 * Concurrency contract: each CPU's counters and histograms are written only by the program running
 * on that CPU (power:cpu_idle and power:guest_halt_poll_ns fire on the CPU they describe), inside a
 * sequence count (`seq` odd while an update is in progress) that lets a reader take a consistent
 * copy of one CPU by retrying; the store order that this relies on is the compiler barrier plus the
 * architecture's store ordering (x86 TSO; on weakly ordered CPUs a reader may see at most the one
 * event in progress torn). ipi_skipped[] is written by the waking CPU with an atomic add and is
 * read without the sequence count. */
#ifndef HALTPOLLD_BPF_IDLE_TRACE_ABI_H
#define HALTPOLLD_BPF_IDLE_TRACE_ABI_H

#include <linux/types.h>

/* Bound of the .bss arrays (a power of two: the program masks with it); the loader refuses a
 * machine with more possible CPUs. */
#define HP_MAX_CPUS 1024u

/* Must equal haltpoll::LatencyHistogram (include/haltpoll/latency_histogram.hpp): 0..15 exact, then
 * 16 linear sub-buckets per power of two. tests/bpf checks hp_hist_index against index_of. */
#define HP_HIST_SUB_BITS 4u
#define HP_HIST_SUBS (1u << HP_HIST_SUB_BITS)
#define HP_HIST_BUCKETS ((64u - HP_HIST_SUB_BITS + 1u) * HP_HIST_SUBS)

enum hp_hist_kind {
  HP_HIST_POLL_HIT = 0,       /* a poll ended by a wake-up: its POLL residency */
  HP_HIST_POLL_HALT = 1,      /* a poll that timed out and the halt after it: the sum of both */
  HP_HIST_HALT = 2,           /* a halt not preceded by a poll: its residency */
  HP_HIST_HALT_RESIDENCY = 3, /* every halt's residency (the kernel governor's block_ns) */
  HP_HIST_KINDS = 4,
};

struct hp_hist {
  __u64 count;
  __u64 sum_ns;
  __u64 max_ns;
  __u64 buckets[HP_HIST_BUCKETS];
};

/* One CPU's cumulative counters and the state of its current idle period, 128-byte aligned so that
 * two CPUs never write the same cache line (nor its adjacent-line prefetch pair). */
struct hp_cpu {
  __u64 seq;
  __u64 idle_entries;  /* every cpu_idle entry event, whatever the state */
  __u64 poll_entries;  /* entries into the POLL state */
  __u64 poll_hits;     /* polls whose next idle entry was not a halt: ended by a wake-up */
  __u64 poll_timeouts; /* polls followed by a halt (counted when that halt ends) */
  __u64 halts;         /* exits from a non-POLL state */
  __u64 poll_ns;       /* POLL residency, sum */
  __u64 halt_ns;       /* non-POLL residency, sum */
  __u64 limit_events;  /* power:guest_halt_poll_ns events */
  __u64 grows;         /* ... of which the governor's grow branch */
  __u64 shrinks;       /* ... and its shrink branch */
  __u64 unmatched;     /* an exit without an entry, or an entry while already idle (attached mid-period) */
  __u32 poll_limit_ns; /* the last event's `new` */
  __u32 limit_known;   /* 1 once an event was seen */
  /* The period in progress. */
  __u64 entry_ns;
  __u64 pending_poll_ns; /* a finished poll whose outcome the next entry decides */
  __u32 entered_state;
  __u8 in_idle;
  __u8 pending_poll;
  __u8 halt_after_poll; /* the halt in progress follows a poll that timed out */
  __u8 pad0;
} __attribute__((aligned(128)));

/* Ring-buffer record (record mode only). */
enum hp_record_kind { HP_REC_POLL = 1, HP_REC_HALT = 2, HP_REC_LIMIT = 3 };
struct hp_record {
  __u64 ts_ns;
  __u32 cpu;
  __u32 kind;
  __u64 residency_ns; /* POLL/HALT */
  __u32 old_ns;       /* LIMIT */
  __u32 new_ns;       /* LIMIT */
  __u32 grow;         /* LIMIT: 1 grow, 0 shrink */
  __u32 pad0;
};

/* floor(log2(v)) for v > 0 without a count-leading-zeros instruction, which eBPF lacks. */
static inline __u32 hp_log2_u64(__u64 v) {
  __u32 r = 0;
  if (v >> 32) { v >>= 32; r += 32; }
  if (v >> 16) { v >>= 16; r += 16; }
  if (v >> 8) { v >>= 8; r += 8; }
  if (v >> 4) { v >>= 4; r += 4; }
  if (v >> 2) { v >>= 2; r += 2; }
  if (v >> 1) { r += 1; }
  return r;
}

/* LatencyHistogram::index_of, the same arithmetic. */
static inline __u32 hp_hist_index(__u64 ns) {
  if (ns < HP_HIST_SUBS) return ns; /* implicit narrowing: no C-style cast for C++'s -Wold-style-cast */
  __u32 k = hp_log2_u64(ns);
  __u32 shift = k - HP_HIST_SUB_BITS;
  __u32 sub = (ns >> shift) & (HP_HIST_SUBS - 1u);
  return (k - HP_HIST_SUB_BITS + 1u) * HP_HIST_SUBS + sub;
}

#endif
