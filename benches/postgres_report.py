#!/usr/bin/env python3
"""The report of benches/postgres.sh: the Markdown report, and with --json the key figures,
from the files the script wrote in its figures folder (--figures; the script keeps a copy of
the last run's in benches/results/postgres-figures/, so that the report can be made again):

  meta.txt                  the run's facts: date, commit, machine, settings of the run
  pg.txt                    PostgreSQL's version and settings, the disk's fdatasync time
  ceiling-{plain,trgm}.*    pgbench's report (.pgbench), latency percentiles from its log
                            (.lat), rows stored (.rows), CPU snapshots (.cpu0, .cpu1)
  pg1.*, pg2.*, redb.*      wrk's reports with post.lua's "key value" lines (.wrk; pg2 has
                            one per node, .node1.wrk and .node2.wrk), CPU snapshots, the
                            ingest writer's account of the run (.writer)
  pg.rows                   average stored row of intake's records table
  index.txt, index.cpu0-3   the trigram index's cost per row (step `index`): rows and batch,
                            CPU snapshots around the batches without the index, those with
                            it and the bulk build
  search-meta.json          the data set (benches/search_gen.py)
  search-{pg,redb}-*.json   the load (-load), wrk's latencies (-native), the Python
                            client's (-py); .idle and .sizes

A step that was not run has no files; its part of the report says so. CPU snapshots are
clock ticks (--clk-tck per second) of intake, of all PostgreSQL processes, of the load
generator and of the whole machine (see cpu_snapshot in postgres.sh).
"""

import argparse
import glob
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import search_queries  # noqa: E402
from search_bench import LIMIT, fmt_bytes, fmt_ms, overall, p50_p99, percentile, ratio  # noqa: E402


def kv(path):
    """{key: value} of a file of "key value" lines (the value is the rest of the line);
    {} when the file is missing."""
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            key, _, value = line.strip().partition(" ")
            if key:
                out[key] = value
    return out


