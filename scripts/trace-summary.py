#!/usr/bin/env python3
"""Summarise idle-period recordings in `haltpolld record`'s format, real or simulated.

The format (docs/kernel-signals.md, "Recording"): one line per idle state's residency, `cpu POLL|halt
ns`, in time order; a POLL line followed on the same CPU by a halt line is a poll that timed out, a
POLL line followed by anything else ended with a wake-up; `# limit cpu old new grow|shrink` is the
governor's adjustment after a halt (tracepoint power:guest_halt_poll_ns); `# haltpoll k=v ...` the
parameters in force; `# end: S s, ...` the recording's length (a sibling `.wall_us` file, the load's
wall time in microseconds, takes precedence). `haltpolld record` writes it on a
guest, `haltpolld simulate --guest --record` for the simulated guest, and the traces of
../shared/real-guest/traces/ (tests/data/real-guest/, compressed with xz) were made with perf in the
same shape (their length is in a sibling `LOAD-CAP.wall_us`, in microseconds).

For each file, one row: rates per second (entries, polls, halts, limit changes) and, what the rates
alone do not show, the shapes the governor acts on: the share of polls that time out, the residency
of a poll that ends with a wake-up, of a halt after a timed-out poll (the trap at grow_start: a CPU
whose limit L sits below the cap polls L and halts for the rest of the wait; when that rest is
shorter than L nothing grows) and of a halt without a poll before it, with the share of halts of
10 µs or less (those start a limit under a cap of 10000). Quantiles are of the residencies in µs.

Rates are per CPU: over the CPUs the file has lines of (the traces of ../shared/real-guest/traces/
hold CPU 0 only), or over the one --cpu names.

Usage: scripts/trace-summary.py [--json] [--cpu N] [--seconds S] FILE...
  --cpu N      only CPU N's lines (a simulated guest's CPU 0 against a real trace of CPU 0)
  --seconds S  the recording's length when it has no sibling .wall_us file and no `# end:` line
"""
import argparse
import json
import lzma
import os
import sys


class TraceError(Exception):
    pass


def quantiles(values, qs=(0.1, 0.5, 0.9)):
    if not values:
        return [None for _ in qs]
    v = sorted(values)
    return [v[min(len(v) - 1, int(q * len(v)))] / 1000.0 for q in qs]


def open_text(path):
    """A recording, or one compressed with xz (tests/data/real-guest keeps them so)."""
    return lzma.open(path, "rt") if path.endswith(".xz") else open(path)


def seconds_of(path, given):
    """The recording's length: the load's wall time in a sibling .wall_us file (the recorder may run
    a little before and after the load), else its `# end:` line, else --seconds."""
    name = path[: -len(".xz")] if path.endswith(".xz") else path
    base = name[: -len(".idle.txt")] if name.endswith(".idle.txt") else os.path.splitext(name)[0]
    wall = base + ".wall_us"
    if os.path.exists(wall):
        with open(wall) as f:
            try:
                return float(f.read().split()[0]) / 1e6, "wall_us"
            except (IndexError, ValueError):
                raise TraceError(f"{wall}: not a number of microseconds")
    with open_text(path) as f:
        for line in f:
            if line.startswith("# end:"):
                try:
                    return float(line.split()[2]), "# end"
                except (IndexError, ValueError):
                    raise TraceError(f"{path}: unreadable '# end:' line: {line.strip()}")
    if given:
        return given, "--seconds"
    raise TraceError(f"{path}: no '# end:' line, no {os.path.basename(wall)}: give --seconds")


