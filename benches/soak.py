"""Soak benchmark driver, run by benches/soak.sh (which builds the binaries, starts the
PostgreSQL cluster and calls `run` once per backend, then `report`).

`run`: one intake server (release build) on 127.0.0.1, on redb or on PostgreSQL, with an
endpoint whose sandbox owner webhook points at the benchmark receiver
(benches/webhook_receiver.rs), which answers 503 to FAIL_PERCENT % of the deliveries' first
attempts (intake retries them). For DURATION seconds, all at once:

- wrk runs benches/soak.lua: 70 % POST, 20 % list/search/poll, 10 % PUT/DELETE of young records,
  paced (CONNECTIONS connections, DELAY_MS between requests on each), the key read from a file;
- READERS change streams (benches/stream_readers.rs) stay open the whole run;
- every DURATION/12 the sandbox key is rotated with a grace period; the key file (wrk) and the
  readers move to the new key, the readers reopening with Last-Event-ID;
- every DURATION/6 a backup: `intake backup` on redb, `pg_dump` on PostgreSQL (what the docs
  tell an operator of a PostgreSQL store to do: intake answers 409 there);
- retention purges: the sandbox window cannot be under one day and the purge runs hourly by the
  server's clock, so the server runs with `[retention] sandbox = "1d"` under libfaketime, its
  wall clock moved forward by a fifth of a day every DURATION/30 (monotonic time is left
  alone): records older than about DURATION/6 are purged, every DURATION/30. wrk changes
  only records younger than DURATION/12, so none it touches has been purged;
- every SAMPLE seconds: RSS, the /metrics gauges (ingest queue, pending deliveries, retry
  backlog, search index lag, request body KiB, open streams), the p99 of the data calls of the
  interval (from the latency histogram), the data dir's (redb) or the database's (PostgreSQL)
  size, and the records held (creates - deletes - purged, from /metrics and the server log).

At the end it drains the deliveries, lets the readers catch up, reads every stored record by
poll, and writes WORK/BACKEND.json (figures, samples, checks). `report` turns the runs' JSON into
RESULTS (Markdown) and one SVG per backend (RSS, p99, queue depths over time), and exits 1 when a
check failed. The checks are described in docs/src/benchmarks.md ("Soak") and CHECKS below.
"""

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone

from benchlib import call, endpoint_with_webhook, start_intake, start_receiver, stopped_on_exit

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
DURATION = int(os.environ.get("DURATION", "3600"))
CONNECTIONS = int(os.environ.get("CONNECTIONS", "8"))
DELAY_MS = int(os.environ.get("DELAY_MS", "20"))
SAMPLE = float(os.environ.get("SAMPLE", str(min(5.0, max(1.0, DURATION / 120)))))
READERS = int(os.environ.get("READERS", "3"))
FAIL_PERCENT = int(os.environ.get("FAIL_PERCENT", "10"))
LIBFAKETIME = os.environ.get("LIBFAKETIME", "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")

DAY = 86_400
# The schedule, scaled with DURATION (the hour: the server's clock a fifth of a day on every
# 2 min, so records are purged about 10 min after their creation; warm-up 10 min, the time
# the records held take to reach their steady number; windows of 10 min; a rotation every 5
# min, a backup every 10 min).
RETENTION = DURATION / 6
CLOCK_STEP_EVERY = RETENTION / 5
CLOCK_STEP = DAY // 5
WARMUP = float(os.environ.get("WARMUP", RETENTION))
ROTATE_EVERY = DURATION / 12
BACKUP_EVERY = float(os.environ.get("BACKUP_EVERY", DURATION / 6)) or float("inf")
MAX_AGE = RETENTION / 2
GRACE = DAY   # server-clock seconds: outlasts the next rotation, which ends it

# The checks' tolerances.
# The last window's RSS peak at most 10 % over the first window's (the rule).
RSS_GROWTH = float(os.environ.get("RSS_GROWTH", "0.10"))
QUEUE_FACTOR, QUEUE_FLOOR = 2.0, 100   # last window's peak <= 2 x the first's + 100
# What the data explains of the store's growth (see docs/src/benchmarks.md, "Soak"): twice the
# payload of the most records held at once (the data dir target of issue #22); per write what
# is kept for it after its record is purged: the delivery with its attempt rows (kept for
# ever) and, on PostgreSQL, the dead row versions VACUUM has not reused yet; per data call its
# request-log entry (kept 14 days); and a fixed part: redb grows its file by regions, not by
# pages. The per-write and per-call figures are about 1.5 times what the runs in the book
# measured.
PAYLOAD_FACTOR = 2.0
PER_WRITE = 4096
PER_REQUEST = 512
FIXED = 64 << 20

