"""Soak benchmark driver, run by benches/soak.sh (which builds the binaries).

One intake server (release build) on 127.0.0.1 with an endpoint whose sandbox owner webhook
points at the benchmark receiver (benches/webhook_receiver.rs, answers 200 at once and notes
every arrival). wrk runs benches/soak.lua against the endpoint for DURATION: 70 % POST, 20 %
list/search/poll, 10 % PUT/DELETE, paced (CONNECTIONS connections, DELAY_MS between requests
on each) so that the load is one the server can sustain for hours, which is what a soak
checks. Every SAMPLE seconds the driver records intake's RSS and, from GET /metrics, the
ingest queue depth and the webhook deliveries still pending.

At the end: wait for the pending deliveries to drain, then check that every 202 was stored
(records counted by draining poll from the beginning == creates - deletes) and delivered
(receiver arrivals >= creates + replaces + deletes acknowledged), and that RSS and the queues
stayed flat (second half of the run against the first). When wrk stops, each connection may
have one request in flight whose write is committed but whose 202 is never read: those may
add at most CONNECTIONS records and deliveries beyond the acknowledged ones.
"""

import os
import platform
import re
import subprocess
import sys
import time
from datetime import datetime, timezone

from benchlib import (call, driver_args, endpoint_with_webhook, start_intake, start_receiver,
                      stopped_on_exit)

BENCH_DIR = os.environ["BENCH_DIR"]
DURATION = int(os.environ.get("DURATION", "600"))
CONNECTIONS = int(os.environ.get("CONNECTIONS", "16"))
DELAY_MS = int(os.environ.get("DELAY_MS", "6"))
SAMPLE = int(os.environ.get("SAMPLE", "5"))


def log(msg):
    print(f"soak.py: {msg}", file=sys.stderr, flush=True)


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def gauges(base):
    text = call("GET", f"{base}/metrics")
    values = {}
    for name in ("intake_ingest_queue_depth", "intake_webhook_pending_deliveries"):
        m = re.search(rf"^{name} (\d+)$", text, re.M)
        values[name] = int(m.group(1)) if m else -1
    return values


def acknowledged(base, method, route):
    """How many `method` requests on `route` the server answered 202 (from GET /metrics)."""
    text = call("GET", f"{base}/metrics")
    series = (f'intake_http_requests_total{{route="{route}",method="{method}",status="202"}}')
    m = re.search(rf"^{re.escape(series)} (\d+)$", text, re.M)
    return int(m.group(1)) if m else 0


def count_records(base, slug, key):
    """Drains poll from the beginning: every stored record once."""
    total, query = 0, "since=1970-01-01&limit=100"
    while True:
        page = call("GET", f"{base}/api/v1/data/{slug}/poll?{query}", key)
        total += len(page["data"])
        if "next_cursor" not in page:
            return total
        query = f"cursor={page['next_cursor']}&limit=100"


