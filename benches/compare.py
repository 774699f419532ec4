"""The table of benches/compare.sh: reads the figures (RESULTS_JSON) of every run of the ingest,
search, poll drain and webhook benchmarks for the two binaries and writes one Markdown table: per
metric, every run's figure, the median per binary, new/base, and the spread between the runs of
one binary (max/min), so that a change can be told from noise.

Run files: RUNS/BENCH-SIDE-ROUND.json, BENCH in ingest, search, poll, webhooks; SIDE in base, new; ROUND
from 1. A run that failed has no file: its figures show as "–" and a warning under the table
names it (the exit status is then 1).
"""

import argparse
import hashlib
import json
import os
import statistics

HIGHER, LOWER = "higher", "lower"

# (benchmark, metric, which way is better, the figure in that benchmark's RESULTS_JSON)
METRICS = [
    ("ingest", "durable POST/s", HIGHER, lambda d: d["intake_rps"]),
    ("ingest", "POST p50 (ms)", LOWER, lambda d: d["intake_p50_ms"]),
    ("ingest", "POST p99 (ms)", LOWER, lambda d: d["intake_p99_ms"]),
    ("search", "search p50, all queries (ms)", LOWER, lambda d: d["c_clients"]["intake"]["p50_ms"]),
    ("search", "search p99, all queries (ms)", LOWER, lambda d: d["c_clients"]["intake"]["p99_ms"]),
    ("poll", "poll drain records/s", HIGHER, lambda d: d["records_per_s"]),
    ("webhooks", "webhook deliveries/s", HIGHER, lambda d: d["deliveries_per_s"]),
    ("webhooks", "POST to delivery p50 (ms)", LOWER, lambda d: d["latency_p50_ms"]),
]
SIDES = ("base", "new")


def load_runs(runs_dir, rounds):
    """{(bench, side): [figures dict or None per round]}"""
    runs = {}
    for bench in dict.fromkeys(m[0] for m in METRICS):
        for side in SIDES:
            runs[bench, side] = []
            for r in range(1, rounds + 1):
                path = os.path.join(runs_dir, f"{bench}-{side}-{r}.json")
                runs[bench, side].append(json.load(open(path)) if os.path.exists(path) else None)
    return runs


def fmt(v):
    if v is None:
        return "–"
    if v >= 1000:
        return f"{v:,.0f}"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def spread(values):
    """max/min of a binary's runs: 1.00× when they agree."""
    return max(values) / min(values) if len(values) > 1 and min(values) > 0 else None


def reading(base, new, better):
    """Whether the two binaries' runs tell a change: only when their ranges do not overlap."""
    if len(base) < 2 or len(new) < 2:
        return "one run of a binary: no spread to judge by"
    if min(new) > max(base):
        return "better" if better == HIGHER else "worse"
    if max(new) < min(base):
        return "worse" if better == HIGHER else "better"
    return "within noise"


def metric_row(name, better, base, new):
    cells = [name, better, " · ".join(fmt(v) for v in base), " · ".join(fmt(v) for v in new)]
    base_ok = [v for v in base if v is not None]
    new_ok = [v for v in new if v is not None]
    if not base_ok or not new_ok:
        return "| " + " | ".join(cells + ["–"] * 6) + " |"
    mb, mn = statistics.median(base_ok), statistics.median(new_ok)
    ratio = f"{mn / mb:.2f}×" if mb > 0 else "–"
    sb, sn = spread(base_ok), spread(new_ok)
    cells += [fmt(mb), fmt(mn), ratio,
              f"{sb:.2f}×" if sb else "–", f"{sn:.2f}×" if sn else "–",
              reading(base_ok, new_ok, better)]
    return "| " + " | ".join(cells) + " |"


def figure(runs_of_side, get):
    return [get(d) if d is not None else None for d in runs_of_side]


def warnings(runs):
    """Runs whose figure is not what the table says it is."""
    notes = []
    for side in SIDES:
        for r, d in enumerate(runs["ingest", side], 1):
            if d and d.get("intake_non2xx"):
                notes.append(f"ingest, {side}, round {r}: {d['intake_non2xx']} of "
                             f"{d['intake_requests']} answers were not 2xx, so its POST/s is "
                             "not a rate of durable writes")
        for r, d in enumerate(runs["poll", side], 1):
            if d and d.get("check") != "ok":
                notes.append(f"poll, {side}, round {r}: {d.get('check')}")
        for bench in dict.fromkeys(m[0] for m in METRICS):
            for r, d in enumerate(runs[bench, side], 1):
                if d is None:
                    notes.append(f"{bench}, {side}, round {r}: the run failed (see its log)")
    return notes


def binary(label, path):
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    return f"- {label}: `{path}` (sha256 {digest})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", required=True, help="the directory of the runs' JSON files")
    ap.add_argument("--rounds", type=int, required=True)
    ap.add_argument("--base", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--header", action="append", default=[],
                    help="a line for the report's head (date, machine, sizes...)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    runs = load_runs(a.runs, a.rounds)
    L = ["## Comparing two builds", ""]
    L += a.header
    L += [binary("base", a.base), binary("new", a.new), ""]
    L.append("| metric | better | base runs | new runs | base median | new median | new/base "
             "| base spread | new spread | reading |")
    L.append("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for bench, name, better, get in METRICS:
        L.append(metric_row(name, better, figure(runs[bench, "base"], get),
                            figure(runs[bench, "new"], get)))
    L += ["",
          "Runs in the order they ran (round 1 first). new/base is the ratio of the medians; a "
          "spread is the largest of a binary's runs over its smallest. The reading calls a "
          "change only when the two binaries' runs do not overlap; otherwise the difference "
          "is within what this machine gives between runs of one binary."]
    notes = warnings(runs)
    if notes:
        L += [""] + [f"- warning: {n}" for n in notes]
    text = "\n".join(L) + "\n"
    with open(a.out, "w") as f:
        f.write(text)
    print(text, end="")
    return 1 if notes else 0


if __name__ == "__main__":
    raise SystemExit(main())
