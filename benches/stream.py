"""Change stream benchmark driver, run by benches/stream.sh (which builds the binaries).

Two intake servers, one after the other, each on a fresh data dir on 127.0.0.1 with
`[stream] max_per_key = max(128, READERS)`, each getting the same two write phases from wrk
(benches/post.lua's ~1 KB record, the endpoint's sandbox key):

- baseline: no stream open: the writes/s of ingest alone;
- readers: READERS (default 100) change streams open on the endpoint, read by
  benches/stream_readers.rs (one process, one connection per stream), all connected before the
  first write.

The phases:

1. burst: full-speed POSTs for BURST (`wrk -t2 -cCONNECTIONS`), then, with readers, the wait
   until every reader has caught up. Events/s fanned out = the events all readers received /
   the span from the first event's arrival to the last's (every reader's).
2. paced: about 1,000 writes/s for PACED (benches/post_paced.lua: PACED_CONNECTIONS
   connections, each pausing DELAY_MS before each POST).

Between the phases the server is left to go idle (under 5 % of a core over 1 s: the search
indexer catching up with the burst), so the paced phase measures the stream, not the backlog.

Each record event's latency is its arrival at its reader minus its `timestamp` (when intake
received the write, before the durable commit and the 202), so it is an upper bound of
"commit to event". Every reader must get every acknowledged write: the expected count is the
202s intake answered to the data route in the phase (from /metrics). A write whose 202 wrk cut
off when its run ended is committed but not counted, so a reader may see up to CONNECTIONS
more events than that; the readers must then agree among themselves (same count, same
fingerprint of the event ids).

Per phase and server: VmHWM (reset with clear_refs before the phase), the CPU of intake, the
readers, wrk and the whole machine (/proc), and memory samples (benchlib.mem_watch). With
RESULTS_JSON set, the key figures are also written there as JSON (see figures() below). The
driver exits 1 after writing the report when a reader missed an event, readers disagree, a
stream ended, or an event had no readable timestamp.
"""

import argparse
import json
import os
import platform
import queue
import re
import resource
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone

from benchlib import (call, mem_peaks, mem_watch, proc_kb, profile_vars, start_intake,
                      stopped_on_exit, write_figures)

BENCH_DIR = os.environ["BENCH_DIR"]
READERS = int(os.environ.get("READERS", "100"))
CONNECTIONS = int(os.environ.get("CONNECTIONS", "32"))
PACED_CONNECTIONS = int(os.environ.get("PACED_CONNECTIONS", "24"))
DELAY_MS = int(os.environ.get("DELAY_MS", "20"))
DRAIN_TIMEOUT = int(os.environ.get("DRAIN_TIMEOUT", "300"))
HZ = os.sysconf("SC_CLK_TCK")
ACCEPTED = 'intake_http_requests_total{route="/api/v1/data/{slug}",method="POST",status="202"} '


def seconds(name, default):
    """A duration knob given in whole seconds, with or without a trailing `s`."""
    text = os.environ.get(name, default)
    if not re.fullmatch(r"[1-9][0-9]*s?", text):
        sys.exit(f"{name} must be whole seconds, like 10 or 10s (got {text!r})")
    return int(text.rstrip("s"))


BURST = seconds("BURST", "10")
PACED = seconds("PACED", "20")


def log(msg):
    print(f"stream.py: {msg}", file=sys.stderr, flush=True)


