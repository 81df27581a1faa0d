#!/usr/bin/env python3
"""Targets, verdicts and plot data of scripts/eval-kernel.sh (docs/tuning.md, "Evaluation";
docs/performance.md, "Method of the real-guest evaluation"). Python 3 standard library only.

  eval-kernel-report.py OUT              writes OUT/summary.md, OUT/summary.json, OUT/change.dat and
                                         prints summary.md
  eval-kernel-report.py --undecided OUT  prints the loads on which a verdict the run stops on is
                                         still undecided (empty: every one is decided)
  eval-kernel-report.py --check OUT      reads back OUT/summary.json and OUT/summary.md and checks
                                         them against OUT/loads.jsonl (exit 1 with one line per fault)

Reads OUT/loads.jsonl (one row per load x setting x round, each with its metric and which way is
better), env.json, run.json, change.jsonl and change-baselines.jsonl (the load-change run of
balanced and of the statics through the same chunks), decisions-change.json, kill9.json.

Statistics. Each load's best static is chosen on the rounds of one parity and judged on the rounds
of the other, both ways (cross-fitting: for an even round the best is the static of best mean over
the odd rounds, and the other way round), so that no round judges the static it chose. A setting's
ratio is the sum of its metric over the judged rounds over the sum of the best static's in the same
rounds (paired by round); its 95 % interval the 2.5th and 97.5th percentiles of that ratio over
BOOTSTRAP resamples of the rounds (with replacement, pairs kept together). A verdict is "met" only
when the point estimate meets the target and the interval's pessimistic end is within the target's
tolerance, "not met" when the interval's optimistic end misses the target, else "undecided".
With one round (a smoke run) the best is chosen on that round and every verdict is undecided.
"""
import json
import math
import os
import random
import statistics
import sys

BOOTSTRAP = 2000
# Closed loops and applications: throughput >= 0.95 x the best static's (latency <= 1.05 x), the
# interval's pessimistic end >= 0.92 x (<= 1.08 x), poll CPU <= the best static's + 2 points (the
# interval's pessimistic end + 3).
RATIO, RATIO_TOL = 0.05, 0.08
POLL_EXTRA, POLL_EXTRA_TOL = 2.0, 3.0
# Where polling cannot pay: poll CPU per CPU (timer, Poisson <= 1 %, idle <= 0.2 %; the
# pessimistic end 1.5 x the bound), latency within the noise of cap 0 (the relative half-width of
# cap 0's own 95 % interval, at least 5 %; the pessimistic end 3 points more), the daemon's own CPU
# at idle <= 0.5 % of one CPU (0.75 %).
COST_POLL = {"timer": 1.0, "poisson": 1.0, "idle": 0.2}
NOISE_FLOOR, NOISE_TOL = 0.05, 0.03
DAEMON_CPU = 0.5
POLICIES = ("balanced", "budget", "latency")
MET, NOT_MET, UNDECIDED = "met", "not met", "undecided"


def load_class(load):
    if load == "idle":
        return "idle"
    if load in ("timer", "poisson"):
        return "cost"
    return "closed"


def is_policy(s):
    return s.split("_")[0] in POLICIES


def fmt(v, nd=2):
    return "n/a" if v is None else ("%.*f" % (nd, v))


def fmt_ci(ci, nd=2):
    return "n/a" if not ci or ci[0] is None else f"[{ci[0]:.{nd}f}, {ci[1]:.{nd}f}]"


def read_jsonl(path):
    if not os.path.exists(path):
        return []
    return [json.loads(l) for l in open(path) if l.strip()]


def read_json(path, default=None):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return default


def percentile_ci(values):
    v = sorted(x for x in values if x is not None and math.isfinite(x))
    if not v:
        return [None, None]
    lo = v[int(math.floor(0.025 * (len(v) - 1)))]
    hi = v[int(math.ceil(0.975 * (len(v) - 1)))]
    return [lo, hi]


