#!/usr/bin/env python3
"""The report of benches/lean.sh (issue #22, "lean on small machines"): one Markdown file with
a table per profile and a goal table, and the same figures as JSON.

It reads what lean.sh left in WORK, one folder per profile:
  profile.env      the profile's variables, NAME=VALUE lines (benchlib.py profile-env)
  config.toml      `intake check`'s effective configuration under them (cache_mb, ...)
  STEP.json        the RESULTS_JSON of each step's script (ingest.sh, poll_drain.sh,
                   search.sh, webhooks.sh, datadir.sh)
  STEP.rc          the script's exit status; STEP.seconds its run time
A step not in STEPS is "skipped"; one that ran and failed (or wrote no figures) is "FAILED".

Usage: lean_report.py --work DIR --profiles "default small" --steps "ingest poll ..."
           --meta KEY=VALUE... --out FILE [--json FILE]
"""

import argparse
import json
import os
import re
import sys

STEPS = ("ingest", "poll", "search", "webhooks", "datadir")
SCRIPTS = {"ingest": "ingest.sh", "poll": "poll_drain.sh", "search": "search.sh",
           "webhooks": "webhooks.sh", "datadir": "datadir.sh"}
# Issue #22's targets.
RSS_HEADROOM_MB = 128          # peak RSS <= cache_mb + 128 MB at the defaults ...
SMALL_PROFILE_RSS_MB = 96      # ... and <= 96 MB under the small-box profile
SMALL_PROFILE = "small"
CPU_US_PER_POST = 30
PCT_OF_CEILING = 35
DATADIR_X_PAYLOAD = 2
POLL_RECORDS_PER_S = 200_000
DELIVERIES_PER_S = 5_000
IDLE_RSS_MB = 30
STARTUP_MS = 200


# ------------------------------------------------------------------ inputs

def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_text(path, default=""):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


def effective_config(path):
    """{"section.key": "value"} from `intake check`'s TOML (plain key = value lines)."""
    out, section = {}, ""
    for line in read_text(path).splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[]")
        elif "=" in line and not line.startswith("#"):
            k, v = (x.strip() for x in line.split("=", 1))
            out[f"{section}.{k}" if section else k] = v.strip('"')
    return out


def reference_ingest(path):
    """(p99 ms, description) of intake's row in a committed ingest report, or (None, why)."""
    text = read_text(path)
    row = re.search(r"^\| intake \| [\d.]+ \| [\d.]+ ms \| ([\d.]+) ms \|", text, re.M)
    if not row:
        return None, f"no intake row in {os.path.basename(path)}"
    return float(row.group(1)), f"{os.path.basename(path)}: {meta_line(text)}"


def reference_search(path):
    """(p50 ms, p99 ms, records, description) of intake over all queries through wrk (the
    first table's **all** row) in a committed search report, or Nones."""
    text = read_text(path)
    row = re.search(r"^\| \*\*all\*\* \| *\| ([\d.]+) \| [^|]+ \| [^|]+ \| ([\d.]+) \|", text, re.M)
    records = re.search(r"RECORDS=(\d+)", text)
    if not row or not records:
        return None, None, None, f"no all-queries row in {os.path.basename(path)}"
    return (float(row.group(1)), float(row.group(2)), int(records.group(1)),
            f"{os.path.basename(path)}: {meta_line(text)}")


def meta_line(text):
    m = re.search(r"^- date: (.*)$", text, re.M)
    return m.group(1) if m else "undated"


# ------------------------------------------------------------------ formatting

def num(v, digits=1):
    if v is None:
        return "–"
    if isinstance(v, str):
        return v
    if digits == 0 or (isinstance(v, int) and abs(v) >= 1000):
        return f"{v:,.0f}"
    return f"{v:,.{digits}f}"


def mb(v):
    return "–" if v is None else f"{v:,.1f} MB"


def ms(v):
    return "–" if v is None else f"{v:,.3f} ms" if v < 1 else f"{v:,.2f} ms"


def bytes_mb(b):
    return "–" if b is None else f"{b / 1048576:,.1f} MB"


def times(b, payload):
    return "–" if b is None or not payload else f"{b / payload:.2f}×"


def yes_no(ok):
    return "yes" if ok else "**no**"


# ------------------------------------------------------------------ one profile