GAUGES = ("intake_ingest_queue_depth", "intake_webhook_pending_deliveries",
          "intake_webhook_retry_backlog", "intake_search_index_lag", "intake_request_body_kib",
          "intake_streams_open")
DATA_ROUTE = "/api/v1/data/{slug}"
RECORD_ROUTE = "/api/v1/data/{slug}/{record_id}"
PURGED = re.compile(r"retention: deleted (\d+) records")


def log(msg):
    print(f"soak.py: {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------ reading the server

def memory_kb(pid):
    """(RSS, anonymous) in kB, from /proc/PID/smaps_rollup: the rest of RSS is file-backed
    (tantivy's mapped segments, the binary), pages the kernel can drop."""
    values = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if parts and parts[0] in ("Rss:", "Anonymous:"):
                values[parts[0]] = int(parts[1])
    return values.get("Rss:", 0), values.get("Anonymous:", 0)


def metrics(base):
    """/metrics as {series name: [(labels dict, value)]}."""
    out = {}
    for line in call("GET", f"{base}/metrics").splitlines():
        m = re.match(r"^([a-z_]+)(?:\{(.*)\})? (\S+)$", line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        out.setdefault(m.group(1), []).append((labels, float(m.group(3))))
    return out


def series(m, name, **want):
    return sum(v for labels, v in m.get(name, []) if all(labels.get(k) == x for k, x in want.items()))


def accepted(m, method, route):
    return int(series(m, "intake_http_requests_total", route=route, method=method, status="202"))


def data_calls(m):
    """Data calls answered so far (every status; the change stream not counted)."""
    return int(sum(v for labels, v in m.get("intake_http_requests_total", [])
                   if labels.get("route", "").startswith("/api/v1/data/")
                   and not labels["route"].endswith("/stream")))


def latency_buckets(m):
    """Cumulative counts per bucket bound of the data calls' latency (the stream left out)."""
    buckets = {}
    for labels, v in m.get("intake_http_request_duration_seconds_bucket", []):
        route = labels.get("route", "")
        if route.startswith("/api/v1/data/") and not route.endswith("/stream"):
            le = float("inf") if labels["le"] == "+Inf" else float(labels["le"])
            buckets[le] = buckets.get(le, 0) + v
    return buckets


def p99_ms(before, after):
    """The p99 of the calls answered between two latency_buckets() readings: the upper bound
    of the bucket it falls in (None without calls)."""
    bounds = sorted(after)
    delta = [after[b] - before.get(b, 0) for b in bounds]
    if not delta or delta[-1] <= 0:
        return None
    for bound, cum in zip(bounds, delta):
        if cum >= 0.99 * delta[-1]:
            return bound * 1000 if bound != float("inf") else bounds[-2] * 1000
    return None


def purged_so_far(log_path):
    with open(log_path, errors="replace") as f:
        return sum(int(n) for n in PURGED.findall(f.read()))


def du_bytes(path):
    """The size of the files under `path`. A file removed while du walks (the search index
    merging its segments) makes du exit 1 with the total of the rest: still the size."""
    done = subprocess.run(["du", "-sb", path], capture_output=True, text=True)
    total = done.stdout.split()
    if not total:
        raise RuntimeError(f"du -sb {path} printed no total: {done.stderr.strip()}")
    return int(total[0])


class Postgres:
    """The cluster soak.sh started: a database of its own for the run, its size, pg_dump."""

    def __init__(self, pg_bin, port, db):
        self.pg_bin, self.port, self.db = pg_bin, port, db
        self.conn = ["-h", "127.0.0.1", "-p", str(port), "-U", "postgres"]

    def psql(self, sql, db="postgres"):
        return subprocess.run([f"{self.pg_bin}/psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1",
                               *self.conn, "-d", db, "-c", sql],
                              capture_output=True, text=True, check=True).stdout.strip()

    def size(self):
        return int(self.psql(f"SELECT pg_database_size('{self.db}')"))

    def dump(self, path):
        subprocess.run([f"{self.pg_bin}/pg_dump", *self.conn, "-d", self.db, "-Fc", "-f", path],
                       check=True, capture_output=True)


def count_records(base, slug, key):
    """Drains poll from the beginning: (records stored, their payload bytes as compact JSON)."""
    total, payload, query = 0, 0, "since=1970-01-01&limit=100"
    while True:
        page = call("GET", f"{base}/api/v1/data/{slug}/poll?{query}", key)
        total += len(page["data"])
        payload += sum(len(json.dumps(r["payload"], separators=(",", ":"), ensure_ascii=False)
                           .encode()) for r in page["data"])
        if "next_cursor" not in page:
            return total, payload
        query = f"cursor={page['next_cursor']}&limit=100"


def settled_count(base, slug, key, log_path):
    """(records stored, their payload bytes, records purged) at one moment. The drain's last
    clock step may have set off a purge still under way: its commit between the count and the
    reading of the purges' log lines would count its records both as stored and as purged (a
    CI run failed so: 1,064 more stored than expected, one clock step's records). So the
    count is taken twice with the log read before and after, until nothing changed between:
    a purge committing meanwhile changes the second count, or its line the log."""
    while True:
        purged = purged_so_far(log_path)
        stored, payload = count_records(base, slug, key)
        if count_records(base, slug, key)[0] == stored and purged_so_far(log_path) == purged:
            return stored, payload, purged


# ------------------------------------------------------------ the readers

class Readers:
    """benches/stream_readers.rs: READERS streams, steered through stdin."""

    def __init__(self, exe, url, key):
        self.proc = subprocess.Popen([exe, "--url", url, "--key", key, "--readers", str(READERS)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        first = json.loads(self.proc.stdout.readline() or "{}")
        if first.get("connected") != READERS:
            sys.exit(f"stream readers did not connect: {first}")

    def ask(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def move_to(self, key, timeout=30):
        """Gives the readers the new key; returns the seconds until every stream is open
        with it (None past TIMEOUT)."""
        t0 = time.time()
        self.ask(f"key {key}")
        while time.time() - t0 < timeout:
            if self.ask("stats")["moved"] == READERS:
                return time.time() - t0
            time.sleep(0.1)
        return None


# ------------------------------------------------------------ run

def write_atomically(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def run(args):
    work = args.work
    os.makedirs(work, exist_ok=True)
    clock_file = os.path.join(work, "faketime")
    write_atomically(clock_file, "+0\n")
    clock_env = {"LD_PRELOAD": LIBFAKETIME, "FAKETIME_TIMESTAMP_FILE": clock_file,
                 "FAKETIME_DONT_FAKE_MONOTONIC": "1", "FAKETIME_CACHE_DURATION": "1",
                 "RUST_LOG": "warn,intake::domain::retention=info"}
    config = ("[webhooks]\nallow_private_targets = true\n[poll]\nhold_back = \"0s\"\n"
              "[retention]\nsandbox = \"1d\"\n")   # the shortest window intake allows
    pg = None
    if args.backend == "postgres":
        pg = Postgres(args.pg_bin, args.pg_port, "soak")
        pg.psql("DROP DATABASE IF EXISTS soak")
        pg.psql("CREATE DATABASE soak")
        config += (f'[storage]\nbackend = "postgres"\n[storage.postgres]\n'
                   f'url = "host=127.0.0.1 port={args.pg_port} user=postgres dbname=soak"\n'
                   f'tls = "disable"\n')
    data_dir = os.path.join(work, "data")
    size = pg.size if pg else (lambda: du_bytes(data_dir))
    intake_log = os.path.join(work, "intake.log")

    with stopped_on_exit() as procs:
        receiver, receiver_url = start_receiver(args.receiver)
        procs.append(receiver)
        call("PUT", f"{receiver_url}/failing/{FAIL_PERCENT}")
        intake, base, token = start_intake(args.intake, work, config, clock_env)
        procs.append(intake)
        slug, key = endpoint_with_webhook(base, token, f"{receiver_url}/hook")
        key_file = os.path.join(work, "key")
        write_atomically(key_file, key + "\n")
        readers = Readers(args.readers, f"{base}/api/v1/data/{slug}/stream", key)
        procs.append(readers.proc)
        since = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

        log(f"{args.backend}: wrk {CONNECTIONS} connections, {DELAY_MS} ms pause each, "
            f"{DURATION} s; {READERS} stream readers; receiver failing {FAIL_PERCENT} %")
        env = dict(os.environ, KEY_FILE=key_file, SLUG=slug, DELAY_MS=str(DELAY_MS), SINCE=since,
                   MAX_AGE=str(int(MAX_AGE)))
        wrk = subprocess.Popen(
            ["wrk", "-t2", f"-c{CONNECTIONS}", f"-d{DURATION}s", "--latency", "--timeout", "10s",
             "-s", os.path.join(BENCH_DIR, "soak.lua"), base],
            stdout=subprocess.PIPE, text=True, env=env)
        procs.append(wrk)

        started = time.time()
        size0 = size()
        samples, rotations, backups, clock_steps, missed = [], [], [], [], []
        backup_threads = []
        prev_buckets = latency_buckets(metrics(base))
        next_sample, next_rotation = SAMPLE, ROTATE_EVERY
        next_backup, next_step, offset = BACKUP_EVERY, CLOCK_STEP_EVERY, 0

        def backup(n, at):
            path = os.path.join(work, f"backup-{n}")
            t0 = time.time()
            try:
                if pg:
                    pg.dump(path)
                else:
                    subprocess.run([args.intake, "backup", "--to", path, "--server", base,
                                    "--token", token], check=True, capture_output=True)
                backups.append({"t": at, "seconds": round(time.time() - t0, 2),
                                "bytes": os.path.getsize(path), "ok": True})
            except (subprocess.CalledProcessError, OSError) as err:
                backups.append({"t": at, "ok": False, "error": str(err)})
            if os.path.exists(path):
                os.remove(path)   # the soak measures taking backups, not keeping them

        while wrk.poll() is None:
            time.sleep(0.25)
            now = time.time() - started
            if now >= next_step:
                offset += CLOCK_STEP
                write_atomically(clock_file, f"+{offset}\n")
                clock_steps.append(round(now, 1))
                next_step += CLOCK_STEP_EVERY
            if now >= next_rotation:
                answer = call("POST", f"{base}/api/v1/manage/endpoints/{slug}/keys/sandbox/rotate",
                              token, {"grace_period_seconds": GRACE})
                key = answer["key"]
                write_atomically(key_file, key + "\n")
                moved = readers.move_to(key)
                rotations.append({"t": round(now, 1), "readers_moved_s":
                                  None if moved is None else round(moved, 2)})
                next_rotation += ROTATE_EVERY
            if now >= next_backup:
                t = threading.Thread(target=backup, args=(len(backup_threads), round(now, 1)))
                t.start()
                backup_threads.append(t)
                next_backup += BACKUP_EVERY
            if now >= next_sample and wrk.poll() is None:
                try:
                    m = metrics(base)
                except OSError as e:
                    # The server refused its own metrics (a PostgreSQL node answers 503 while
                    # it finds the database out of reach): a check, not the end of the run.
                    missed.append({"t": round(now, 1), "error": str(e)})
                    log(f"{args.backend} t={now:.0f}s: /metrics failed: {e}")
                    next_sample += SAMPLE
                    continue
                buckets = latency_buckets(m)
                purged = purged_so_far(intake_log)
                rss, anon = memory_kb(intake.pid)
                row = {"t": round(now, 1), "rss_mb": round(rss / 1024, 1),
                       "anon_mb": round(anon / 1024, 1),
                       "p99_ms": p99_ms(prev_buckets, buckets), "size": size(),
                       "purged": purged,
                       "held": accepted(m, "POST", DATA_ROUTE) - accepted(m, "DELETE", RECORD_ROUTE)
                       - purged,
                       "writes": accepted(m, "POST", DATA_ROUTE) + accepted(m, "PUT", RECORD_ROUTE)
                       + accepted(m, "DELETE", RECORD_ROUTE),
                       "calls": data_calls(m)}
                row.update({g: int(series(m, g)) for g in GAUGES})
                prev_buckets = buckets
                samples.append(row)
                if len(samples) % max(1, int(60 / SAMPLE)) == 0:
                    log(f"{args.backend} t={now:.0f}s rss={row['rss_mb']} MB p99={row['p99_ms']} ms "
                        f"queue={row['intake_ingest_queue_depth']} "
                        f"pending={row['intake_webhook_pending_deliveries']} held={row['held']} "
                        f"purged={purged} size={row['size'] >> 20} MB")
                next_sample += SAMPLE
        for t in backup_threads:
            t.join()
        out = wrk.stdout.read()
        stats = dict(line.split(" ", 1) for line in out.splitlines()
                     if re.match(r"^[a-z0-9_]+ \S+$", line))

        # Drain: a retry (30 s after a failed first attempt, by the server's clock) comes due
        # sooner when the clock is moved on, a minute a second, as it was during the run.
        log(f"{args.backend}: draining deliveries")
        deadline = time.time() + 600
        while time.time() < deadline:
            m = metrics(base)
            if (series(m, "intake_webhook_pending_deliveries") == 0
                    and series(m, "intake_ingest_queue_depth") == 0):
                break
            offset += 60
            write_atomically(clock_file, f"+{offset}\n")
            time.sleep(1)
        m = metrics(base)
        expected_events = (accepted(m, "POST", DATA_ROUTE) + accepted(m, "PUT", RECORD_ROUTE)
                           + accepted(m, "DELETE", RECORD_ROUTE))
        deadline = time.time() + 120
        while readers.ask("stats")["min"] < expected_events and time.time() < deadline:
            time.sleep(1)
        stream = readers.ask(f"report {expected_events}")
        receiver_stats = call("GET", f"{receiver_url}/stats")
        # The server reads the clock file at most a second late (FAKETIME_CACHE_DURATION) and
        # looks at its purge schedule every second: a purge the drain's last step sets off
        # has begun after two, and settled_count waits out one under way.
        time.sleep(2)
        stored, payload, purged = settled_count(base, slug, key, intake_log)
        final = {
            "rss_mb": round(memory_kb(intake.pid)[0] / 1024, 1), "size": size(),
            "deletes": accepted(m, "DELETE", RECORD_ROUTE),
            "server_posts": accepted(m, "POST", DATA_ROUTE),
            "given_up": int(series(m, "intake_webhook_attempts_total", outcome="given_up")),
            "retried": int(series(m, "intake_webhook_attempts_total", outcome="retry")),
            "calls": data_calls(m),
            "purged": purged, "purges": len(PURGED.findall(open(intake_log, errors="replace").read())),
            "stored": stored, "payload_bytes": payload,
        }
        final.update({g: int(series(m, g)) for g in GAUGES})
        final["refused"] = {f"{labels['method']} {labels['route']} {labels['status']}": int(v)
                            for labels, v in m.get("intake_http_requests_total", [])
                            if not labels.get("status", "2").startswith("2")}
        with open(intake_log, errors="replace") as f:
            # What the server complained of (RUST_LOG=warn): the first few, and how many.
            complaints = [l.strip() for l in f if " WARN " in l or " ERROR " in l]
        final["log_warnings"] = {"count": len(complaints), "first": complaints[:5]}
        if args.pg_log:
            # Grouped by message (the text after the severity), the most frequent first: a
            # rare error is not hidden behind thousands of serialisation failures.
            by_message = {}
            with open(args.pg_log, errors="replace") as f:
                for line in f:
                    match = re.search(r"(ERROR|FATAL):\s+(.*)", line)
                    if match:
                        key = f"{match.group(1)}: {match.group(2).strip()}"
                        by_message[key] = by_message.get(key, 0) + 1
            final["postgres_errors"] = {
                "count": sum(by_message.values()),
                "by_message": dict(sorted(by_message.items(), key=lambda kv: -kv[1])[:8])}
        final["largest_purge"] = max(map(int, PURGED.findall(open(intake_log, errors="replace")
                                                             .read())), default=0)

    run_data = {
        "backend": args.backend, "duration": DURATION, "connections": CONNECTIONS,
        "delay_ms": DELAY_MS, "readers": READERS, "fail_percent": FAIL_PERCENT, "sample_s": SAMPLE,
        "profile": os.environ.get("PROFILE_ENV", ""), "rss_growth": RSS_GROWTH, "warmup": WARMUP,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": args.commit, "host": platform.node(), "cpus": os.cpu_count(),
        "wrk": stats, "size0": size0, "samples": samples, "rotations": rotations,
        "backups": backups, "clock_steps": clock_steps, "stream": stream,
        "receiver": receiver_stats, "final": final, "missed_samples": missed,
    }
    run_data["checks"] = checks(run_data)
    with open(args.out, "w") as f:
        json.dump(run_data, f, indent=1)
    for name, ok, detail in run_data["checks"]:
        log(f"{args.backend}: {'ok  ' if ok else 'FAIL'} {name}: {detail}")


# ------------------------------------------------------------ checks

def window(samples, lo, hi):
    return [s for s in samples if lo <= s["t"] < hi]


def peak(rows, key):
    values = [r[key] for r in rows if r[key] is not None]
    return max(values) if values else 0


def checks(r):
    """[(name, passed, detail)] of one run."""
    s, f, w = r["samples"], r["final"], r["wrk"]
    duration, warmup, width = r["duration"], r["warmup"], r["duration"] / 6
    first = window(s, warmup, warmup + width)
    last = window(s, duration - width, duration + 1)
    out = []
    missed = r.get("missed_samples", [])
    out.append(("the server answered every sample", not missed,
                f"{len(missed)} of {len(s) + len(missed)} samples without /metrics"
                f"{', first at t=' + str(missed[0]['t']) + ' s: ' + missed[0]['error'] if missed else ''}"))
    posts, changes = int(w.get("posts_ok", 0)), int(w.get("puts_and_deletes_ok", 0))
    non2xx, socket_errors = int(w.get("non2xx", -1)), int(w.get("socket_errors", -1))
    out.append(("every call answered 2xx", non2xx == 0 and socket_errors == 0,
                f"{non2xx} non-2xx answers {f['refused'] or ''}, {socket_errors} socket errors; "
                f"{f['log_warnings']['count']} warnings in the server's log "
                f"{f['log_warnings']['first'][:2] or ''}"
                f"{'; PostgreSQL: ' + str(f['postgres_errors']) if f.get('postgres_errors') else ''}"))
    # wrk stops with one request in flight per connection: its write may be committed without
    # its 202 being read, so up to CONNECTIONS records, events and deliveries more.
    slack = r["connections"]
    expected = posts - f["deletes"] - f["purged"]
    out.append(("every 202 stored (creates - deletes - purged)",
                expected <= f["stored"] <= expected + slack,
                f"{f['stored']} stored, {posts} creates - {f['deletes']} deletes - "
                f"{f['purged']} purged = {expected}"))
    out.append(("retention purged during the run", f["purges"] >= 2 and f["purged"] > 0,
                f"{f['purged']} records in {f['purges']} purges"))
    writes = posts + changes
    delivered = r["receiver"]["count"]
    out.append(("every delivery made",
                writes <= delivered <= writes + slack and f["given_up"] == 0
                and f["intake_webhook_pending_deliveries"] == 0,
                f"{delivered} delivered for {writes} writes acknowledged, {f['given_up']} given up, "
                f"{f['intake_webhook_pending_deliveries']} pending; the receiver failed "
                f"{r['receiver']['failed']} attempts"))
    st = r["stream"]
    out.append(("every write's event on every stream",
                st["missing"] == 0 and st["extra"] <= slack * st["readers"]
                and st["fingerprints_agree"] and st["disconnects"] == 0,
                f"{st['readers']} readers, {st['per_reader_min']}-{st['per_reader_max']} events "
                f"each for {st['expected']} writes, {st['missing']} missing, {st['disconnects']} "
                f"streams ended ({st['errors']}), {st['moves']} moves to a new key"))
    moved = [x["readers_moved_s"] for x in r["rotations"]]
    out.append(("key rotations: readers moved", bool(moved) and None not in moved,
                f"{len(moved)} rotations, every reader on the new key within "
                f"{max((m for m in moved if m is not None), default=0):.2f} s"))
    ok_backups = [b for b in r["backups"] if b["ok"]]
    out.append(("backups taken", bool(r["backups"]) and len(ok_backups) == len(r["backups"]),
                f"{len(ok_backups)} of {len(r['backups'])}"))
    rss_first, rss_last = peak(first, "rss_mb"), peak(last, "rss_mb")
    growth_allowed = r["rss_growth"]
    out.append(("RSS flat", bool(first) and rss_last <= rss_first * (1 + growth_allowed),
                f"peak {rss_first:.0f} MB from {warmup:.0f} s for {width:.0f} s, {rss_last:.0f} MB "
                f"in the last {width:.0f} s (at most +{growth_allowed:.0%})"))
    # A purge puts its deletes in the search index's queue at once: the index lag may reach the
    # largest purge's size whenever a sample falls just after one.
    floor = {"intake_search_index_lag": QUEUE_FLOOR + f["largest_purge"]}
    grown = [f"{g} {peak(first, g)} -> {peak(last, g)}" for g in GAUGES
             if peak(last, g) > QUEUE_FACTOR * peak(first, g) + floor.get(g, QUEUE_FLOOR)]
    drained = f["intake_ingest_queue_depth"] == 0 and f["intake_webhook_pending_deliveries"] == 0
    out.append(("queues bounded", not grown and drained,
                "; ".join(grown) or f"last window's peaks within {QUEUE_FACTOR:g}x the first's "
                f"+ {QUEUE_FLOOR}, drained at the end"))
    grew, explained = growth(r)
    out.append(("data growth explained by the data", grew <= explained,
                f"grew {grew / 2**20:.0f} MiB, explained {explained / 2**20:.0f} MiB"))
    return out


def growth(r):
    """(bytes the data dir or database grew by, bytes the data explains: PAYLOAD_FACTOR x the
    payload of the most records held at once, PER_WRITE per acknowledged write, PER_REQUEST per
    data call, FIXED)."""
    f = r["final"]
    per_record = f["payload_bytes"] / f["stored"] if f["stored"] else 0
    held_peak = max([s["held"] for s in r["samples"]] + [f["stored"]])
    writes = max([s["writes"] for s in r["samples"]] + [0])
    explained = (PAYLOAD_FACTOR * held_peak * per_record + PER_WRITE * writes
                 + PER_REQUEST * f["calls"] + FIXED)
    return f["size"] - r["size0"], int(explained)


# ------------------------------------------------------------ report and plots

def svg_chart(title, unit, t_max, lines, marks=(), height=170):
    """One chart as SVG elements: LINES is [(label, colour, [(t, value)])], drawn against time
    (s) from 0 to T_MAX, with a dashed vertical line at each time in MARKS; returns (elements,
    height)."""
    left, width, top, plot_h = 60, 620, 28, height - 58
    values = [v for _, _, pts in lines for _, v in pts if v is not None]
    top_value = max(values) * 1.1 if values and max(values) > 0 else 1
    x = lambda t: left + width * t / t_max
    y = lambda v: top + plot_h - plot_h * min(v, top_value) / top_value
    els = [f'<text x="{left}" y="16" font-size="13" font-weight="bold">{title}</text>',
           f'<rect x="{left}" y="{top}" width="{width}" height="{plot_h}" fill="none" '
           f'stroke="#999"/>']
    for i in range(5):
        v = top_value * i / 4
        els.append(f'<text x="{left - 4}" y="{y(v) + 4:.1f}" font-size="10" text-anchor="end">'
                   f'{v:.0f}</text>')
        els.append(f'<line x1="{left}" x2="{left + width}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                   f'stroke="#eee"/>')
    for i in range(7):
        t = t_max * i / 6
        label = f"{t / 60:.0f} min" if t_max >= 600 else f"{t:.0f} s"
        els.append(f'<text x="{x(t):.1f}" y="{top + plot_h + 14}" font-size="10" '
                   f'text-anchor="middle">{label}</text>')
    for t in marks:
        els.append(f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{top}" y2="{top + plot_h}" '
                   f'stroke="#bbb" stroke-dasharray="3,3"/>')
    els.append(f'<text x="14" y="{top + plot_h / 2}" font-size="10" transform="rotate(-90 14 '
               f'{top + plot_h / 2})" text-anchor="middle">{unit}</text>')
    for n, (label, colour, pts) in enumerate(lines):
        path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in pts if v is not None)
        els.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.3" points="{path}"/>')
        els.append(f'<text x="{left + 10 + 150 * n}" y="{top + plot_h + 30}" font-size="11" '
                   f'fill="{colour}">— {label}</text>')
    return els, height


def svg(r):
    """RSS, p99 of the data calls and the queue depths of one run over time, as one SVG."""
    s, t_max = r["samples"], r["duration"]
    pts = lambda key: [(x["t"], x[key]) for x in s]
    backups = [b["t"] for b in r["backups"]]
    charts = [
        svg_chart("intake memory (dashed: backups)", "MB", t_max,
                  [("RSS", "#1f77b4", pts("rss_mb")), ("anonymous", "#aec7e8", pts("anon_mb"))],
                  backups),
        svg_chart(f"p99 of the data calls per {r['sample_s']:g} s (bucket bound)", "ms", t_max,
                  [("p99", "#d62728", pts("p99_ms"))]),
        svg_chart("queue depths", "entries", t_max,
                  [("ingest queue", "#2ca02c", pts("intake_ingest_queue_depth")),
                   ("pending deliveries", "#ff7f0e", pts("intake_webhook_pending_deliveries")),
                   ("retry backlog", "#9467bd", pts("intake_webhook_retry_backlog")),
                   ("search index lag", "#8c564b", pts("intake_search_index_lag"))]),
        svg_chart("records held and size", "MiB / 1000 records", t_max,
                  [("data size (MiB)", "#17becf", [(x["t"], x["size"] / 2**20) for x in s]),
                   ("records held (thousands)", "#7f7f7f", [(x["t"], x["held"] / 1000) for x in s])]),
    ]
    body, y0 = [], 30
    for els, h in charts:
        body.append(f'<g transform="translate(0,{y0})">{"".join(els)}</g>')
        y0 += h
    title = (f"intake soak on {r['backend']}: {r['duration'] / 60:g} min, {r['date']}, "
             f"commit {r['commit']}")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="700" height="{y0}" '
            f'font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>'
            f'<text x="10" y="18" font-size="14">{title}</text>{"".join(body)}</svg>\n')


def markdown(runs, svg_names):
    parts = ["# Soak benchmark\n"]
    for r, name in zip(runs, svg_names):
        w, f, st = r["wrk"], r["final"], r["stream"]
        rss = [x["rss_mb"] for x in r["samples"]]
        p99 = [x["p99_ms"] for x in r["samples"] if x["p99_ms"] is not None]
        backups = [b for b in r["backups"] if b["ok"]]
        grew, explained = growth(r)
        writes = int(w['posts_ok']) + int(w['puts_and_deletes_ok'])
        parts.append(f"""## {r['backend']}

{r['date']}, {r['host']}, {r['cpus']} CPUs, commit {r['commit']}; intake, wrk, the readers,
the receiver{' and PostgreSQL' if r['backend'] == 'postgres' else ''} on the same machine.
`{f"PROFILE_ENV={r['profile']} " if r['profile'] else ""}WARMUP={r['warmup']:g} BACKEND={r['backend']} \
DURATION={r['duration']} CONNECTIONS={r['connections']} DELAY_MS={r['delay_ms']} bash benches/soak.sh`

| measure | value |
| --- | ---: |
| requests (70 % POST, 20 % list/search/poll, 10 % PUT/DELETE) | {int(w['requests']):,} ({float(w['rps']):,.0f} /s) |
| p50 / p99 over the run (wrk) | {w['p50_ms']} / {w['p99_ms']} ms |
| p99 per {r['sample_s']:g} s (data calls, bucket bound): median / largest | {sorted(p99)[len(p99) // 2] if p99 else '-'} / {max(p99) if p99 else '-'} ms |
| non-2xx answers / socket errors | {w['non2xx']} / {w['socket_errors']} |
| creates / replaces + deletes acknowledged | {int(w['posts_ok']):,} / {int(w['puts_and_deletes_ok']):,} |
| records purged by retention (purges) | {f['purged']:,} ({f['purges']}) |
| records stored at the end / creates - deletes - purged | {f['stored']:,} / {int(w['posts_ok']) - f['deletes'] - f['purged']:,} |
| deliveries received / writes acknowledged / attempts failed by the receiver / given up | {r['receiver']['count']:,} / {int(w['posts_ok']) + int(w['puts_and_deletes_ok']):,} / {r['receiver']['failed']:,} / {f['given_up']} |
| stream readers: events each (min-max) / expected / ended / moves to a new key | {st['per_reader_min']:,}-{st['per_reader_max']:,} / {st['expected']:,} / {st['disconnects']} / {st['moves']} |
| key rotations / backups (largest, longest) | {len(r['rotations'])} / {len(backups)} ({max((b['bytes'] for b in backups), default=0) / 2**20:.0f} MiB, {max((b['seconds'] for b in backups), default=0):.1f} s) |
| RSS: min / max / at the end | {min(rss, default=0):.0f} / {max(rss, default=0):.0f} / {f['rss_mb']:.0f} MB |
| {'data dir' if r['backend'] == 'redb' else 'database'}: at the start / at the end | {r['size0'] / 2**20:.0f} / {f['size'] / 2**20:.0f} MiB |
| its growth / what the data explains / growth per acknowledged write | {grew / 2**20:.0f} / {explained / 2**20:.0f} MiB / {grew / max(1, writes):,.0f} B |

| check | result | detail |
| --- | --- | --- |
""")
        parts.append("".join(f"| {n} | {'pass' if ok else '**FAIL**'} | {d} |\n"
                             for n, ok, d in r["checks"]))
        parts.append(f"\n![soak on {r['backend']}]({name})\n\n")
    return "".join(parts)


def report(args):
    runs = []
    for path in args.runs:
        with open(path) as f:
            runs.append(json.load(f))
    if args.recheck:
        # Checks again with this run's WARMUP, RSS_GROWTH... (the run's samples are all kept).
        for r in runs:
            r["warmup"] = float(os.environ.get("WARMUP", r["duration"] / 6))
            r["rss_growth"] = RSS_GROWTH
            r["checks"] = checks(r)
    names = []
    os.makedirs(args.svg_dir, exist_ok=True)
    for r in runs:
        name = f"soak-{r['backend']}-{r['duration'] / 60:g}min.svg"
        with open(os.path.join(args.svg_dir, name), "w") as f:
            f.write(svg(r))
        # The samples, to draw or check again: `soak.py report` takes these files.
        with open(os.path.join(args.svg_dir, name.replace(".svg", ".json")), "w") as f:
            json.dump(r, f, indent=1)
        if args.docs_img:
            os.makedirs(args.docs_img, exist_ok=True)
            shutil.copy(os.path.join(args.svg_dir, name), args.docs_img)
        names.append(name)
    text = markdown(runs, names)
    with open(args.results, "w") as f:
        f.write(text)
    print(text)
    failed = [f"{r['backend']}: {n}" for r in runs for n, ok, _ in r["checks"] if not ok]
    if failed:
        sys.exit("soak: checks failed: " + "; ".join(failed))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--backend", choices=("redb", "postgres"), required=True)
    r.add_argument("--intake", required=True)
    r.add_argument("--receiver", required=True)
    r.add_argument("--readers", required=True)
    r.add_argument("--work", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--commit", default="unknown")
    r.add_argument("--pg-bin")
    r.add_argument("--pg-port", type=int)
    r.add_argument("--pg-log", help="the cluster's server log, whose errors the report names")
    p = sub.add_parser("report")
    p.add_argument("--results", required=True)
    p.add_argument("--svg-dir", required=True)
    p.add_argument("--docs-img")
    p.add_argument("--recheck", action="store_true",
                   help="check the runs again (WARMUP, RSS_GROWTH... from the environment)")
    p.add_argument("runs", nargs="+")
    args = ap.parse_args()
    if args.command == "run":
        run(args)
    else:
        report(args)


if __name__ == "__main__":
    main()