def summarise(path, given_seconds=None, only_cpu=None):
    seconds, source = seconds_of(path, given_seconds)
    if seconds <= 0:
        raise TraceError(f"{path}: a length of {seconds} s")
    params = {}
    last = {}  # cpu -> "POLL" residency pending (a poll not yet known to have timed out)
    polls = halts = timed_out = 0
    hits, after_timeout, bare, timeout_polls = [], [], [], []
    grows = shrinks = changes = to_zero = 0
    cpus = set()
    with open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            if fields[0] == "#":
                if len(fields) >= 2 and fields[1] == "haltpoll":
                    for kv in fields[2:]:
                        k, _, v = kv.partition("=")
                        params[k] = v
                elif len(fields) >= 2 and fields[1] == "limit":
                    if len(fields) != 6 or fields[5] not in ("grow", "shrink"):
                        raise TraceError(f"{path}:{lineno}: expected '# limit cpu old new grow|shrink'")
                    try:
                        cpu, old, new = int(fields[2]), int(fields[3]), int(fields[4])
                    except ValueError:
                        raise TraceError(f"{path}:{lineno}: expected numbers in '{line.strip()}'")
                    if only_cpu is not None and cpu != only_cpu:
                        continue
                    if fields[5] == "grow":
                        grows += 1
                    else:
                        shrinks += 1
                        to_zero += new == 0 and old != 0
                    changes += new != old
                continue
            if len(fields) != 3 or fields[1] not in ("POLL", "halt"):
                raise TraceError(f"{path}:{lineno}: expected 'cpu POLL|halt residency_ns'")
            try:
                cpu, ns = int(fields[0]), int(fields[2])
            except ValueError:
                raise TraceError(f"{path}:{lineno}: expected numbers in '{line.strip()}'")
            if only_cpu is not None and cpu != only_cpu:
                continue
            cpus.add(cpu)
            pending = last.pop(cpu, None)
            if fields[1] == "POLL":
                polls += 1
                if pending is not None:
                    hits.append(pending)
                last[cpu] = ns
            else:
                halts += 1
                if pending is not None:
                    timed_out += 1
                    timeout_polls.append(pending)
                    after_timeout.append(ns)
                else:
                    bare.append(ns)
    hits.extend(last.values())  # a last poll with nothing after it: counted as ended by a wake-up
    all_halts = after_timeout + bare
    if not cpus:
        raise TraceError(f"{path}: no idle periods" + ("" if only_cpu is None else f" of CPU {only_cpu}"))
    per_cpu = seconds * len(cpus)
    row = {
        "file": path,
        "seconds": round(seconds, 3),
        "seconds_from": source,
        "cpus": sorted(cpus),
        "cap_ns": int(params["guest_halt_poll_ns"]) if params.get("guest_halt_poll_ns", "").isdigit() else None,
        "entries_per_s": round((polls + halts) / per_cpu),
        "polls_per_s": round(polls / per_cpu),
        "halts_per_s": round(halts / per_cpu),
        "timed_out_share": round(timed_out / polls, 4) if polls else None,
        "poll_hit_us": quantiles(hits),
        "timed_out_poll_us": quantiles(timeout_polls),
        "halt_after_timeout_us": quantiles(after_timeout),
        "halt_bare_us": quantiles(bare),
        "halts_le_10us_share": round(sum(1 for h in all_halts if h <= 10000) / len(all_halts), 4) if all_halts else None,
        "limit_grows_per_s": round(grows / per_cpu, 1),
        "limit_shrinks_per_s": round(shrinks / per_cpu, 1),
        "limit_changes_per_s": round(changes / per_cpu, 1),
        "limit_to_zero_per_s": round(to_zero / per_cpu, 1),
    }
    return row


def fmt_q(q):
    return "/".join("-" if x is None else f"{x:.1f}" for x in q)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one JSON object per file")
    ap.add_argument("--seconds", type=float, help="length of a recording that does not say it")
    ap.add_argument("--cpu", type=int, help="only this CPU's lines")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args(argv)
    rows = []
    for p in a.files:
        try:
            rows.append(summarise(p, a.seconds, a.cpu))
        except (OSError, TraceError) as e:
            print(f"trace-summary: {e}", file=sys.stderr)
            return 1
    if a.json:
        for r in rows:
            print(json.dumps(r))
        return 0
    print("| file | s | CPUs | entries/s per CPU | polls/s | halts/s | polls timed out | poll hit p10/50/90 µs "
          "| timed-out poll | halt after it | halt without poll | halts ≤ 10 µs | limit grows/s | shrinks/s | to 0/s |")
    print("|---|---:|---|---:|---:|---:|---:|---|---|---|---|---:|---:|---:|---:|")
    for r in rows:
        share = "-" if r["timed_out_share"] is None else f"{100 * r['timed_out_share']:.2f} %"
        cpus = ",".join(map(str, r["cpus"]))
        le10 = "-" if r["halts_le_10us_share"] is None else f"{100 * r['halts_le_10us_share']:.2f} %"
        print(f"| {os.path.basename(r['file'])} | {r['seconds']:.2f} | {cpus} | {r['entries_per_s']} | {r['polls_per_s']} "
              f"| {r['halts_per_s']} | {share} | {fmt_q(r['poll_hit_us'])} | {fmt_q(r['timed_out_poll_us'])} "
              f"| {fmt_q(r['halt_after_timeout_us'])} | {fmt_q(r['halt_bare_us'])} | {le10} "
              f"| {r['limit_grows_per_s']} | {r['limit_shrinks_per_s']} | {r['limit_to_zero_per_s']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