class Profile:
    def __init__(self, work, name, steps):
        self.name = name
        self.dir = os.path.join(work, name)
        self.vars = [l for l in read_text(os.path.join(self.dir, "profile.env")).splitlines() if l]
        self.config = effective_config(os.path.join(self.dir, "config.toml"))
        self.cache_mb = int(self.config.get("storage.cache_mb", "0") or 0)
        self.status, self.fig, self.seconds = {}, {}, {}
        for step in STEPS:
            if step not in steps:
                self.status[step] = "skipped"
                continue
            rc = read_text(os.path.join(self.dir, f"{step}.rc"), "")
            figures = read_json(os.path.join(self.dir, f"{step}.json"))
            self.seconds[step] = read_text(os.path.join(self.dir, f"{step}.seconds"), "")
            if rc == "0" and figures:
                self.status[step] = "ok"
            else:
                self.status[step] = f"FAILED (exit status {rc or 'none'})"
            self.fig[step] = figures or {}

    def rss_target(self):
        if self.name == SMALL_PROFILE:
            return SMALL_PROFILE_RSS_MB, f"≤ {SMALL_PROFILE_RSS_MB} MB (small-box profile)"
        t = self.cache_mb + RSS_HEADROOM_MB
        return t, f"≤ {t} MB (cache_mb {self.cache_mb} + {RSS_HEADROOM_MB})"

    def get(self, step, key):
        return self.fig.get(step, {}).get(key)

    def peaks(self):
        """[(load, VmHWM MB, anon MB, file MB)] of the four loads of goal 1."""
        out = []
        if self.status["ingest"] != "skipped":
            out.append(("ingest at 64 connections", self.get("ingest", "intake_peak_rss_mb"),
                        self.get("ingest", "intake_peak_anon_mb"), self.get("ingest", "intake_peak_file_mb")))
        if self.status["poll"] != "skipped":
            out.append(("poll drain (load + drain)", self.get("poll", "peak_rss_mb"),
                        self.get("poll", "run_peak_anon_mb"), self.get("poll", "run_peak_file_mb")))
        if self.status["search"] != "skipped":
            anon = [v for v in (self.get("search", "load_peak_anon_mb"), self.get("search", "queries_peak_anon_mb")) if v is not None]
            file_ = [v for v in (self.get("search", "load_peak_file_mb"), self.get("search", "queries_peak_file_mb")) if v is not None]
            out.append(("search (load, rebuild, queries)", self.get("search", "peak_rss_mb"),
                        max(anon) if anon else None, max(file_) if file_ else None))
        if self.status["webhooks"] != "skipped":
            out.append(("webhook backlog", self.get("webhooks", "peak_rss_mb"),
                        self.get("webhooks", "peak_anon_mb"), self.get("webhooks", "peak_file_mb")))
        return out