def bootstrap(items, stat, rng):
    """Percentile interval of stat over resamples of items (a list of paired tuples)."""
    n = len(items)
    if n == 0:
        return [None, None]
    return percentile_ci(stat([items[rng.randrange(n)] for _ in range(n)]) for _ in range(BOOTSTRAP))


def safe_ratio(a, b):
    return a / b if b else None


def mean(v):
    return sum(v) / len(v) if v else None


# Rows without "metric" (the evaluation before its metric field, and bench_sim_eval's rows in that
# format): the metric each synthetic load always had.
LEGACY = {"pipe": ("us_per_op", "lower"), "rr": ("throughput_per_s", "higher"), "db": ("throughput_per_s", "higher"),
          "timer": ("late_p50_us", "lower"), "poisson": ("rtt_p50_us", "lower")}


def legacy_metric(r):
    if "metric" not in r and r.get("load") in LEGACY:
        key, better = LEGACY[r["load"]]
        r.update({"metric": r.get(key), "better": better, "metric_name": key})


class Run:
    def __init__(self, out):
        self.out = out
        self.rows = read_jsonl(os.path.join(out, "loads.jsonl"))
        self.env = read_json(os.path.join(out, "env.json"), {}) or {}
        self.run = read_json(os.path.join(out, "run.json"), {}) or {}
        self.cell = {}
        self.settings, self.loads = [], []
        for r in self.rows:
            legacy_metric(r)
            self.cell[(r["load"], r["setting"], r["round"])] = r
            if r["setting"] not in self.settings:
                self.settings.append(r["setting"])
            if r["load"] not in self.loads:
                self.loads.append(r["load"])
        # The order of the run's configuration where it names them, else the order seen.
        for key, attr in (("settings", "settings"), ("loads", "loads")):
            named = [x for x in (self.env.get(key) or "").split() if x in getattr(self, attr)]
            setattr(self, attr, named + [x for x in getattr(self, attr) if x not in named])
        # static_<ns>_gs and _gscap (grow_start at ns / 2 or at ns) are diagnostic cells, not statics.
        self.statics = [s for s in self.settings if s.startswith("static_") and not s.endswith(("_gs", "_gscap"))]
        self.stop_settings = [s for s in (self.env.get("stop_settings") or "balanced").split() if s in self.settings]

    def rounds(self, load):
        return sorted({r["round"] for r in self.rows if r["load"] == load})

    def value(self, load, setting, rnd, key="metric"):
        r = self.cell.get((load, setting, rnd))
        return None if r is None else r.get(key)

    def better(self, load):
        for r in self.rows:
            if r["load"] == load and r.get("better"):
                return r["better"]
        return None


def best_static_on(run, load, rounds, better):
    """The static of best mean metric over these rounds (every one of them measured), or None."""
    cand = []
    for s in run.statics:
        v = [run.value(load, s, r) for r in rounds]
        if v and all(x is not None for x in v):
            cand.append((mean(v), s))
    if not cand:
        return None
    return (max if better == "higher" else min)(cand)[1]


def choose_best(run, load):
    """{round: best static for judging that round}, and how each was chosen."""
    rounds = run.rounds(load)
    better = run.better(load)
    odd = [r for r in rounds if r % 2 == 1]
    even = [r for r in rounds if r % 2 == 0]
    choice, chosen = {}, []
    if odd and even:
        for judged, by in ((even, odd), (odd, even)):
            b = best_static_on(run, load, by, better)
            for r in judged:
                choice[r] = b
            chosen.append({"static": b, "judges_rounds": judged, "chosen_on_rounds": by})
        in_sample = False
    else:
        b = best_static_on(run, load, rounds, better)
        choice = {r: b for r in rounds}
        chosen.append({"static": b, "judges_rounds": rounds, "chosen_on_rounds": rounds})
        in_sample = True
    return choice, chosen, in_sample