def wrk(url, duration, connections, script, key, extra_env=None):
    """Runs wrk; returns post.lua's figures and the CPU seconds wrk used."""
    env = dict(os.environ, BENCH_DIR=BENCH_DIR, INTAKE_KEY=key)
    env.update(extra_env or {})
    cmd = ["wrk", "-t2", f"-c{connections}", f"-d{duration}s", "--latency", "-s", script, url]
    log(" ".join(cmd))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    values = dict(line.split(" ", 1) for line in out.splitlines() if re.match(r"^[a-z0-9_]+ \S+$", line))
    figures = {k: float(v) for k, v in values.items()}
    figures["cpu_s"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return figures


def accepted_posts(base):
    """The 202s intake has answered to POST /api/v1/data/{slug} so far (its /metrics)."""
    for line in call("GET", f"{base}/metrics").splitlines():
        if line.startswith(ACCEPTED):
            return int(line.split()[-1])
    return 0


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def machine_ticks():
    """(busy, total) clock ticks of the whole machine so far (/proc/stat)."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:]]
    idle = ticks[3] + ticks[4]
    return sum(ticks) - idle, sum(ticks)


def hwm_reset(pid):
    """Resets VmHWM to the current RSS, so that the next read is the peak of what follows."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def wait_idle(pid, timeout=60):
    """Waits until PID uses under 5 % of a core over 1 s; returns the seconds waited."""
    t0 = time.time()
    prev = cpu_ticks(pid)
    while time.time() - t0 < timeout:
        time.sleep(1)
        cur = cpu_ticks(pid)
        if (cur - prev) / HZ < 0.05:
            break
        prev = cur
    return time.time() - t0


class Readers:
    """benches/stream_readers.rs, steered through its stdin (see its module docs)."""

    def __init__(self, exe, url, key, n):
        self.proc = subprocess.Popen([exe, "--url", url, "--key", key, "--readers", str(n)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     bufsize=1)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def answer(self, timeout=60):
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            sys.exit(f"stream_readers gave no answer within {timeout} s")
        if line is None:
            sys.exit(f"stream_readers exited with status {self.proc.wait()}")
        return json.loads(line)

    def ask(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        answer = self.answer()
        if "error" in answer:
            sys.exit(f"stream_readers: {answer['error']}")
        return answer

    def caught_up(self, expected, timeout=None):
        """Waits until every reader has EXPECTED events and no more arrive for 1 s; False when
        nothing arrives for 15 s before that, or after TIMEOUT seconds (DRAIN_TIMEOUT)."""
        last, still_since = -1, time.time()
        deadline = time.time() + (DRAIN_TIMEOUT if timeout is None else timeout)
        while True:
            stats = self.ask("stats")
            if stats["events"] != last:
                last, still_since = stats["events"], time.time()
            elif stats["min"] >= expected and time.time() - still_since >= 1:
                return True
            elif time.time() - still_since > 15 or time.time() > deadline:
                return False
            time.sleep(0.1)


def run_phase(name, intake, base, data_url, key, readers, script, duration, connections, env=None):
    """One write phase (and, with readers, the wait until they have caught up); its figures."""
    hwm_ok = hwm_reset(intake.pid)
    accepted0 = accepted_posts(base)
    ticks0 = cpu_ticks(intake.pid)
    reader_ticks0 = cpu_ticks(readers.proc.pid) if readers else 0
    busy0, total0 = machine_ticks()
    t0 = time.time()
    load = wrk(data_url, duration, connections, script, key, env)
    writes_end = time.time()
    accepted = accepted_posts(base) - accepted0
    phase = {"name": name, "wrk": load, "accepted": accepted, "hwm_reset": hwm_ok}
    if readers:
        phase["caught_up"] = readers.caught_up(accepted)
        phase["stream"] = readers.ask(f"report {accepted}")
        last_us = phase["stream"]["last_us"]
        phase["lag_s"] = max(0.0, last_us / 1e6 - writes_end) if last_us else None
    span = time.time() - t0
    busy1, total1 = machine_ticks()
    phase["span_s"] = span
    phase["intake_cpu_s"] = (cpu_ticks(intake.pid) - ticks0) / HZ
    phase["readers_cpu_s"] = (cpu_ticks(readers.proc.pid) - reader_ticks0) / HZ if readers else 0.0
    phase["intake_cores"] = phase["intake_cpu_s"] / span
    phase["readers_cores"] = phase["readers_cpu_s"] / span
    phase["wrk_cores"] = load["cpu_s"] / span
    phase["machine_cores"] = (busy1 - busy0) / (total1 - total0) * os.cpu_count() if total1 > total0 else 0.0
    phase["hwm_kb"] = proc_kb(intake.pid, "VmHWM")
    phase["window"] = (t0, time.time())
    return phase


def run_server(name, args, n_readers, procs):
    """Starts an intake server on a fresh data dir, opens N_READERS streams (none: the
    baseline), runs both phases; returns their figures."""
    work = os.path.join(args.work, name)
    os.makedirs(work)
    config = f"[stream]\nmax_per_key = {max(128, n_readers)}\n"
    intake, base, token = start_intake(args.intake, work, config)
    procs.append(intake)
    mem_file = os.path.join(work, "intake.mem")
    procs.append(mem_watch(intake.pid, mem_file))
    endpoint = call("POST", f"{base}/api/v1/manage/endpoints", token, {"name": "bench"})
    slug, key = endpoint["slug"], endpoint["sandbox_key"]
    data_url = f"{base}/api/v1/data/{slug}"
    readers = None
    if n_readers:
        log(f"{name}: opening {n_readers} streams")
        readers = Readers(args.readers, f"{data_url}/stream", key, n_readers)
        procs.append(readers.proc)
        connected = readers.answer(timeout=60)
        if connected.get("connected") != n_readers:
            sys.exit(f"stream_readers: {connected}")
    # One probe write: it must be accepted and, with readers, reach every one of them.
    call("POST", data_url, key, {"probe": True})
    if readers:
        if not readers.caught_up(1, timeout=30):
            sys.exit(f"the probe write did not reach every reader: {readers.ask('stats')}")
        probe = readers.ask("report 1")
        log(f"{name}: probe reached all {probe['readers']} readers, latency max "
            f"{probe['latency_ms']['max']} ms")
    idle_rss_kb = proc_kb(intake.pid, "VmRSS")
    post_lua = os.path.join(BENCH_DIR, "post.lua")
    paced_lua = os.path.join(BENCH_DIR, "post_paced.lua")
    log(f"{name}: burst, full-speed writes for {BURST} s")
    burst = run_phase("burst", intake, base, data_url, key, readers, post_lua, BURST, CONNECTIONS)
    settle_s = wait_idle(intake.pid)
    log(f"{name}: paced, {PACED_CONNECTIONS} connections pausing {DELAY_MS} ms (at most "
        f"{PACED_CONNECTIONS * 1000 // DELAY_MS} writes/s) for {PACED} s (after {settle_s:.1f} s "
        f"for the server to go idle)")
    paced = run_phase("paced", intake, base, data_url, key, readers, paced_lua, PACED,
                      PACED_CONNECTIONS, {"DELAY_MS": str(DELAY_MS)})
    for phase in (burst, paced):
        phase["mem"] = mem_peaks(mem_file, *phase["window"])
    return {"burst": burst, "paced": paced, "idle_rss_kb": idle_rss_kb, "settle_s": settle_s,
            "hwm_kb": proc_kb(intake.pid, "VmHWM")}


def problems(run):
    """What went wrong for the readers of a run, as sentences (none: every reader got every
    write, once)."""
    found = []
    for name, connections in (("burst", CONNECTIONS), ("paced", PACED_CONNECTIONS)):
        phase = run[name]
        s = phase["stream"]
        if s["missing"]:
            found.append(f"{name}: {s['missing']} events missing over {s['readers_short']} "
                         f"readers (fewest {s['per_reader_min']} of {phase['accepted']})")
        if s["extra"] > s["readers"] * connections:
            found.append(f"{name}: {s['extra']} events beyond the 202s, more than wrk can "
                         f"have cut off")
        if not s["fingerprints_agree"]:
            found.append(f"{name}: the readers did not all see the same events "
                         f"({s['per_reader_min']} to {s['per_reader_max']} each)")
        if s["disconnects"]:
            found.append(f"{name}: {s['disconnects']} streams ended: {s['errors']}")
        if s["without_timestamp"]:
            found.append(f"{name}: {s['without_timestamp']} events without a readable timestamp")
        if not phase["caught_up"]:
            found.append(f"{name}: the readers had not caught up within {DRAIN_TIMEOUT} s")
    return found


def per_write(phase):
    """intake's CPU µs per write answered 202 over the phase."""
    return phase["intake_cpu_s"] * 1e6 / phase["accepted"] if phase["accepted"] else None


def per_event(phase, baseline):
    """intake's CPU µs per event delivered beyond what the phase's writes cost without
    streams (BASELINE's CPU per write)."""
    events, base = phase["stream"]["events"], per_write(baseline)
    if not events or base is None:
        return None
    return (phase["intake_cpu_s"] * 1e6 - phase["accepted"] * base) / events


def reader_cost(phase):
    events = phase["stream"]["events"]
    return phase["readers_cpu_s"] * 1e6 / events if events else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--intake", required=True)
    ap.add_argument("--readers", required=True, help="the stream_readers executable")
    ap.add_argument("--work", required=True)
    ap.add_argument("--results", required=True)
    args = ap.parse_args()
    if READERS < 1:
        sys.exit("READERS must be at least 1")
    with open("/proc/loadavg") as f:
        loadavg = " ".join(f.read().split()[:3])
    # Leaving a block stops what was started in it, whatever happened.
    with stopped_on_exit() as procs:
        base_run = run_server("baseline", args, 0, procs)
    with stopped_on_exit() as procs:
        run = run_server("readers", args, READERS, procs)

    b0, p0, b, p = base_run["burst"], base_run["paced"], run["burst"], run["paced"]
    bs, ps = b["stream"], p["stream"]
    mb = lambda kb: f"{kb / 1024:.1f}"
    fmt = lambda v: "–" if v is None else f"{v:.2f}"
    lat = lambda s: " / ".join(fmt(s["latency_ms"][k]) for k in ("p50", "p90", "p99", "max"))
    lag = lambda ph: "–" if ph.get("lag_s") is None else f"{ph['lag_s']:.2f} s"
    cores = lambda ph: (f"{ph['intake_cores']:.2f} / {ph['readers_cores']:.2f} / "
                        f"{ph['wrk_cores']:.2f} / {ph['machine_cores']:.2f}")
    us = lambda v: "–" if v is None else f"{v:.2f}"
    found = problems(run)
    profile = " ".join(f"{k}={v}" for k, v in profile_vars(os.environ.get("PROFILE_ENV", "")))
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
               platform.processor())
    report = f"""## Change stream benchmark

- date: {datetime.now(timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}, commit: {commit}
- machine: {os.cpu_count()} CPUs, {cpu}; intake, the readers and wrk share it; load average
  before the run: {loadavg}
- intake `[stream]`: max_per_key = {max(128, READERS)} (other settings default); two servers,
  each on a fresh data dir: without streams (baseline), then with {READERS} streams open on the
  endpoint (`benches/stream_readers.rs`, one process, one connection per stream)
- burst: `wrk -t2 -c{CONNECTIONS} -d{BURST}s` POSTs of the ~1 KB record; paced:
  {PACED_CONNECTIONS} connections pausing {DELAY_MS} ms before each POST, for {PACED} s

| measure | no streams | {READERS} streams |
| --- | ---: | ---: |
| burst: writes/s (wrk) | {b0['wrk']['rps']:.0f} /s | {b['wrk']['rps']:.0f} /s |
| burst: POST → 202, p50 / p99 (wrk) | {b0['wrk']['p50_ms']:.2f} / {b0['wrk']['p99_ms']:.2f} ms | {b['wrk']['p50_ms']:.2f} / {b['wrk']['p99_ms']:.2f} ms |
| burst: events delivered (writes × readers) | – | {bs['events']} ({b['accepted']} × {READERS} = {b['accepted'] * READERS}) |
| **burst: events/s to the readers** | – | **{bs['events_per_s']:.0f} /s** over {bs['window_s']:.2f} s |
| burst: last event after the last write | – | {lag(b)} |
| **burst: write received → event, p50 / p90 / p99 / max** | – | **{lat(bs)} ms** |
| paced: writes/s | {p0['wrk']['rps']:.0f} /s | {p['wrk']['rps']:.0f} /s |
| paced: POST → 202, p50 / p99 (wrk) | {p0['wrk']['p50_ms']:.2f} / {p0['wrk']['p99_ms']:.2f} ms | {p['wrk']['p50_ms']:.2f} / {p['wrk']['p99_ms']:.2f} ms |
| paced: events/s to the readers | – | {ps['events_per_s']:.0f} /s |
| **paced: write received → event, p50 / p90 / p99 / max** | – | **{lat(ps)} ms** |
| intake peak RSS (VmHWM): burst / paced | {mb(b0['hwm_kb'])} / {mb(p0['hwm_kb'])} MB | {mb(b['hwm_kb'])} / {mb(p['hwm_kb'])} MB |
| largest memory sample, RSS / anon: burst | {mb(b0['mem'].get('rss_max_kb', 0))} / {mb(b0['mem'].get('anon_max_kb', 0))} MB | {mb(b['mem'].get('rss_max_kb', 0))} / {mb(b['mem'].get('anon_max_kb', 0))} MB |
| intake RSS before the burst (streams open) | {mb(base_run['idle_rss_kb'])} MB | {mb(run['idle_rss_kb'])} MB |
| cores busy in the burst: intake / readers / wrk / whole machine | {cores(b0)} | {cores(b)} |
| cores busy in the paced phase: intake / readers / wrk / whole machine | {cores(p0)} | {cores(p)} |
| intake CPU per write: burst / paced | {us(per_write(b0))} / {us(per_write(p0))} µs | {us(per_write(b))} / {us(per_write(p))} µs |
| intake CPU per event delivered, beyond the writes' own: burst / paced | – | {us(per_event(b, b0))} / {us(per_event(p, p0))} µs |
| the readers' CPU per event: burst / paced | – | {us(reader_cost(b))} / {us(reader_cost(p))} µs |

- every reader got every write: {"yes" if not found else "NO"}
  - burst: {bs['per_reader_min']} to {bs['per_reader_max']} events per reader against {b['accepted']} writes answered 202 (missing {bs['missing']}, beyond the 202s {bs['extra']} in all)
  - paced: {ps['per_reader_min']} to {ps['per_reader_max']} events per reader against {p['accepted']} writes answered 202 (missing {ps['missing']}, beyond the 202s {ps['extra']} in all)
  - events beyond the 202s are writes whose answer wrk cut off at the end of its run (at most
    one per connection and reader)
  - the readers' fingerprints of the event ids agree: burst {bs['fingerprints_agree']}, paced {ps['fingerprints_agree']};
    streams ended: {bs['disconnects'] + ps['disconnects']}
- latency is measured from the event's `timestamp` (when intake received the write, before its
  durable commit and the 202) to the event's arrival at its reader (read once per socket read),
  so it is an upper bound of "commit to event"; percentiles within 0.8 % (histogram buckets)
- the cores cover each phase from wrk's start to the readers' last event ({b['span_s']:.1f} s
  and {p['span_s']:.1f} s with streams); before the paced phase the server was left to go idle
  ({base_run['settle_s']:.1f} s and {run['settle_s']:.1f} s)
- memory: VmHWM reset (clear_refs) before each phase{"" if b['hwm_reset'] else " (reset refused: the peak of the run so far)"};
  samples of smaps_rollup every 0.25 s; intake's environment: {profile or "no profile variables"}
"""
    if found:
        report += "\n**Problems:**\n\n" + "".join(f"- {line}\n" for line in found)
    print(report)
    with open(args.results, "w") as f:
        f.write(report)
    log(f"wrote {args.results}")
    if os.environ.get("RESULTS_JSON"):
        write_figures(os.environ["RESULTS_JSON"], figures(base_run, run, found))
    if found:
        sys.exit("the readers did not all get every write: " + "; ".join(found))


def figures(base_run, run, found):
    """The key figures for RESULTS_JSON."""
    out = {"readers": READERS, "ok": not found}
    for name, r in (("baseline", base_run), ("streams", run)):
        for phase in ("burst", "paced"):
            ph = r[phase]
            key = f"{name}_{phase}"
            out[f"{key}_writes_per_s"] = round(ph["wrk"]["rps"], 1)
            out[f"{key}_post_p99_ms"] = round(ph["wrk"]["p99_ms"], 2)
            out[f"{key}_peak_rss_mb"] = round(ph["hwm_kb"] / 1024, 1)
            out[f"{key}_intake_cores"] = round(ph["intake_cores"], 2)
            if "stream" in ph:
                s = ph["stream"]
                out[f"{phase}_events_per_s"] = s["events_per_s"]
                for k, v in s["latency_ms"].items():
                    out[f"{phase}_latency_{k}_ms"] = v
                out[f"{phase}_missing"] = s["missing"]
                cost = per_event(ph, base_run[phase])
                out[f"{phase}_intake_us_per_event"] = None if cost is None else round(cost, 2)
    return out


if __name__ == "__main__":
    main()