def step_rows(p):
    """The per-profile table: (load, figure, value) rows."""
    rows = []
    add = lambda load, figure, value: rows.append((load, figure, value))

    def header(step, label):
        status = p.status[step]
        if status == "skipped":
            add(label, "skipped (not in STEPS)", "")
            return False
        secs = p.seconds.get(step)
        add(label, f"`{SCRIPTS[step]}`: {status}", f"{secs} s" if secs else "–")
        return bool(p.fig.get(step))

    g = lambda key: p.get("ingest", key)
    if header("ingest", "ingest"):
        add("ingest", "durable POST/s (64 connections)", num(g("intake_rps"), 0))
        add("ingest", "POST p50 / p99", f"{ms(g('intake_p50_ms'))} / {ms(g('intake_p99_ms'))}")
        add("ingest", "non-2xx answers", num(g("intake_non2xx"), 0))
        add("ingest", "bare ceiling requests/s (same run)", num(g("ceiling_rps"), 0))
        add("ingest", "intake as % of the ceiling", f"{num(g('intake_pct_of_ceiling'))} %")
        add("ingest", "CPU per durable POST, all threads", f"{num(g('intake_cpu_us'))} µs ({num(g('intake_cpu_cores'), 2)} cores busy)")
        groups = sorted(((k.split(".", 1)[1], v) for k, v in p.fig["ingest"].items()
                         if k.startswith("intake_cpu_us.") and v), key=lambda kv: -kv[1])
        add("ingest", "CPU per durable POST by thread group",
            ", ".join(f"{k} {num(v)}" for k, v in groups) + " µs" if groups else "–")
        add("ingest", "ceiling's CPU per request", f"{num(g('ceiling_cpu_us'))} µs")
        add("ingest", "peak RSS (VmHWM)", mb(g("intake_peak_rss_mb")))
        add("ingest", "largest sample: RSS / anon / file-backed",
            f"{num(g('intake_peak_sampled_rss_mb'))} / {num(g('intake_peak_anon_mb'))} / {num(g('intake_peak_file_mb'))} MB")
        add("ingest", "idle RSS", mb(g("intake_idle_rss_mb")))
        add("ingest", "startup to listening", ms(g("intake_startup_ms")))
        add("ingest", "disk: 4 KiB pwrite + fdatasync", ms(g("fsync_ms")))

    g = lambda key: p.get("poll", key)
    if header("poll", "poll drain"):
        add("poll drain", "records drained / check", f"{num(g('records'), 0)} / {g('check')}")
        add("poll drain", "records/s", num(g("records_per_s"), 0))
        add("poll drain", "page p50 / p99", f"{ms(g('page_p50_ms'))} / {ms(g('page_p99_ms'))}")
        add("poll drain", "peak RSS (VmHWM): whole run / load / drain",
            f"{num(g('peak_rss_mb'))} / {num(g('load_peak_rss_mb'))} / {num(g('drain_peak_rss_mb'))} MB")
        add("poll drain", "largest sample, whole run: RSS / anon / file-backed",
            f"{num(g('run_peak_sampled_rss_mb'))} / {num(g('run_peak_anon_mb'))} / {num(g('run_peak_file_mb'))} MB")
        add("poll drain", "largest sample, drain: RSS / anon / file-backed",
            f"{num(g('drain_peak_sampled_rss_mb'))} / {num(g('drain_peak_anon_mb'))} / {num(g('drain_peak_file_mb'))} MB")
        payload = g("payload_bytes")
        add("poll drain", "data dir of the identical-record load / payload",
            f"{bytes_mb(g('datadir_bytes'))} ({times(g('datadir_bytes'), payload)}) / {bytes_mb(payload)}")
        add("poll drain", "its parts", parts(p.fig["poll"], payload))

    g = lambda key: p.get("search", key)
    if header("search", "search"):
        c = (p.fig["search"].get("c_clients") or {}).get("intake") or {}
        py = (p.fig["search"].get("python_clients") or {}).get("intake") or {}
        add("search", f"query p50 / p99, wrk, all 50 queries ({num(p.fig['search'].get('records'), 0)} records)",
            f"{ms(c.get('p50_ms'))} / {ms(c.get('p99_ms'))}")
        add("search", "query p50 / p99, Python client", f"{ms(py.get('p50_ms'))} / {ms(py.get('p99_ms'))}")
        add("search", "load records/s", num(g("load_records_per_s"), 0))
        add("search", "peak RSS (VmHWM): load / rebuild / queries",
            f"{num(g('load_peak_rss_mb'))} / {num(g('rebuild_peak_rss_mb'))} / {num(g('queries_peak_rss_mb'))} MB")
        add("search", "largest sample, load: RSS / anon / file-backed",
            f"{num(g('load_peak_sampled_rss_mb'))} / {num(g('load_peak_anon_mb'))} / {num(g('load_peak_file_mb'))} MB")
        add("search", "largest sample, queries: RSS / anon / file-backed",
            f"{num(g('queries_peak_sampled_rss_mb'))} / {num(g('queries_peak_anon_mb'))} / {num(g('queries_peak_file_mb'))} MB")
        add("search", "index (rebuilt)", bytes_mb(g("index_bytes")))

    g = lambda key: p.get("webhooks", key)
    if header("webhooks", "webhooks"):
        add("webhooks", "deliveries/s draining the backlog", num(g("deliveries_per_s"), 0))
        add("webhooks", "backlog writes (burst writes/s)", f"{num(g('backlog_writes'), 0)} ({num(g('burst_rps'), 0)}/s)")
        add("webhooks", "receiver ceiling requests/s", num(g("ceiling_rps"), 0))
        add("webhooks", "POST → receiver p50 / p99 at ~1,000 writes/s", f"{ms(g('latency_p50_ms'))} / {ms(g('latency_p99_ms'))}")
        add("webhooks", "peak RSS (VmHWM): backlog / whole run",
            f"{num(g('backlog_peak_rss_mb'))} / {num(g('peak_rss_mb'))} MB")
        add("webhooks", "largest sample, whole run: RSS / anon / file-backed",
            f"{num(g('peak_sampled_rss_mb'))} / {num(g('peak_anon_mb'))} / {num(g('peak_file_mb'))} MB")

    g = lambda key: p.get("datadir", key)
    if header("datadir", "data dir"):
        payload = g("payload_bytes")
        add("data dir", f"payload: {num(g('records'), 0)} varied ~1 KB records", bytes_mb(payload))
        add("data dir", "data dir total (du -sb)", f"{bytes_mb(g('datadir_bytes'))} ({times(g('datadir_bytes'), payload)})")
        add("data dir", "its parts", parts(p.fig["datadir"], payload))
        add("data dir", "load records/s; idle after; exit status",
            f"{num(g('load_records_per_s'), 0)}; {num(g('settle_s'), 0)} s{'' if g('settled') == 1 else ' (NOT idle)'}; {num(g('exit_status'), 0)}")
        add("data dir", "peak RSS (VmHWM); largest sample RSS / anon / file-backed",
            f"{mb(g('peak_rss_mb'))}; {num(g('peak_sampled_rss_mb'))} / {num(g('peak_anon_mb'))} / {num(g('peak_file_mb'))} MB")
    return rows