def chosen_text(chosen, in_sample):
    parts = []
    for c in chosen:
        s = (c["static"] or "none").replace("static_", "")
        judged = ", ".join(map(str, c["judges_rounds"]))
        by = ", ".join(map(str, c["chosen_on_rounds"]))
        parts.append(f"{s} for round(s) {judged} (chosen on {by})")
    return "; ".join(parts) + (" [chosen on the judged round itself: too few rounds]" if in_sample else "")


def daemon_failures(run, load, setting):
    return [r for r in run.rounds(load) if run.value(load, setting, r, "daemon_ok") is False]


def judge_closed(run, load, rng):
    better = run.better(load)
    choice, chosen, in_sample = choose_best(run, load)
    out = {"class": "closed", "better": better, "best_static": chosen, "in_sample": in_sample, "settings": {}}
    for s in run.settings:
        pairs = []
        for r in run.rounds(load):
            b = choice.get(r)
            x, xb = run.value(load, s, r), run.value(load, b, r) if b else None
            px, pb = run.value(load, s, r, "poll_cpu_percent_per_cpu"), run.value(load, b, r, "poll_cpu_percent_per_cpu") if b else None
            if None not in (x, xb, px, pb):
                pairs.append((x, xb, px, pb))

        def ratio(ps):
            return safe_ratio(sum(p[0] for p in ps), sum(p[1] for p in ps))

        def dpoll(ps):
            return mean([p[2] - p[3] for p in ps])

        e = {"n": len(pairs), "ratio": ratio(pairs), "ci": bootstrap(pairs, ratio, rng),
             "poll_delta": dpoll(pairs), "poll_delta_ci": bootstrap(pairs, dpoll, rng)}
        e["verdict"], e["why"] = closed_verdict(e, better, in_sample, daemon_failures(run, load, s))
        out["settings"][s] = e
    return out


def closed_verdict(e, better, in_sample, failed):
    if failed:
        return NOT_MET, f"the daemon did not run through round(s) {failed}"
    if e["ratio"] is None:
        return UNDECIDED, "not measured"
    if e["n"] < 2 or in_sample:
        return UNDECIDED, "too few rounds"
    lo, hi = e["ci"]
    plo, phi = e["poll_delta_ci"]
    if better == "higher":
        point_ok, pess_ok, opt_miss = e["ratio"] >= 1 - RATIO, lo >= 1 - RATIO_TOL, hi < 1 - RATIO
    else:
        point_ok, pess_ok, opt_miss = e["ratio"] <= 1 + RATIO, hi <= 1 + RATIO_TOL, lo > 1 + RATIO
    poll_ok = e["poll_delta"] <= POLL_EXTRA and phi <= POLL_EXTRA_TOL
    if opt_miss:
        return NOT_MET, "the interval misses the ratio"
    if plo > POLL_EXTRA:
        return NOT_MET, "the interval polls more than the best static + 2 points"
    if point_ok and pess_ok and poll_ok:
        return MET, ""
    return UNDECIDED, "the interval straddles the tolerance"


def bound_verdict(point, ci, bound, tol_bound):
    """A quantity that must stay <= bound: met, not met or undecided on its interval."""
    if point is None:
        return UNDECIDED
    if ci[0] is not None and ci[0] > bound:
        return NOT_MET
    if point <= bound and ci[1] is not None and ci[1] <= tol_bound:
        return MET
    return UNDECIDED


def combine(verdicts):
    if NOT_MET in verdicts:
        return NOT_MET
    if all(v == MET for v in verdicts):
        return MET
    return UNDECIDED


