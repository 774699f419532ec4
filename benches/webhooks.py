"""Webhook benchmark driver, run by benches/webhooks.sh (which builds the binaries).

Phases, all on 127.0.0.1, one intake server and one receiver (benches/webhook_receiver.rs,
answers 200 at once and notes each arrival's time and X-svc-Record-Id):

1. ceiling: wrk POSTs straight to the receiver: the most requests/s it takes on this machine,
   the baseline the delivery rate is compared with.
2. backlog and drain: the receiver holds every POST unanswered (so the dispatcher's
   connections wait) while wrk POSTs to intake at full speed for BURST (the endpoint's
   sandbox owner webhook points at the receiver); then the receiver lets go and answers at
   once, and we wait until every accepted write has been delivered. Deliveries/s =
   deliveries / (last arrival - release): signing, sending and the attempt log's commits
   included, with nothing else running. The burst's own writes/s is reported beside it.
3. paced: wrk at about 1,000 writes/s for PACED; for each record, latency = arrival at the
   receiver - the record's created_at (in its id: stamped when the POST arrived, before the
   commit and the 202), so it is an upper bound of "202 to receiver".

SUBSCRIPTIONS (default 1) gives the endpoint that many subscriptions to the receiver: the
first takes every event, of the others every second one `record.created` and the rest
`record.deleted` only (which the benchmark's creates do not match), so each write makes
1 + (SUBSCRIPTIONS - 1 + 1) // 2 deliveries and the filter is checked for every
subscription.

intake's memory is sampled from its start to its stop (benchlib.mem_watch, lib.sh's sampler);
VmHWM is read after the backlog has drained (the peak of everything up to then: the backlog
and its drain, intake being idle before) and at the end (the whole run). The profile file
PROFILE_ENV, when set, gives intake its variables. With RESULTS_JSON set, the key figures are
also written there as JSON: ceiling_rps, deliveries_per_s, backlog_writes, burst_rps,
paced_writes_per_s, latency_p50_ms, latency_p99_ms, duplicates, peak_rss_mb,
backlog_peak_rss_mb, peak_sampled_rss_mb, peak_anon_mb, peak_file_mb, backlog_peak_anon_mb,
backlog_peak_file_mb.
"""

import os
import platform
import re
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timezone

from benchlib import (call, driver_args, endpoint_with_webhook, mem_peaks, mem_watch,
                      proc_kb, profile_vars, start_intake, start_receiver, stopped_on_exit,
                      write_figures)

ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
BENCH_DIR = os.environ["BENCH_DIR"]
BURST = os.environ.get("BURST", "5s")
PACED = os.environ.get("PACED", "20s")
CONNECTIONS = int(os.environ.get("CONNECTIONS", "12"))
DELAY_MS = int(os.environ.get("DELAY_MS", "8"))
SUBSCRIPTIONS = int(os.environ.get("SUBSCRIPTIONS", "1"))


def log(msg):
    print(f"webhooks.py: {msg}", file=sys.stderr, flush=True)


def wrk(url, duration, connections, script, key=None, extra_env=None):
    env = dict(os.environ, BENCH_DIR=BENCH_DIR, INTAKE_KEY=key or "")
    env.update(extra_env or {})
    cmd = ["wrk", "-t2", f"-c{connections}", f"-d{duration}", "--latency", "-s", script, url]
    log(" ".join(cmd))
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    values = dict(line.split(" ", 1) for line in out.splitlines() if re.match(r"^[a-z0-9_]+ \S+$", line))
    return {k: float(v) for k, v in values.items()}


def created_us(record_id):
    n = 0
    for c in record_id.removeprefix("rec_"):
        n = n * 32 + ALPHABET.index(c)
    return n >> 64


def add_subscriptions(base, token, slug, hook_url):
    """Gives the endpoint SUBSCRIPTIONS - 1 more subscriptions to HOOK_URL (see the module
    docs); returns how many subscriptions each create is delivered to."""
    path = f"{base}/api/v1/manage/endpoints/{slug}/webhooks/sandbox/subscriptions"
    matching = 1
    for n in range(1, SUBSCRIPTIONS):
        types = ["record.created"] if n % 2 == 1 else ["record.deleted"]
        call("POST", path, token, {"url": hook_url, "event_types": types,
                                   "description": f"bench {n}"})
        matching += n % 2
    return matching