def main():
    args = driver_args()
    # Leaving the block stops intake and the receiver, whatever happened in it.
    with stopped_on_exit() as procs:
        receiver, receiver_url = start_receiver(args.receiver)
        procs.append(receiver)
        # Hold-back 0: poll sees a record as soon as it is committed, so the final count is
        # exact without waiting a minute.
        intake, base, token = start_intake(
            args.intake, args.work,
            "[webhooks]\nallow_private_targets = true\n[poll]\nhold_back = \"0s\"\n")
        procs.append(intake)
        slug, key = endpoint_with_webhook(base, token, f"{receiver_url}/hook")
        since = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

        log(f"wrk: {CONNECTIONS} connections, {DELAY_MS} ms pause each, {DURATION} s")
        env = dict(os.environ, INTAKE_KEY=key, SLUG=slug, DELAY_MS=str(DELAY_MS), SINCE=since)
        wrk = subprocess.Popen(
            ["wrk", "-t2", f"-c{CONNECTIONS}", f"-d{DURATION}s", "--latency", "--timeout", "10s",
             "-s", os.path.join(BENCH_DIR, "soak.lua"), base],
            stdout=subprocess.PIPE, text=True, env=env)
        procs.append(wrk)
        samples = []
        started = time.time()
        while wrk.poll() is None:
            time.sleep(SAMPLE)
            if wrk.poll() is not None:
                break
            g = gauges(base)
            samples.append((time.time() - started, rss_mb(intake.pid),
                            g["intake_ingest_queue_depth"], g["intake_webhook_pending_deliveries"]))
            if len(samples) % 12 == 0:
                log("t=%4.0fs rss=%.0f MB queue=%d pending deliveries=%d" % samples[-1])
        out = wrk.stdout.read()
        stats = dict(line.split(" ", 1) for line in out.splitlines()
                     if re.match(r"^[a-z0-9_]+ \S+$", line))
        posts = int(stats["posts_ok"])
        puts_deletes = int(stats["puts_and_deletes_ok"])

        # Drain: every acknowledged write's delivery reaches the receiver.
        deadline = time.time() + 300
        while gauges(base)["intake_webhook_pending_deliveries"] > 0 and time.time() < deadline:
            time.sleep(1)
        delivered = call("GET", f"{receiver_url}/stats")["count"]
        stored = count_records(base, slug, key)
        # wrk cannot tell a PUT's answer from a DELETE's; the server's counters can.
        deletes = acknowledged(base, "DELETE", "/api/v1/data/{slug}/{record_id}")
        server_posts = acknowledged(base, "POST", "/api/v1/data/{slug}")
        final_rss = rss_mb(intake.pid)

    writes = posts + puts_deletes
    half = len(samples) // 2
    first, second = samples[:half], samples[half:]
    peak = lambda rows, i: max((r[i] for r in rows), default=0)
    rows = "\n".join("| %.0f | %.0f | %d | %d |" % s for s in samples[:: max(1, len(samples) // 20)])
    report = f"""# Soak benchmark

{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} CPUs,
intake and wrk and the receiver on the same machine.
`DURATION={DURATION} CONNECTIONS={CONNECTIONS} DELAY_MS={DELAY_MS} bash benches/soak.sh`

| measure | value |
| --- | ---: |
| requests (70 % POST, 20 % list/search/poll, 10 % PUT/DELETE) | {stats['requests']} |
| throughput | {float(stats['rps']):,.0f} requests/s |
| p50 / p99 | {stats['p50_ms']} / {stats['p99_ms']} ms |
| non-2xx answers / socket errors | {stats['non2xx']} / {stats['socket_errors']} |
| creates / replaces+deletes acknowledged (202) | {posts} / {puts_deletes} |
| creates answered 202 by the server (its /metrics) | {server_posts} |
| records stored at the end (poll from the start) / expected (creates - {deletes} deletes) | {stored} / {posts - deletes} |
| webhook deliveries received / writes acknowledged | {delivered} / {writes} |
| RSS: first half peak / second half peak / at the end | {peak(first, 1):.0f} / {peak(second, 1):.0f} / {final_rss:.0f} MB |
| ingest queue depth: first half peak / second half peak | {peak(first, 2)} / {peak(second, 2)} |
| pending deliveries: first half peak / second half peak | {peak(first, 3)} / {peak(second, 3)} |

Over time (seconds, RSS MB, ingest queue depth, pending deliveries):

| t (s) | RSS (MB) | queue | pending deliveries |
| ---: | ---: | ---: | ---: |
{rows}
"""
    with open(args.results, "w") as f:
        f.write(report)
    print(report)
    # wrk stops with one request in flight per connection: those writes may be committed
    # without their 202 being read, so they may add at most CONNECTIONS records/deliveries.
    expected = posts - deletes
    ok = (writes <= delivered <= writes + CONNECTIONS
          and expected <= stored <= expected + CONNECTIONS
          and server_posts >= posts and stats["non2xx"] == "0")
    if not ok:
        sys.exit("soak: a 202 was not stored or not delivered, or requests failed (see above)")


if __name__ == "__main__":
    main()