def judge_cost(run, load, rng):
    """Timer, Poisson and idle: poll CPU per CPU under its bound, latency within cap 0's noise, and at
    idle the daemon's own CPU."""
    cls = load_class(load)
    rounds = run.rounds(load)
    bound = COST_POLL[load] if load in COST_POLL else 1.0
    zero = "static_0" if "static_0" in run.settings else None
    noise = None
    if cls == "cost" and zero:
        z = [(run.value(load, zero, r),) for r in rounds if run.value(load, zero, r) is not None]
        if z:
            zm = mean([p[0] for p in z])
            zci = bootstrap(z, lambda ps: mean([p[0] for p in ps]), rng)
            half = (zci[1] - zci[0]) / 2 / zm if zm and zci[0] is not None else 0.0
            noise = max(NOISE_FLOOR, half)
    out = {"class": cls, "better": run.better(load), "poll_bound": bound, "latency_noise": noise, "settings": {}}
    for s in run.settings:
        polls = [(run.value(load, s, r, "poll_cpu_percent_per_cpu"),) for r in rounds]
        polls = [p for p in polls if p[0] is not None]
        e = {"n": len(polls), "poll": mean([p[0] for p in polls]),
             "poll_ci": bootstrap(polls, lambda ps: mean([p[0] for p in ps]), rng)}
        parts = [bound_verdict(e["poll"], e["poll_ci"], bound, 1.5 * bound)]
        if cls == "cost" and zero and noise is not None:
            pairs = [(run.value(load, s, r), run.value(load, zero, r)) for r in rounds]
            pairs = [p for p in pairs if None not in p]

            def ratio(ps):
                return safe_ratio(sum(p[0] for p in ps), sum(p[1] for p in ps))

            e.update({"latency_ratio_to_cap0": ratio(pairs), "latency_ci": bootstrap(pairs, ratio, rng)})
            parts.append(bound_verdict(e["latency_ratio_to_cap0"], e["latency_ci"], 1 + noise, 1 + noise + NOISE_TOL))
        if cls == "idle" and is_policy(s):
            cpu = []
            for r in rounds:
                d = run.value(load, s, r, "daemon_cpu_percent_of_one_cpu")
                if d is not None:
                    cpu.append((d + (run.value(load, s, r, "bpf_cpu_percent_of_one_cpu") or 0),))
            e["daemon_cpu"] = mean([p[0] for p in cpu])
            e["daemon_cpu_ci"] = bootstrap(cpu, lambda ps: mean([p[0] for p in ps]), rng)
            e["bpf_counted"] = any(run.value(load, s, r, "bpf_cpu_percent_of_one_cpu") is not None for r in rounds)
            if cpu:  # (rows of bench_sim_eval have no daemon CPU)
                parts.append(bound_verdict(e["daemon_cpu"], e["daemon_cpu_ci"], DAEMON_CPU, 1.5 * DAEMON_CPU))
        failed = daemon_failures(run, load, s)
        if failed:
            e["verdict"], e["why"] = NOT_MET, f"the daemon did not run through round(s) {failed}"
        elif e["n"] < 2:
            e["verdict"], e["why"] = UNDECIDED, "too few rounds"
        else:
            e["verdict"], e["why"] = combine(parts), ""
        out["settings"][s] = e
    return out


def judge_all(run):
    rng = random.Random(20261203)
    targets = {}
    for load in run.loads:
        targets[load] = judge_closed(run, load, rng) if load_class(load) == "closed" else judge_cost(run, load, rng)
    overall = {s: combine([targets[l]["settings"][s]["verdict"] for l in run.loads if s in targets[l]["settings"]])
               for s in run.settings}
    st = [overall[s] for s in run.statics]
    if any(v == MET for v in st):
        no_static = "NO"
    elif st and all(v == NOT_MET for v in st):
        no_static = "yes"
    else:
        no_static = UNDECIDED
    # The loads another round would decide: where a setting the run stops on is undecided and, while
    # "no static meets them all" is undecided, where a static not yet ruled out is.
    pending = []
    for load in run.loads:
        ss = targets[load]["settings"]
        if any(ss.get(s, {}).get("verdict") == UNDECIDED for s in run.stop_settings):
            pending.append(load)
        elif no_static == UNDECIDED and any(
                overall[s] != NOT_MET and ss.get(s, {}).get("verdict") == UNDECIDED for s in run.statics):
            pending.append(load)
    return targets, overall, no_static, pending