def wait_delivered(receiver, at_least):
    """Waits until the receiver has `at_least` arrivals and no more come for 2 s."""
    last, still_since = -1, time.time()
    deadline = time.time() + 600
    while time.time() < deadline:
        count = call("GET", f"{receiver}/stats")["count"]
        if count != last:
            last, still_since = count, time.time()
        elif count >= at_least and time.time() - still_since > 2:
            return call("GET", f"{receiver}/stats")
        elif time.time() - still_since > 60:
            sys.exit(f"deliveries stalled at {count} of {at_least}")
        time.sleep(0.2)
    sys.exit("deliveries did not finish in 10 minutes")


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def main():
    args = driver_args()
    post_lua = os.path.join(BENCH_DIR, "post.lua")
    paced_lua = os.path.join(BENCH_DIR, "post_paced.lua")
    webhooks = "[webhooks]\nallow_private_targets = true\n"
    if os.environ.get("WORKERS"):
        webhooks += f"workers = {int(os.environ['WORKERS'])}\n"
    if os.environ.get("PER_TARGET"):
        webhooks += f"per_target_concurrency = {int(os.environ['PER_TARGET'])}\n"
    # Leaving the block stops intake and the receiver, whatever happened in it.
    with stopped_on_exit() as procs:
        rx, receiver = start_receiver(args.receiver)
        procs.append(rx)
        intake, base, token = start_intake(args.intake, args.work, webhooks)
        procs.append(intake)
        mem_file = os.path.join(args.work, "intake.mem")
        procs.append(mem_watch(intake.pid, mem_file))
        slug, key = endpoint_with_webhook(base, token, f"{receiver}/hook")
        per_write = add_subscriptions(base, token, slug, f"{receiver}/hook")
        data_url = f"{base}/api/v1/data/{slug}"

        log("phase 1: the receiver's ceiling")
        ceiling = wrk(f"{receiver}/hook", "10s", 8, post_lua)
        call("DELETE", f"{receiver}/arrivals")

        log(f"phase 2: full-speed writes for {BURST} with the receiver held, then the drain")
        call("PUT", f"{receiver}/hold")
        backlog_t0 = time.time()
        burst = wrk(data_url, BURST, 32, post_lua, key)
        accepted = int(burst["requests"] - burst["non2xx"])
        call("DELETE", f"{receiver}/hold")
        stats = wait_delivered(receiver, accepted * per_write)
        span = (stats["last_us"] - stats["first_us"]) / 1e6
        delivered_per_s = stats["count"] / span if span > 0 else 0.0
        backlog_hwm_kb = proc_kb(intake.pid, "VmHWM")
        backlog_mem = mem_peaks(mem_file, backlog_t0, time.time())
        call("DELETE", f"{receiver}/arrivals")

        log(f"phase 3: about {CONNECTIONS * 1000 // DELAY_MS} writes/s for {PACED}")
        paced = wrk(data_url, PACED, CONNECTIONS, paced_lua, key, {"DELAY_MS": str(DELAY_MS)})
        wait_delivered(receiver, int(paced["requests"] - paced["non2xx"]) * per_write)
        with urllib.request.urlopen(f"{receiver}/arrivals", timeout=60) as resp:
            lines = resp.read().decode().splitlines()
        latencies = []
        for line in lines:
            at, record = line.split(" ", 1)
            if record.startswith("rec_"):
                latencies.append((int(at) - created_us(record)) / 1000)
        # Every write of the paced phase is delivered once per matching subscription (a 200
        # is never retried).
        ids = [l.split(" ", 1)[1] for l in lines]
        duplicates = len(ids) - per_write * len(set(ids))
        hwm_kb = proc_kb(intake.pid, "VmHWM")
    run_mem = mem_peaks(mem_file)
    mb = lambda kb: round(kb / 1024, 1)
    profile = " ".join(f"{k}={v}" for k, v in profile_vars(os.environ.get("PROFILE_ENV", "")))

    commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                            text=True).stdout.strip()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
               platform.processor())
    report = f"""## Webhook benchmark

- date: {datetime.now(timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}, commit: {commit}
- machine: {os.cpu_count()} CPUs, {cpu}; intake, the receiver and wrk share it
- intake `[webhooks]`: {webhooks.strip().replace(chr(10), '; ')} (other settings default)
- subscriptions: {SUBSCRIPTIONS} to the receiver, {per_write} matching each write (the others
  filter out the benchmark's `record.created` events)

| measure | result | target |
| --- | ---: | ---: |
| receiver ceiling (wrk POSTs straight to it, 8 connections) | {ceiling['rps']:.0f} requests/s | (baseline) |
| deliveries/s, draining the backlog of {accepted} writes | {delivered_per_s:.0f} /s | ≥ 5,000 /s |
| deliveries as % of the receiver ceiling | {100 * delivered_per_s / ceiling['rps']:.1f} % | |
| writes/s in the paced phase | {len(latencies) / per_write / float(PACED.rstrip('s')):.0f} /s | about 1,000 /s |
| POST arrival → receiver, p50 | {percentile(latencies, 50):.2f} ms | ≤ 20 ms |
| POST arrival → receiver, p90 / p99 / max | {percentile(latencies, 90):.2f} / {percentile(latencies, 99):.2f} / {max(latencies):.2f} ms | |
| POST → 202 as wrk saw it in the paced phase, p50 / p99 | {paced['p50_ms']:.2f} / {paced['p99_ms']:.2f} ms | |
| intake peak RSS (VmHWM): backlog and its drain / whole run | {mb(backlog_hwm_kb)} / {mb(hwm_kb)} MB | |
| largest memory sample, RSS / anon / file-backed: backlog and its drain | {mb(backlog_mem['rss_max_kb'])} / {mb(backlog_mem['anon_max_kb'])} / {mb(backlog_mem['file_max_kb'])} MB | |
| largest memory sample, RSS / anon / file-backed: whole run | {mb(run_mem['rss_max_kb'])} / {mb(run_mem['anon_max_kb'])} / {mb(run_mem['file_max_kb'])} MB | |

- backlog phase: {accepted} writes accepted in {BURST} at {burst['rps']:.0f} /s with webhooks on
  (receiver held); {stats['count']} deliveries received over {span:.1f} s from the release
- paced phase: {len(latencies)} deliveries, {duplicates} duplicates; latency is measured from the
  record's `created_at` (stamped when its POST arrived, before the fsynced commit and the 202) to
  the receiver's arrival time, so it is an upper bound of "202 to receiver's first byte"
- memory: smaps_rollup every 0.25 s (file-backed = Rss - Anonymous); intake's environment:
  {profile or "no profile variables"}
"""
    print(report)
    with open(args.results, "w") as f:
        f.write(report)
    log(f"wrote {args.results}")
    if os.environ.get("RESULTS_JSON"):
        write_figures(os.environ["RESULTS_JSON"], {
            "ceiling_rps": round(ceiling["rps"], 1), "deliveries_per_s": round(delivered_per_s, 1),
            "backlog_writes": accepted, "burst_rps": round(burst["rps"], 1),
            "paced_writes_per_s": round(len(latencies) / per_write / float(PACED.rstrip("s")), 1),
            "latency_p50_ms": round(percentile(latencies, 50), 2),
            "latency_p99_ms": round(percentile(latencies, 99), 2), "duplicates": duplicates,
            "peak_rss_mb": mb(hwm_kb), "backlog_peak_rss_mb": mb(backlog_hwm_kb),
            "peak_sampled_rss_mb": mb(run_mem["rss_max_kb"]), "peak_anon_mb": mb(run_mem["anon_max_kb"]),
            "peak_file_mb": mb(run_mem["file_max_kb"]),
            "backlog_peak_anon_mb": mb(backlog_mem["anon_max_kb"]),
            "backlog_peak_file_mb": mb(backlog_mem["file_max_kb"]),
        })


if __name__ == "__main__":
    main()