def num(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def load_json(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def cpu(fig, name, clk_tck):
    """CPU seconds used during run NAME by intake, PostgreSQL, the load generator and the
    machine (busy, total), and the wall time; None when the run has no snapshots."""
    a, b = kv(os.path.join(fig, f"{name}.cpu0")), kv(os.path.join(fig, f"{name}.cpu1"))
    if not a or not b:
        return None
    d = {k: num(b[k]) - num(a[k]) for k in a if k in b}
    out = {k: d[k] / clk_tck for k in ("intake", "pg", "client", "machine_busy", "machine_total")}
    out["wall_s"] = d["time"]
    return out


def index_costs(fig, clk_tck):
    """PostgreSQL's CPU µs per row of the step `index`: batches without the index, batches
    with it, the bulk build; with the rows, the batch and each phase's wall seconds. None when
    the step did not run."""
    facts = kv(os.path.join(fig, "index.txt"))
    snaps = [kv(os.path.join(fig, f"index.cpu{i}")) for i in range(4)]
    if not facts or not all(snaps):
        return None
    rows = int(facts["rows"])
    out = {"rows": rows, "batch": int(facts["batch"])}
    for phase, (a, b) in zip(("plain", "trgm", "bulk"), zip(snaps, snaps[1:])):
        out[phase] = {"us": (num(b["pg"]) - num(a["pg"])) / clk_tck * 1e6 / rows,
                      "wall_s": num(b["time"]) - num(a["time"])}
    return out


def pgbench_run(fig, name, clk_tck):
    """Figures of a pgbench run, None when it did not run."""
    report = os.path.join(fig, f"{name}.pgbench")
    if not os.path.exists(report):
        return None
    r = {"kind": "pgbench"}
    with open(report) as f:
        for line in f:
            line = line.strip()
            if line.startswith("tps = "):
                r["rps"] = num(line.split()[2])
            elif line.startswith("number of transactions actually processed:"):
                r["requests"] = int(line.split(":")[1].split()[0])
            elif line.startswith("number of failed transactions:"):
                r["failed"] = int(line.split(":")[1].split()[0])
    lat = kv(os.path.join(fig, f"{name}.lat"))
    r["p50_ms"], r["p99_ms"] = num(lat.get("p50_ms")), num(lat.get("p99_ms"))
    r["rows"] = kv(os.path.join(fig, f"{name}.rows"))
    r["cpu"] = cpu(fig, name, clk_tck)
    return r


def wrk_run(fig, name, clk_tck):
    """Figures of a wrk run (the sum over its wrk processes), None when it did not run."""
    files = sorted(glob.glob(os.path.join(fig, f"{name}.wrk"))
                   + glob.glob(os.path.join(fig, f"{name}.node*.wrk")))
    if not files:
        return None
    parts = [kv(f) for f in files]
    r = {"kind": "wrk", "parts": parts}
    r["rps"] = sum(num(p.get("rps")) or 0 for p in parts)
    r["requests"] = sum(int(p.get("requests", 0)) for p in parts)
    r["non2xx"] = sum(int(p.get("non2xx", 0)) for p in parts)
    r["socket_errors"] = sum(int(p.get("socket_errors", 0)) for p in parts)
    # Percentiles of two wrk processes do not add up; the slower process's are given.
    r["p50_ms"] = max(num(p.get("p50_ms")) or 0 for p in parts)
    r["p99_ms"] = max(num(p.get("p99_ms")) or 0 for p in parts)
    writer = os.path.join(fig, f"{name}.writer")
    r["writer"] = [l.strip() for l in open(writer)] if os.path.exists(writer) else []
    r["cpu"] = cpu(fig, name, clk_tck)
    return r


def rounds_of(fig, kind, reader, clk_tck):
    """The runs of KIND, one per round (files KIND.1.*, KIND.2.*, ...), each with its CPU µs
    per write (intake, pg, client) and the rest of the machine's cores."""
    out = []
    while True:
        r = reader(fig, f"{kind}.{len(out) + 1}", clk_tck)
        if r is None:
            return out
        c, n = r.get("cpu"), r.get("requests")
        r["us"] = {k: us_per(c[k], n) if c else None for k in ("intake", "pg", "client")}
        if r["kind"] == "pgbench":
            r["us"]["intake"] = None
        r["rest"] = (max(0.0, (c["machine_busy"] - c["intake"] - c["pg"] - c["client"])
                         / c["wall_s"]) if c else None)
        r["busy"] = pct(c["machine_busy"], c["machine_total"]) if c else None
        out.append(r)


def median_of(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def aggregate(rounds):
    """One figure per kind from its rounds: medians of the rates, percentiles and CPU µs per
    write; sums of the error counts; None when the kind did not run."""
    if not rounds:
        return None
    agg = {"kind": rounds[0]["kind"], "rounds": rounds}
    for key in ("rps", "p50_ms", "p99_ms", "rest", "busy"):
        agg[key] = median_of([r.get(key) for r in rounds])
    agg["us"] = {k: median_of([r["us"][k] for r in rounds]) for k in ("intake", "pg", "client")}
    for key in ("failed", "non2xx", "socket_errors"):
        agg[key] = sum(r.get(key) or 0 for r in rounds)
    writers = []
    for r in rounds:
        for w in writer_figures(r):
            # The writers' commit time over the run's: how many were committing on average
            # (their figures cover the node's life, the run almost all of it).
            w["busy"] = (w["writes"] * w["us_per_write"] / 1e6 / r["cpu"]["wall_s"]
                         if r.get("cpu") else None)
            writers.append(w)
    agg["writer"] = ({k: median_of([w[k] for w in writers])
                      for k in ("writes", "commits", "average", "us_per_write", "busy",
                                "writers")}
                     if writers else None)
    return agg


def writer_figures(run):
    """The ingest writer lines of a run (one per node) as numbers: writes, commits, average
    batch, µs of commit time per write (the writers' together), writers (1 when the line
    predates several)."""
    out = []
    for line in run.get("writer") or []:
        m = re.match(r"(\d+) writes in (\d+) commits \(average ([\d.]+), largest \d+\), "
                     r"([\d.]+) µs of commit time per write(?:, (\d+) writer)?", line)
        if m:
            out.append({"writes": int(m[1]), "commits": int(m[2]), "average": float(m[3]),
                        "us_per_write": float(m[4]), "writers": int(m[5] or 1)})
    return out


def us_per(seconds, requests):
    if seconds is None or not requests:
        return None
    return seconds * 1e6 / requests


def fmt_int(v):
    return "–" if v is None else f"{v:,.0f}"


def fmt_us(v):
    return "–" if v is None else f"{v:,.0f}"


def pct(a, b):
    if a is None or not b:
        return None
    return 100.0 * a / b


def paired(a, b):
    """The two {query: [ms]} dicts with each query's samples cut to the same number on both
    sides (the first ones), so that a query weighs the same in both sides' percentiles (wrk
    gets more answers of a fast query within its time); a query one side has no sample of
    is left out of both, and listed (third value)."""
    pa, pb, missing = {}, {}, []
    for q in set(a) | set(b):
        n = min(len(a.get(q, [])), len(b.get(q, [])))
        if n == 0:
            missing.append(q)
            continue
        pa[q], pb[q] = a[q][:n], b[q][:n]
    return pa, pb, sorted(missing)


def search_table(a, b, labels):
    """Per-class p50/p99 table (Markdown lines) of two {query: [ms]} dicts (cut with
    paired() first)."""
    la, lb = labels
    L = [f"| class | {la} p50 | {lb} p50 | {la} / {lb} | {la} p99 | {lb} p99 | {la} / {lb} |",
         "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    qs = search_queries.all_queries()
    all_a, all_b = [], []
    for cls in list(search_queries.CLASSES) + ["**all**"]:
        if cls == "**all**":
            av, bv = all_a, all_b
        else:
            cq = [q for c, q in qs if c == cls]
            av = [v for q in cq for v in a.get(q, [])]
            bv = [v for q in cq for v in b.get(q, [])]
            all_a += av
            all_b += bv
        (a50, a99), (b50, b99) = p50_p99(av), p50_p99(bv)
        L.append(f"| {cls} | {fmt_ms(a50)} | {fmt_ms(b50)} | {ratio(a50, b50)} | "
                 f"{fmt_ms(a99)} | {fmt_ms(b99)} | {ratio(a99, b99)} |")
    return L


class Meta:
    """The run's facts from meta.txt (see postgres.sh): numbers as numbers."""

    def __init__(self, facts):
        for key in ("date", "commit", "machine", "duration", "elapsed", "loadavg"):
            setattr(self, key, facts.get(key, "–"))
        for key in ("nproc", "connections", "threads", "body_bytes", "records", "reps"):
            setattr(self, key, int(facts.get(key, "0")))
        self.clk_tck = float(facts.get("clk_tck", "100"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--figures", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--json")
    args = ap.parse_args()
    fig = args.figures
    a = Meta(kv(os.path.join(fig, "meta.txt")))
    tck = a.clk_tck

    pg = kv(os.path.join(fig, "pg.txt"))
    readers = {"ceiling-plain": pgbench_run, "ceiling-trgm": pgbench_run, "pg1": wrk_run,
               "pg2": wrk_run, "redb": wrk_run}
    runs = {k: aggregate(rounds_of(fig, k, reader, tck)) for k, reader in readers.items()}
    labels = {
        "ceiling-plain": "pgbench INSERT, no index (the database's ceiling)",
        "ceiling-trgm": "pgbench INSERT, with the gin_trgm_ops index",
        "pg1": "intake on PostgreSQL, 1 node",
        "pg2": "intake on PostgreSQL, 2 nodes (sum)",
        "redb": "intake on redb",
    }
    half = a.connections // 2
    n_rounds = max((len(r["rounds"]) for r in runs.values() if r), default=0)

    L = ["## PostgreSQL backend benchmark", ""]
    L.append(f"- date: {a.date}, commit: {a.commit}")
    L.append(f"- machine: {a.machine}; whole run {a.elapsed} s, load average at its start "
             f"{a.loadavg}")
    settings = ", ".join(f"{k[len('setting.'):]}={v}" for k, v in pg.items()
                         if k.startswith("setting."))
    L.append(f"- PostgreSQL {pg.get('pg_version', '–')}, a throwaway cluster on 127.0.0.1: "
             f"{settings}; the disk: 4 KiB pwrite + fdatasync takes "
             f"{pg.get('fsync_ms', '–')} ms")
    L.append(f"- every write run lasts {a.duration} with {a.connections} connections: pgbench "
             f"`-c {a.connections} -j {a.threads} -M prepared`, one single-row INSERT per "
             f"transaction; wrk `-t{a.threads} -c{a.connections}` with benches/post.lua "
             f"(keep-alive POSTs of a {a.body_bytes}-byte JSON record); the two-node run is "
             f"two wrk `-t{max(1, a.threads // 2)} -c{half}` at once, one per node. Client, "
             f"intake and PostgreSQL share the machine. {n_rounds} rounds of every run, "
             "interleaved (each round runs them all in the order of the table); the figures "
             "are the medians of the rounds.")
    L.append("")

    # ------------------------------------------------------------ durable writes
    L.append("### Durable writes")
    L.append("")
    L.append("| run | writes/s | each round | p50 | p99 | non-2xx / failed |")
    L.append("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, r in runs.items():
        if r is None:
            L.append(f"| {labels[name]} | skipped | | | | |")
            continue
        bad = r["failed"] if r["kind"] == "pgbench" else r["non2xx"]
        if r["socket_errors"]:
            bad = f"{bad} (+{r['socket_errors']} socket errors)"
        each = " · ".join(fmt_int(x.get("rps")) for x in r["rounds"])
        L.append(f"| {labels[name]} | {fmt_int(r['rps'])} | {each} | {fmt_ms(r['p50_ms'])} ms | "
                 f"{fmt_ms(r['p99_ms'])} ms | {bad} |")
    L.append("")
    plain, trgm, pg1, pg2, redb = (runs[k] for k in ("ceiling-plain", "ceiling-trgm", "pg1",
                                                     "pg2", "redb"))
    rps = {k: (r or {}).get("rps") for k, r in runs.items()}
    if pg1 and (plain or trgm):
        vs_plain, vs_trgm = pct(rps["pg1"], rps["ceiling-plain"]), pct(rps["pg1"], rps["ceiling-trgm"])
        verdict = "–" if vs_plain is None else ("met" if vs_plain >= 50 else "NOT met")
        L.append(f"- intake on PostgreSQL, 1 node, as % of pgbench's durable INSERTs: "
                 f"{'–' if vs_plain is None else f'{vs_plain:.0f} %'} of the table without "
                 f"the index (the target, ≥ 50 %: {verdict}), "
                 f"{'–' if vs_trgm is None else f'{vs_trgm:.0f} %'} of the table with it "
                 "(intake's table has it)")
    if pg1 and pg2:
        L.append(f"- 2 nodes / 1 node: {rps['pg2'] / rps['pg1']:.2f}×; per node in each round: "
                 + "; ".join(" + ".join(fmt_int(num(p.get("rps"))) for p in x["parts"])
                             for x in pg2["rounds"]))
    if pg1 and redb:
        L.append(f"- intake on PostgreSQL / intake on redb: {rps['pg1'] / rps['redb']:.2f}×")
    for name, short in (("pg1", "PostgreSQL, 1 node"), ("pg2", "PostgreSQL, 2 nodes"),
                        ("redb", "redb")):
        w = (runs[name] or {}).get("writer")
        if w:
            L.append(f"- ingest writers on {short} (each node, median of the rounds): "
                     f"{w['writers']:.0f} writer(s), {w['average']:.1f} writes per commit, "
                     f"{w['us_per_write']:,.0f} µs of commit time per write")
    row_pg = kv(os.path.join(fig, "pg.rows")).get("avg_row_bytes")
    row_bench = ((plain or trgm or {"rounds": [{}]})["rounds"][0].get("rows") or {}).get("avg_row_bytes")
    if row_pg or row_bench:
        L.append(f"- stored per record (payload + folded, bytes): intake {row_pg or '–'}, "
                 f"pgbench {row_bench or '–'} (intake's payload is its row JSON: the record "
                 "and its metadata)")
    for name in ("ceiling-plain", "ceiling-trgm"):
        for i, x in enumerate((runs[name] or {"rounds": []})["rounds"], 1):
            stored = x["rows"].get("rows")
            if stored and x.get("requests") is not None and int(stored) != x["requests"]:
                L.append(f"- WARNING: {labels[name]}, round {i}: {stored} rows stored, "
                         f"{x['requests']} transactions reported")
    L.append("")

    # ------------------------------------------------------------ CPU
    L.append("### CPU per write")
    L.append("")
    L.append(f"CPU time (user + system, from `/proc`) during each run divided by the writes it "
             f"completed, in µs (medians of the rounds). Rest of the machine: what else ran "
             f"meanwhile (other processes), in cores, each round; machine busy: the share of "
             f"all {a.nproc} cores in use (median).")
    L.append("")
    L.append("| run | intake µs | PostgreSQL µs | load generator µs | rest of the machine | "
             "machine busy |")
    L.append("| --- | ---: | ---: | ---: | ---: | ---: |")
    per = {}
    for name, r in runs.items():
        if r is None:
            continue
        per[name] = r["us"]
        rest = " · ".join("–" if x["rest"] is None else f"{x['rest']:.2f}" for x in r["rounds"])
        busy = "–" if r["busy"] is None else f"{r['busy']:.0f} %"
        L.append(f"| {labels[name]} | {fmt_us(r['us']['intake'])} | {fmt_us(r['us']['pg'])} | "
                 f"{fmt_us(r['us']['client'])} | {rest} | {busy} |")
    L.append("")

    # ------------------------------------------------------------ scaling
    L.append("### What two cores show, and an estimate for a larger machine")
    L.append("")
    L.append(f"- Everything here shares {a.nproc} cores: the load generator, every intake "
             "node and PostgreSQL. A second node on the same cores brings no CPU of its own, "
             "so the two-node figure cannot show how throughput grows with machines: it shows "
             "that two nodes share one database correctly under load, and what a second node "
             "does on the same cores. Each figure is also lowered by the CPU the others take.")
    if pg1 and pg2 and pg1["busy"] is not None and pg2["busy"] is not None:
        L.append(f"- One node kept the machine {pg1['busy']:.0f} % busy (median), two nodes "
                 f"{pg2['busy']:.0f} %, for {rps['pg2'] / rps['pg1']:.2f}× the writes: a node "
                 "is bound by its ingest writer (below) before the CPU, and the second node's "
                 "writer used CPU the first left idle.")
    p1 = per.get("pg1")
    w1 = (pg1 or {}).get("writer")
    if p1 and p1["intake"] and p1["pg"]:
        ci, cp = p1["intake"], p1["pg"]
        L.append(f"- Measured cost of one durable POST on PostgreSQL (1 node): {ci:,.0f} µs of "
                 f"intake CPU and {cp:,.0f} µs of PostgreSQL CPU"
                 + (f" (the load generator: {p1['client']:,.0f} µs more)" if p1["client"] else "")
                 + ".")
        # A node's bound with a core of its own for its writer's backend: all of PostgreSQL's
        # CPU per write taken as that backend's (most of it is: the batch's inserts).
        node_bound = 1e6 / cp
        if w1 and w1["busy"] is not None:
            n = w1["writers"]
            L.append(f"- A node's writes are committed by its {n:.0f} ingest writer(s), each one "
                     "batch transaction at a time on a database connection of its own. On "
                     f"average {w1['busy']:.2f} of them were committing, {w1['us_per_write']:,.0f}"
                     f" µs of commit time per write at {w1['average']:.0f} writes per batch: "
                     f"one writer alone takes about {1e6 / w1['us_per_write']:,.0f} writes/s "
                     "here. Each batch's database work (the trigram index's above all) runs on "
                     "its writer's PostgreSQL backend: with a core for each of its writers' "
                     f"backends a node would take about {n:.0f} × {node_bound:,.0f} writes/s "
                     f"(1 s / {cp:,.0f} µs a backend), while the writers' batches do not "
                     "conflict.")
        L.append("- Estimate for a larger machine, assuming CPU is what limits (the disk's "
                 "fsync is shared by group commit) and these per-write costs stay as measured: "
                 f"the database takes about M × {1e6 / cp:,.0f} writes/s on M cores, each node "
                 f"about {node_bound:,.0f}/s for {ci:,.0f} µs of its own CPU per write:")
        L.append("")
        here = pg1["rps"] if pg1 else None
        L.append("| database cores | database's CPU bound | nodes to reach it, at one node's "
                 "rate here | nodes, at a node's bound | intake cores for that, in all |")
        L.append("| ---: | ---: | ---: | ---: | ---: |")
        for cores in (4, 8, 16, 32, 64):
            db = cores * 1e6 / cp
            L.append(f"| {cores} | {db:,.0f}/s | {f'{db / here:.0f}' if here else '–'} | "
                     f"{db / node_bound:.0f} | {db * ci / 1e6:.1f} |")
        L.append("")
        pc = (per.get("ceiling-trgm") or per.get("ceiling-plain") or {}).get("pg")
        if pc:
            L.append(f"- For comparison, pgbench's single-row INSERT costs PostgreSQL {pc:,.0f} µs "
                     f"of CPU ({'with' if per.get('ceiling-trgm') else 'without'} the index): "
                     f"intake's {cp:,.0f} µs per record includes its batch transactions (many "
                     "records per commit) and its other statements (idempotency, webhook "
                     "deliveries, the requests' reads).")
        p2 = per.get("pg2")
        if p2 and p2["intake"] and p2["pg"]:
            L.append(f"- With two nodes the cost per write was {p2['intake']:,.0f} µs of intake "
                     f"and {p2['pg']:,.0f} µs of PostgreSQL (one node: {ci:,.0f} and "
                     f"{cp:,.0f}), with {(pg2.get('writer') or {}).get('average', 0):.0f} "
                     "writes per commit on each node.")
        L.append("- Not in the estimate: network round trips between nodes and a database on "
                 "other machines (they lengthen each batch transaction, so a node's bound "
                 "drops with the round-trip time), contention on the right edge of the records "
                 "key, on the trigram index's posting lists and on WAL insertion at high core "
                 "counts, memory bandwidth, and the disk's write bandwidth. It is an estimate "
                 "from this machine's per-write costs, not a measurement.")
    L.append("")

    # ------------------------------------------------------------ the index's cost
    ix = index_costs(fig, tck)
    L.append("### The trigram index's cost per row")
    L.append("")
    if not ix:
        L.append("skipped")
    else:
        single = {k: per.get(k, {}).get("pg") for k in ("ceiling-plain", "ceiling-trgm")}
        L.append(f"PostgreSQL's CPU per row of the ceiling's record ({ix['rows']:,} rows, the "
                 "same text in each as in pgbench's), without and with the gin_trgm_ops "
                 "index; the difference is the index's share:")
        L.append("")
        L.append("| written as | without the index | with it | the index's share | wall time "
                 "with it |")
        L.append("| --- | ---: | ---: | ---: | ---: |")
        if single["ceiling-plain"] is not None and single["ceiling-trgm"] is not None:
            L.append(f"| single-row transactions (pgbench above, {a.connections} connections) | "
                     f"{fmt_us(single['ceiling-plain'])} µs | {fmt_us(single['ceiling-trgm'])} "
                     f"µs | {fmt_us(single['ceiling-trgm'] - single['ceiling-plain'])} µs | – |")
        plain, trgm, bulk = ix["plain"], ix["trgm"], ix["bulk"]
        L.append(f"| transactions of {ix['batch']:,} rows, one at a time (a background "
                 f"indexer's batches) | {fmt_us(plain['us'])} µs | {fmt_us(trgm['us'])} µs | "
                 f"{fmt_us(trgm['us'] - plain['us'])} µs | {trgm['wall_s']:.1f} s |")
        L.append(f"| the index built in bulk over the rows (`CREATE INDEX`) | – | – | "
                 f"{fmt_us(bulk['us'])} µs | {bulk['wall_s']:.1f} s |")
        L.append("")
        # The cheapest way measured to write a row and to index it: a bound on any design
        # that keeps the index, whenever it builds it.
        share = min(trgm["us"] - plain["us"], bulk["us"])
        base = min(v for v in (plain["us"], single["ceiling-plain"]) if v is not None)
        most = a.nproc * 1e6 / (base + share)
        ceiling = pct(most, rps.get("ceiling-plain"))
        L.append(f"- Whenever the index is built, each row costs the database at least "
                 f"{fmt_us(share)} µs of CPU for it, and at least {fmt_us(base)} µs to store: "
                 f"{a.nproc} cores store and index at most about {most:,.0f} rows/s"
                 + (f", {ceiling:.0f} % of the index-less ceiling," if ceiling else "")
                 + " before intake's own CPU and anything the database does for reads.")
    L.append("")

    # ------------------------------------------------------------ search
    meta = load_json(os.path.join(fig, "search-meta.json"))
    L.append("### Search")
    L.append("")
    if not meta:
        L.append("skipped")
    else:
        side = {}
        for s in ("pg", "redb"):
            side[s] = {
                "load": load_json(os.path.join(fig, f"search-{s}-load.json")),
                "native": load_json(os.path.join(fig, f"search-{s}-native.json")),
                "py": load_json(os.path.join(fig, f"search-{s}-py.json")),
                "idle": kv(os.path.join(fig, f"search-{s}.idle")),
                "sizes": kv(os.path.join(fig, f"search-{s}.sizes")),
            }
        L.append(f"- data: {meta['records']:,} records of `benches/search_gen.py` (seed "
                 f"{meta['seed']}, {fmt_bytes(meta['payload_bytes'])} of compact JSON), POSTed "
                 "to each intake (`search_bench.py load-intake`); the 50 queries of "
                 "`benches/search_queries.py` in 5 classes; "
                 "`GET …/search?q=…&limit=10&start=2000-01-01`, one at a time on one keep-alive "
                 "connection, once the server was idle")
        L.append("- intake on PostgreSQL searches with the database (`folded LIKE` on the "
                 "gin_trgm_ops index, VACUUM ANALYZE after the load); intake on redb with its "
                 "tantivy index")
        L.append("")
        nat = {s: {q: r["ms"] for q, r in ((side[s]["native"] or {}).get("intake") or {}).items()}
               for s in side}
        py = {s: {q: r["ms"] for q, r in ((side[s]["py"] or {}).get("queries") or {}).items()}
              for s in side}
        native = side["pg"]["native"] or side["redb"]["native"] or {}
        L.append(f"#### Latency (ms) through wrk: each query's first "
                 f"{native.get('requests', '–')} requests within {native.get('seconds', '–')} s, "
                 "the first page")
        L.append("")
        nat_pg, nat_redb, missing = paired(nat["pg"], nat["redb"])
        L += search_table(nat_pg, nat_redb, ("PostgreSQL", "redb"))
        L.append("")
        L.append("Each query counts with as many requests on both sides: the number of answers "
                 "the slower side got within the time (a fast query gets up to "
                 f"{native.get('requests', '–')}, a slow one a few), so the classes and the "
                 "**all** row weigh fast queries more than slow ones; the Python client's "
                 "table below weighs every query the same.")
        if missing:
            L.append("")
            L.append("Left out, no answer within the time on one side: "
                     + ", ".join(f"`{q}`" for q in missing))
        L.append("")
        L.append(f"#### Latency (ms) through the Python client: {a.reps} rounds after a warm-up, "
                 "the first 10 matches (following `next_cursor` while a page is short), answers "
                 "decoded")
        L.append("")
        L += search_table(py["pg"], py["redb"], ("PostgreSQL", "redb"))
        L.append("")
        L.append("p50 and p99 are nearest-rank percentiles over all of a class's requests.")
        L.append("")
        for s, label in (("pg", "intake on PostgreSQL"), ("redb", "intake on redb")):
            ld, sz, idle = side[s]["load"], side[s]["sizes"], side[s]["idle"]
            parts = []
            if ld:
                parts.append(f"load {ld['accepted']:,} of {ld['records']:,} accepted in "
                             f"{ld['seconds']} s ({ld['records_per_s']:,.0f}/s, "
                             f"{ld['connections']} connections, pipeline depth {ld['pipeline']})")
            if idle:
                parts.append(f"idle {idle.get('seconds', '–')} s after it"
                             + ("" if idle.get("settled") == "1" else " (NOT idle: timed anyway)"))
            if sz:
                what = "database" if s == "pg" else "data dir"
                parts.append(f"{what} {fmt_bytes(num(sz.get('database_bytes')))}, search index "
                             f"{fmt_bytes(num(sz.get('index_bytes')))}")
            L.append(f"- {label}: " + ("; ".join(parts) if parts else "skipped"))
        pp, rp = side["pg"]["py"], side["redb"]["py"]
        if pp and rp:
            qs = search_queries.all_queries()
            same_n = sum(pp["queries"][q]["results"] == rp["queries"][q]["results"] for _, q in qs)
            small = [q for _, q in qs if rp["queries"][q]["results"] < LIMIT]
            same_set = sum(sorted(pp["queries"][q]["seqs"]) == sorted(rp["queries"][q]["seqs"])
                           for q in small)
            wrong = [q for _, q in qs if pp["queries"][q]["not_containing_q"]
                     or rp["queries"][q]["not_containing_q"]]
            L.append(f"- agreement: the same number of results (≤ 10) for {same_n} of {len(qs)} "
                     f"queries; for the {len(small)} with fewer than 10 matches the same records "
                     f"for {same_set}; every result contains its query: "
                     f"{'yes' if not wrong else 'NO: ' + ', '.join(wrong)}")
            multi = {s: [q for _, q in qs if side[s]["py"]["queries"][q]["max_pages"] > 1]
                     for s in side}
            for s, label in (("pg", "PostgreSQL"), ("redb", "redb")):
                if multi[s]:
                    L.append(f"- on {label} these queries needed more than one page (wrk times "
                             "the first only): " + ", ".join(f"`{q}`" for q in multi[s]))
        L.append("")
        L.append("| class | q | PostgreSQL p50 (wrk) | redb p50 (wrk) | PostgreSQL p50 | "
                 "redb p50 | PostgreSQL p99 | redb p99 | results |")
        L.append("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for cls, q in search_queries.all_queries():
            def p(d, pc):
                return fmt_ms(percentile(d[q], pc) if d.get(q) else None)
            res = (pp or rp or {}).get("queries", {}).get(q, {}).get("results", "–")
            L.append(f"| {cls} | `{q}` | {p(nat['pg'], 50)} | {p(nat['redb'], 50)} | "
                     f"{p(py['pg'], 50)} | {p(py['redb'], 50)} | {p(py['pg'], 99)} | "
                     f"{p(py['redb'], 99)} | {res} |")
        L.append("")

    text = "\n".join(L) + "\n"
    with open(args.out, "w") as f:
        f.write(text)

    if args.json:
        figures = {}
        for name, r in runs.items():
            key = name.replace("-", "_")
            figures[f"{key}_rps"] = None if r is None else r.get("rps")
            figures[f"{key}_p50_ms"] = None if r is None else r.get("p50_ms")
            figures[f"{key}_p99_ms"] = None if r is None else r.get("p99_ms")
            for part in ("intake", "pg", "client"):
                v = per.get(name, {}).get(part)
                figures[f"{key}_{part}_cpu_us"] = None if v is None else round(v, 1)
        figures["pg1_non2xx"] = (pg1 or {}).get("non2xx")
        figures["pg2_non2xx"] = (pg2 or {}).get("non2xx")
        figures["redb_non2xx"] = (redb or {}).get("non2xx")
        figures["pg1_pct_of_ceiling"] = pct(rps["pg1"], rps["ceiling-plain"])
        figures["search_records"] = (meta or {}).get("records")
        if ix:
            for phase in ("plain", "trgm", "bulk"):
                figures[f"index_{phase}_pg_cpu_us"] = round(ix[phase]["us"], 1)
        if meta:
            figures["search_pg_wrk"] = overall(nat_pg)
            figures["search_redb_wrk"] = overall(nat_redb)
            figures["search_pg_python"] = overall(py["pg"])
            figures["search_redb_python"] = overall(py["redb"])
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(figures, f, indent=1)
            f.write("\n")
        os.replace(tmp, args.json)


if __name__ == "__main__":
    main()