def medians_table(run):
    lines = ["| load | metric | " + " | ".join(s.replace("static_", "") for s in run.settings) + " |",
             "|---|---|" + "---|" * len(run.settings)]
    med = {}
    for load in run.loads:
        med[load] = {}
        for s in run.settings:
            rs = [run.cell.get((load, s, r)) for r in run.rounds(load)]
            rs = [r for r in rs if r]

            def m(key):
                v = [r[key] for r in rs if r.get(key) is not None]
                return statistics.median(v) if v else None

            med[load][s] = {"metric": m("metric"), "poll_cpu_percent_per_cpu": m("poll_cpu_percent_per_cpu"),
                            "value_after": m("value_after"), "rounds": len(rs),
                            "daemon_cpu_percent_of_one_cpu": m("daemon_cpu_percent_of_one_cpu")}
        name = next((r.get("metric_name") for r in run.rows if r["load"] == load and r.get("metric_name")), None)
        if name:
            lines.append(f"| {load} | {name} | " + " | ".join(fmt(med[load][s]["metric"]) for s in run.settings) + " |")
        lines.append(f"| {load} | poll CPU %/CPU | " + " | ".join(
            fmt(med[load][s]["poll_cpu_percent_per_cpu"], 3) for s in run.settings) + " |")
    return lines, med


def targets_lines(run, targets):
    lines = []
    for load in run.loads:
        t = targets[load]
        if t["class"] == "closed":
            lines += ["", f"**{load}** ({t['better']} is better): best static "
                          f"{chosen_text(t['best_static'], t['in_sample'])}",
                      "", "| setting | rounds | ratio to best static | 95 % CI | poll CPU Δ points | 95 % CI | verdict |",
                      "|---|---|---|---|---|---|---|"]
            for s, e in t["settings"].items():
                v = e["verdict"] + (f" ({e['why']})" if e["why"] and e["verdict"] != MET else "")
                lines.append(f"| {s} | {e['n']} | {fmt(e['ratio'], 3)} | {fmt_ci(e['ci'], 3)} | "
                             f"{fmt(e['poll_delta'])} | {fmt_ci(e['poll_delta_ci'])} | {v} |")
        else:
            noise = t.get("latency_noise")
            lines += ["", f"**{load}**: poll CPU per CPU ≤ {t['poll_bound']} %"
                          + (f", latency ≤ cap 0's × (1 + its noise {fmt(noise, 3)})" if noise is not None else "")
                          + (", the daemon ≤ 0.5 % of one CPU" if t["class"] == "idle" else ""),
                      "", "| setting | rounds | poll CPU %/CPU | 95 % CI | latency × cap 0 | 95 % CI | daemon % of a CPU | verdict |",
                      "|---|---|---|---|---|---|---|---|"]
            for s, e in t["settings"].items():
                v = e["verdict"] + (f" ({e['why']})" if e["why"] and e["verdict"] != MET else "")
                dc = (fmt(e.get("daemon_cpu"), 3) + " " + fmt_ci(e.get("daemon_cpu_ci"), 3)
                      + ("" if e.get("bpf_counted") else " (eBPF not counted)")) if "daemon_cpu" in e else ""
                lines.append(f"| {s} | {e['n']} | {fmt(e['poll'], 3)} | {fmt_ci(e['poll_ci'], 3)} | "
                             f"{fmt(e.get('latency_ratio_to_cap0'), 3)} | {fmt_ci(e.get('latency_ci'), 3)} | {dc} | {v} |")
    return lines


# ---- the load-change run: whole phases ----
CHANGE_METRIC = {"pipe": ("latency_us", "lower"), "rr": ("throughput_per_s", "higher"),
                 "timer": ("latency_us", "lower"), "idle": (None, None)}