def parts(fig, payload):
    items = sorted(((k.split(".", 1)[1], v) for k, v in fig.items() if k.startswith("datadir.")),
                   key=lambda kv: -(kv[1] or 0))
    return ", ".join(f"{k} {bytes_mb(v)} ({times(v, payload)})" for k, v in items) or "–"


# ------------------------------------------------------------------ goals

def goals(p, ingest_ref, search_ref, records):
    """(goal, target, measured, met) rows for one profile; met is True, False or a text."""
    out = []
    rss_target, rss_text = p.rss_target()
    # A load that failed does not meet a memory goal, whatever its peak: "while still working".
    for load, hwm, anon, file_ in p.peaks():
        step = {"ingest": "ingest", "poll": "poll", "search": "search", "webhook": "webhooks"}[load.split()[0]]
        working = p.status[step] == "ok" and p.get(step, "check") in (None, "ok")
        if p.get(step, "intake_non2xx"):
            working = False
        measured = f"{mb(hwm)} (anon {num(anon)}, file-backed {num(file_)})"
        if not working:
            measured += "; the load FAILED"
        out.append((f"1. peak RSS, {load}", rss_text, measured,
                    working and hwm is not None and hwm <= rss_target))
    if p.status["ingest"] != "skipped":
        g = lambda key: p.get("ingest", key)
        cpu = g("intake_cpu_us")
        out.append(("2. CPU per durable POST, all threads", f"≤ {CPU_US_PER_POST} µs", f"{num(cpu)} µs",
                    cpu is not None and cpu <= CPU_US_PER_POST))
        pct = g("intake_pct_of_ceiling")
        pct_ok = isinstance(pct, (int, float)) and pct >= PCT_OF_CEILING
        out.append(("2. intake's rate as % of the bare ceiling's, same run", f"≥ {PCT_OF_CEILING} %",
                    f"{num(pct)} % ({num(g('intake_rps'), 0)} of {num(g('ceiling_rps'), 0)}/s)", pct_ok))
        p99, ref_text = ingest_ref
        out.append(("2. POST p99 (64 connections)",
                    f"≤ {ms(p99)} ({ref_text})" if p99 is not None else f"no reference ({ref_text})",
                    ms(g("intake_p99_ms")),
                    (g("intake_p99_ms") is not None and g("intake_p99_ms") <= p99) if p99 is not None else "n/a"))
    if p.status["datadir"] != "skipped":
        g = lambda key: p.get("datadir", key)
        x = g("datadir_x_payload")
        out.append(("3. data dir, varied ~1 KB records (store + index + logs)", f"≤ {DATADIR_X_PAYLOAD}× the payload",
                    f"{times(g('datadir_bytes'), g('payload_bytes'))} ({bytes_mb(g('datadir_bytes'))} for {bytes_mb(g('payload_bytes'))})",
                    x is not None and x <= DATADIR_X_PAYLOAD))
    if p.status["search"] != "skipped":
        c = (p.fig.get("search", {}).get("c_clients") or {}).get("intake") or {}
        p50_ref, p99_ref, ref_records, ref_text = search_ref
        same = ref_records == records
        for label, v, ref in (("p50", c.get("p50_ms"), p50_ref), ("p99", c.get("p99_ms"), p99_ref)):
            if ref is None:
                target, met = f"kept (no reference: {ref_text})", "n/a"
            elif not same:
                target = f"kept: {ms(ref)} at {ref_records:,} records ({ref_text})"
                met = f"n/a ({records:,} records here)"
            else:
                target, met = f"≤ {ms(ref)} ({ref_text})", v is not None and v <= ref
            out.append((f"4. search {label}, all queries (wrk)", target, ms(v), met))
    if p.status["poll"] != "skipped":
        v = p.get("poll", "records_per_s")
        out.append(("4. poll drain", f"≥ {POLL_RECORDS_PER_S:,} records/s", f"{num(v, 0)} records/s",
                    v is not None and v >= POLL_RECORDS_PER_S and p.get("poll", "check") == "ok"))
    if p.status["webhooks"] != "skipped":
        v = p.get("webhooks", "deliveries_per_s")
        out.append(("4. webhook deliveries", f"≥ {DELIVERIES_PER_S:,}/s", f"{num(v, 0)}/s",
                    v is not None and v >= DELIVERIES_PER_S))
    if p.status["ingest"] != "skipped":
        v = p.get("ingest", "intake_idle_rss_mb")
        out.append(("4. idle RSS", f"≤ {IDLE_RSS_MB} MB", mb(v), v is not None and v <= IDLE_RSS_MB))
        v = p.get("ingest", "intake_startup_ms")
        out.append(("4. startup to listening", f"≤ {STARTUP_MS} ms", ms(v), v is not None and v <= STARTUP_MS))
    return out