def change_report(out, rng):
    ch = read_jsonl(os.path.join(out, "change.jsonl"))
    if not ch:
        return [], None
    base = read_jsonl(os.path.join(out, "change-baselines.jsonl"))
    try:
        t0 = int(open(os.path.join(out, "change.t0_ns")).read()) / 1e9
    except (OSError, ValueError):
        t0 = None
    decs = ((read_json(os.path.join(out, "decisions-change.json"), {}) or {}).get("parameters") or {}).get("decisions") or []
    by = {"balanced": ch}
    for r in base:
        by.setdefault(r["setting"], []).append(r)
    statics = [s for s in by if s.startswith("static_")]
    lines = ["", "Load-change run (balanced, started with the first phase): every phase judged whole, against "
                 "the statics through the same chunks (best chosen per phase; 95 % interval over the chunks, the "
                 "best chosen again in every resample).",
             "", "| phase | values in force (ns) | changes | balanced | best static | ratio | 95 % CI | poll %/CPU | Δ poll | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    res = []
    for phase in ("pipe", "timer", "rr", "idle"):
        rows = {s: [r for r in rs if r["phase"] == phase] for s, rs in by.items()}
        b_rows = rows["balanced"]
        if not b_rows:
            continue
        start, end = b_rows[0]["t_s"] - b_rows[0]["seconds"], b_rows[-1]["t_s"]
        changes = None
        if t0 is not None:
            changes = sum(1 for d in decs if d.get("guest_halt_poll_ns") != d.get("previous_ns")
                          and start <= d.get("time_ms", 0) / 1e3 - t0 <= end)
        vals = sorted(set(r["value_ns"] for r in b_rows))
        key, better = CHANGE_METRIC[phase]

        def phase_stats(sample):
            """sample: {setting: rows}; (balanced's metric, best static, its metric, poll of each)."""
            def m(rs):
                v = [r[key] for r in rs if r.get(key) is not None]
                return mean(v)

            def poll(rs):
                return mean([r["poll_cpu_percent_per_cpu"] for r in rs])

            mb = m(sample["balanced"]) if key else None
            cand = [(m(sample[s]), s) for s in statics if key and sample.get(s) and m(sample[s]) is not None]
            best = (max if better == "higher" else min)(cand) if cand else (None, None)
            zero = m(sample["static_0"]) if key and sample.get("static_0") else None
            return {"balanced": mb, "best": best[1], "best_metric": best[0], "poll": poll(sample["balanced"]),
                    "best_poll": poll(sample[best[1]]) if best[1] else None, "zero": zero}

        pt = phase_stats(rows)
        ratios, dpolls, zratios, polls = [], [], [], []
        for _ in range(BOOTSTRAP):
            smp = {s: [rs[rng.randrange(len(rs))] for _ in rs] for s, rs in rows.items() if rs}
            st = phase_stats(smp)
            polls.append(st["poll"])
            if st["balanced"] is not None and st["best_metric"]:
                ratios.append(st["balanced"] / st["best_metric"])
                dpolls.append(st["poll"] - st["best_poll"])
            if st["balanced"] is not None and st["zero"]:
                zratios.append(st["balanced"] / st["zero"])
        e = {"phase": phase, "values": vals, "changes": changes, "chunks": len(b_rows), "balanced": pt["balanced"],
             "best_static": pt["best"], "best_metric": pt["best_metric"], "poll": pt["poll"],
             "poll_ci": percentile_ci(polls), "best_poll": pt["best_poll"]}
        if phase in ("pipe", "rr"):
            e["ratio"] = safe_ratio(pt["balanced"], pt["best_metric"])
            e["ci"] = percentile_ci(ratios)
            e["poll_delta"] = None if pt["best_poll"] is None else pt["poll"] - pt["best_poll"]
            e["poll_delta_ci"] = percentile_ci(dpolls)
            e["n"] = len(b_rows)
            if e["ratio"] is None:
                e["verdict"], e["why"] = UNDECIDED, "no baseline"
            else:
                e["verdict"], e["why"] = closed_verdict(e, better, False, [])
        elif phase == "timer":
            e["ratio"] = safe_ratio(pt["balanced"], pt["zero"])
            e["ci"] = percentile_ci(zratios)
            zrows = rows.get("static_0") or []
            zv = [r[key] for r in zrows if r.get(key) is not None]
            noise = NOISE_FLOOR
            if len(zv) > 1:
                zci = percentile_ci(mean([zv[rng.randrange(len(zv))] for _ in zv]) for _ in range(BOOTSTRAP))
                noise = max(NOISE_FLOOR, (zci[1] - zci[0]) / 2 / mean(zv))
            parts = [bound_verdict(pt["poll"], e["poll_ci"], COST_POLL["timer"], 1.5 * COST_POLL["timer"])]
            if e["ratio"] is not None:
                parts.append(bound_verdict(e["ratio"], e["ci"], 1 + noise, 1 + noise + NOISE_TOL))
            e["verdict"], e["why"] = combine(parts), ("" if e["ratio"] is not None else "no cap 0 baseline")
            if e["ratio"] is None and e["verdict"] == MET:
                e["verdict"] = UNDECIDED
        else:
            e["verdict"] = bound_verdict(pt["poll"], e["poll_ci"], COST_POLL["idle"], 1.5 * COST_POLL["idle"])
            e["why"] = ""
        if len(b_rows) < 2 and e["verdict"] == MET:
            e["verdict"], e["why"] = UNDECIDED, "one chunk"
        res.append(e)
        lines.append(f"| {phase} | {', '.join(map(str, vals))} | {fmt(changes, 0)} | {fmt(pt['balanced'])} | "
                     f"{(pt['best'] or 'n/a').replace('static_', '')} {fmt(pt['best_metric'])} | {fmt(e.get('ratio'), 3)} | "
                     f"{fmt_ci(e.get('ci'), 3)} | {fmt(pt['poll'], 3)} | {fmt(e.get('poll_delta'))} | "
                     f"{e['verdict']}{(' (' + e['why'] + ')') if e['why'] and e['verdict'] != MET else ''} |")
    with open(os.path.join(out, "change.dat"), "w") as f:
        idx = {"pipe": 0, "timer": 1, "rr": 2, "idle": 3}
        for r in ch:
            f.write("%.2f %.1f %.3f %s %d\n" % (r["t_s"], r["value_ns"] / 1e3, r["poll_cpu_percent_per_cpu"],
                                               r["latency_us"] if r.get("latency_us") is not None else "NaN",
                                               idx[r["phase"]]))
    return lines, res


def report(out):
    run = Run(out)
    if not run.rows:
        sys.exit(f"eval-kernel-report: no rows in {out}/loads.jsonl")
    targets, overall, no_static, pending = judge_all(run)
    lines = [f"Seed {run.env.get('seed', 'n/a')}; {run.run.get('rounds', 'n/a')} rounds, stopped: "
             f"{run.run.get('stop_reason', 'n/a')}; cells of {run.env.get('static_seconds', '?')} s (statics) and "
             f"{run.env.get('daemon_seconds', '?')} s (the daemon, measured from its start)"
             + (" — SMOKE RUN on a fake tree, not a measurement" if run.env.get("smoke") else "") + ".",
             "", "Medians over the rounds:", ""]
    mlines, med = medians_table(run)
    lines += mlines
    pol = [s for s in run.settings if is_policy(s)]
    if pol:
        lines += ["", "The value each policy's cells ended at (ns), per round:", "",
                  "| load | " + " | ".join(pol) + " |", "|---|" + "---|" * len(pol)]
        for load in run.loads:
            lines.append(f"| {load} | " + " | ".join(
                " ".join(str(run.value(load, s, r, "value_after")) for r in run.rounds(load)
                         if run.value(load, s, r, "value_after") is not None) for s in pol) + " |")
    lines += ["", "Targets (every ratio against the best static chosen on the other rounds; verdict "
                  "\"met\" only with the interval's pessimistic end within the tolerance):"]
    lines += targets_lines(run, targets)
    lines += ["", "| setting | every target |", "|---|---|"]
    lines += [f"| {s} | {overall[s]} |" for s in run.settings]
    lines += ["", f"No static value meets them all: **{no_static}**; balanced meets them all: "
                  f"**{overall.get('balanced', 'not run')}**."]
    if pending:
        lines.append("Undecided on: " + " ".join(pending) + ".")
    rng = random.Random(20261204)
    clines, change = change_report(out, rng)
    lines += clines
    kill = read_json(os.path.join(out, "kill9.json"))
    if kill:
        lines += ["", f"kill -9 and restart: {kill['restore_after_sigkill']} (daemon wrote {kill['written_by_daemon']}, "
                      f"after kill -9 {kill['after_kill_9']}, after restart {kill['after_restart']} with ticks = "
                      f"{kill['restart_ticks_at_check']}, found {kill['found']})"]
    summary = {"env": run.env, "run": run.run, "settings": run.settings, "loads": run.loads, "medians": med,
               "targets": targets, "overall": overall, "no_static_meets_all": no_static,
               "undecided_loads": pending, "change": change, "kill9": kill}
    open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
    json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
    print("\n".join(lines))


def check(out):
    """Reads back what report() wrote; one line per fault."""
    faults = []
    run = Run(out)
    try:
        s = json.load(open(os.path.join(out, "summary.json")))
        md = open(os.path.join(out, "summary.md")).read()
    except (OSError, ValueError) as e:
        return [f"summary unreadable: {e}"]
    if s.get("loads") != run.loads or s.get("settings") != run.settings:
        faults.append("summary.json's loads or settings differ from loads.jsonl's")
    for load in run.loads:
        t = (s.get("targets") or {}).get(load)
        if not t:
            faults.append(f"{load}: no targets")
            continue
        if f"**{load}**" not in md:
            faults.append(f"{load}: not in summary.md")
        for st in run.settings:
            e = (t.get("settings") or {}).get(st)
            if not e:
                faults.append(f"{load}/{st}: no verdict")
                continue
            if e.get("verdict") not in (MET, NOT_MET, UNDECIDED):
                faults.append(f"{load}/{st}: verdict {e.get('verdict')!r}")
            for point, ci in (("ratio", "ci"), ("poll", "poll_ci"), ("poll_delta", "poll_delta_ci")):
                if point in e and e[point] is not None:
                    lo, hi = e[ci]
                    if lo is None or hi is None or not (lo - 1e-9 <= hi):
                        faults.append(f"{load}/{st}: {ci} {e[ci]} is not an interval")
            if t["class"] == "closed" and e.get("ratio") is None:
                faults.append(f"{load}/{st}: no ratio (a metric missing)")
            if st in (s.get("medians") or {}).get(load, {}) and load != "idle" and \
                    s["medians"][load][st].get("metric") is None:
                faults.append(f"{load}/{st}: no metric")
        if t["class"] == "closed":
            for c in t.get("best_static") or []:
                if not c.get("static"):
                    faults.append(f"{load}: no best static chosen")
    if (s.get("overall") or {}).keys() != set(run.settings):
        faults.append("overall verdicts do not cover every setting")
    if s.get("no_static_meets_all") not in ("yes", "NO", UNDECIDED):
        faults.append(f"no_static_meets_all {s.get('no_static_meets_all')!r}")
    return faults


def main(argv):
    if len(argv) == 3 and argv[1] == "--undecided":
        run = Run(argv[2])
        print(" ".join(judge_all(run)[3]) if run.rows else "")
    elif len(argv) == 3 and argv[1] == "--check":
        faults = check(argv[2])
        for f in faults:
            print("eval-kernel-report: " + f, file=sys.stderr)
        sys.exit(1 if faults else 0)
    elif len(argv) == 2:
        report(argv[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