# ------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--profiles", required=True)
    ap.add_argument("--steps", required=True)
    ap.add_argument("--meta", nargs="*", default=[], help="KEY=VALUE: date, commit, binary, "
                    "machine, records, duration, elapsed, ingest_ref, search_ref")
    ap.add_argument("--out", required=True)
    ap.add_argument("--json")
    a = ap.parse_args()
    meta = dict(kv.split("=", 1) for kv in a.meta)
    steps = a.steps.split()
    records = int(meta.get("records", "0"))
    ingest_ref = reference_ingest(meta.get("ingest_ref", ""))
    search_ref = reference_search(meta.get("search_ref", ""))
    profiles = [Profile(a.work, name, steps) for name in a.profiles.split()]

    L = ["## Lean benchmark (issue #22)", ""]
    L.append(f"- date: {meta.get('date', '')}, commit: {meta.get('commit', '')}; "
             f"binary: {meta.get('binary', '')}")
    L.append(f"- machine: {meta.get('machine', '')}")
    L.append(f"- run: `PROFILES=\"{a.profiles}\" RECORDS={records} DURATION={meta.get('duration', '')} "
             f"STEPS=\"{a.steps}\" bash benches/lean.sh`, {meta.get('elapsed', '?')} s in all; "
             "each step is the named script run against the same binary with the profile's "
             "variables given to the intake servers it starts (and to nothing else)")
    for p in profiles:
        env = " ".join(f"`{v}`" for v in p.vars) or "none (intake's defaults)"
        L.append(f"- profile **{p.name}** (`benches/profiles/{p.name}.env`): {env}; "
                 f"effective cache_mb = {p.config.get('storage.cache_mb', '?')}, "
                 f"search index_memory_mb = {p.config.get('search.index_memory_mb', '?')}")
    L.append("")

    all_goals = []
    L.append("### Goals")
    L.append("")
    L.append("| goal | profile | target | measured | met |")
    L.append("| --- | --- | --- | --- | --- |")
    for p in profiles:
        for goal, target, measured, met in goals(p, ingest_ref, search_ref, records):
            met_text = yes_no(met) if isinstance(met, bool) else met
            L.append(f"| {goal} | {p.name} | {target} | {measured} | {met_text} |")
            all_goals.append({"goal": goal, "profile": p.name, "target": target,
                              "measured": measured, "met": met})
    L.append("")
    L.append("Peak RSS is VmHWM (/proc/PID/status), the true peak; anon and file-backed are the "
             "largest of the samples of /proc/PID/smaps_rollup taken every 0.25 s (Anonymous, and "
             "Rss - Anonymous: mapped files such as tantivy's segments and the binary itself, "
             "which the kernel can reclaim under pressure). CPU per durable POST: the server's "
             "utime + stime over the wrk run / requests answered. The search reference is the "
             "committed report's intake figure over all queries through wrk; it is compared only "
             "at the same RECORDS.")
    L.append("")

    for p in profiles:
        L.append(f"### Profile {p.name}")
        L.append("")
        L.append("| load | figure | value |")
        L.append("| --- | --- | ---: |")
        for load, figure, value in step_rows(p):
            L.append(f"| {load} | {figure} | {value} |")
        L.append("")

    failed = [f"{p.name}/{s}" for p in profiles for s in STEPS if p.status[s].startswith("FAILED")]
    if failed:
        L.append(f"**Failed steps**: {', '.join(failed)} (their logs are in benches/results/lean/).")
        L.append("")
    L.append("Each step's own report and log: `benches/results/lean/PROFILE/STEP.md` and `.log` "
             "(replaced by the next run).")
    text = "\n".join(L) + "\n"
    with open(a.out, "w") as f:
        f.write(text)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": dict(meta, profiles=a.profiles, steps=a.steps),
                       "profiles": {p.name: {"vars": p.vars, "cache_mb": p.cache_mb,
                                             "status": p.status, "seconds": p.seconds,
                                             "figures": p.fig} for p in profiles},
                       "goals": all_goals, "failed": failed}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
