#!/usr/bin/env python3
"""Helpers of benches/search.sh (the search benchmark): one sub-command per step.

  load-intake  POST every line of records.jsonl to intake over many keep-alive
               connections (asyncio, optional HTTP/1.1 pipelining); JSON summary
  time-intake  warm-up + timed runs of the query set against intake's search API
  classes      p50 and p99 by class of a time-intake file, as key-value lines (scale.sh)
  pg-setup     create the table, COPY the records, build the indexes (timed), VACUUM
               ANALYZE, sizes, and the hit count of every query
  time-pg      warm-up + timed runs of the query set against PostgreSQL
  time-native  the same queries through C clients: wrk (benches/search_wrk.lua) against
               intake, pgbench against PostgreSQL; every request's latency
  report       the Markdown report from the JSON files of the steps above (with --json,
               also p50 and p99 over all queries per side and client, as JSON)

Every step writes one JSON file (--out) that `report` reads. Traffic goes to the
host given (127.0.0.1 from search.sh) only.
"""

import argparse
import asyncio
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import search_queries  # noqa: E402

START = "2000-01-01"   # intake's search window start: before any record
LIMIT = 10


def log(msg):
    print(f"search_bench.py: {msg}", file=sys.stderr, flush=True)


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def percentile(values, p):
    """Nearest-rank percentile (p in 0..100) of a non-empty list."""
    s = sorted(values)
    k = max(1, math.ceil(p / 100.0 * len(s)))
    return s[k - 1]


def find_seq(obj):
    """The generator's "seq" of a record as returned (payload object or jsonb value)."""
    if isinstance(obj, str):
        try:
            obj = json.loads(obj)
        except ValueError:
            return None
    if isinstance(obj, dict):
        if "seq" in obj and isinstance(obj["seq"], int):
            return obj["seq"]
        for key in ("payload", "data", "record"):
            if key in obj:
                s = find_seq(obj[key])
                if s is not None:
                    return s
    return None


# ------------------------------------------------------------------ load-intake

def parse_head(head):
    """(status, content length, chunked?, connection close?) of an HTTP/1.1 response head."""
    status = int(head[9:12])
    length, chunked, close = 0, False, False
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        k, v = k.strip().lower(), v.strip().lower()
        if k == b"content-length":
            length = int(v)
        elif k == b"transfer-encoding" and b"chunked" in v:
            chunked = True
        elif k == b"connection" and v == b"close":
            close = True
    return status, length, chunked, close


async def _read_response(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    status, length, chunked, close = parse_head(head)
    if chunked:
        body = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            body += await reader.readexactly(size + 2)
            if size == 0:
                break
    elif length:
        body = await reader.readexactly(length)
    else:
        body = b""
    return status, close, body


async def _load(host, port, path, key, bodies, connections, depth):
    n = len(bodies)
    state = {"next": 0, "accepted": 0, "failed": 0, "retried": 0, "conn_errors": 0,
             "reconnects": 0}
    statuses = {}
    retry = []            # record indexes to send again
    attempts = {}         # record index -> failed attempts so far
    examples = []         # first few non-202 answers
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
            f"Content-Length: ").encode()

    def give_back(i, why):
        attempts[i] = attempts.get(i, 0) + 1
        if attempts[i] > 5:
            state["failed"] += 1
            log(f"record {i} failed 6 times (last: {why}); giving up on it")
        else:
            state["retried"] += 1
            retry.append(i)

    async def worker():
        reader = writer = None
        while True:
            batch = []
            while len(batch) < depth:
                if retry:
                    batch.append(retry.pop())
                elif state["next"] < n:
                    batch.append(state["next"])
                    state["next"] += 1
                else:
                    break
            if not batch:
                break
            if writer is None:
                try:
                    reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
                except OSError as e:
                    state["conn_errors"] += 1
                    for i in batch:
                        give_back(i, f"connect: {e}")
                    await asyncio.sleep(0.1)
                    continue
            done = 0
            try:
                writer.write(b"".join(head + str(len(bodies[i])).encode() + b"\r\n\r\n" + bodies[i]
                                      for i in batch))
                for i in batch:
                    status, close, body = await _read_response(reader)
                    done += 1
                    statuses[status] = statuses.get(status, 0) + 1
                    if status == 202:
                        state["accepted"] += 1
                    else:
                        if len(examples) < 5:
                            examples.append(f"{status} {body[:200]!r}")
                        give_back(i, f"HTTP {status}")
                        if status in (429, 503):
                            await asyncio.sleep(0.05)
                    if close:
                        break
                for i in batch[done:]:
                    retry.append(i)   # never answered: the server closed first; not a failure
                if done < len(batch) or close:
                    writer.close()
                    writer = None
                    state["reconnects"] += 1
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                    ValueError) as e:
                # The unanswered requests are sent again; one of them may have been
                # stored before the connection broke (a duplicate): the record count
                # check of search.sh catches that.
                state["conn_errors"] += 1
                for i in batch[done:]:
                    give_back(i, f"connection: {e!r}")
                if writer is not None:
                    writer.close()
                writer = None
        if writer is not None:
            writer.close()

    t0 = time.perf_counter()
    last = [t0, 0]

    async def progress():
        while True:
            await asyncio.sleep(10)
            now = time.perf_counter()
            rate = (state["accepted"] - last[1]) / (now - last[0])
            last[0], last[1] = now, state["accepted"]
            log(f"loaded {state['accepted']}/{n} ({rate:.0f}/s)")

    prog = asyncio.ensure_future(progress())
    await asyncio.gather(*(worker() for _ in range(connections)))
    prog.cancel()
    secs = time.perf_counter() - t0
    return {
        "records": n, "accepted": state["accepted"], "failed": state["failed"],
        "retried": state["retried"], "connection_errors": state["conn_errors"],
        "reconnects": state["reconnects"],
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "examples": examples, "seconds": round(secs, 2),
        "records_per_s": round(state["accepted"] / secs, 1) if secs > 0 else None,
        "connections": connections, "pipeline": depth,
    }


def cmd_load_intake(a):
    with open(a.file, "rb") as f:
        bodies = [line for line in f.read().split(b"\n") if line]
    u = urllib.parse.urlsplit(a.url)
    log(f"POSTing {len(bodies)} records to {a.url} over {a.connections} connections "
        f"(pipeline depth {a.pipeline})")
    try:
        import uvloop  # optional: faster event loop
        runner = uvloop.run
        loop_name = "uvloop"
    except ImportError:
        runner = asyncio.run
        loop_name = "asyncio"
    res = runner(_load(u.hostname, u.port, u.path, a.key, bodies, a.connections, a.pipeline))
    res["event_loop"] = loop_name
    write_json(a.out, res)
    log(f"accepted {res['accepted']} of {res['records']} in {res['seconds']} s "
        f"({res['records_per_s']}/s); failed {res['failed']}, retried {res['retried']}, "
        f"statuses {res['statuses']}")
    if res["examples"]:
        log(f"non-202 answers, first ones: {res['examples']}")
    if res["accepted"] != res["records"]:
        sys.exit(1)


# ------------------------------------------------------------------ time-intake

class IntakeClient:
    """One keep-alive HTTP/1.1 connection to intake's search API.

    A minimal client on a plain socket: the request head is built once and the answer read
    by Content-Length (or chunks), because http.client's header parsing (email.parser) costs
    more per request than libpq does for PostgreSQL, and the benchmark compares the servers.
    The body is still decoded with json.loads, as psycopg decodes the jsonb rows."""

    def __init__(self, base, key):
        u = urllib.parse.urlsplit(base)
        self.host, self.port, self.path = u.hostname, u.port, u.path.rstrip("/") + "/search"
        self.head_rest = (f" HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                          f"Authorization: Bearer {key}\r\nAccept: application/json\r\n\r\n"
                          ).encode()
        self.sock = None
        self.buf = b""

    def _connect(self):
        self.sock = socket.create_connection((self.host, self.port), timeout=120)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def _fill(self):
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("intake closed the connection")
        self.buf += chunk

    def _take(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _take_line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 2:]
                return line
            self._fill()

    def _exchange(self, request):
        if self.sock is None:
            self._connect()
        self.sock.sendall(request)
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end >= 0:
                break
            self._fill()
        head, self.buf = self.buf[:end], self.buf[end + 4:]
        status, length, chunked, close = parse_head(head)
        if chunked:
            parts = []
            while True:
                size = int(self._take_line().split(b";")[0], 16)
                parts.append(self._take(size + 2)[:size])
                if size == 0:
                    break
            body = b"".join(parts)
        else:
            body = self._take(length)
        if close:
            self.sock.close()
            self.sock = None
        return status, body

    def get(self, params):
        url = self.path + "?" + urllib.parse.urlencode(params, quote_via=urllib.parse.quote)
        request = b"GET " + url.encode() + self.head_rest
        try:
            status, body = self._exchange(request)
        except (OSError, ValueError):
            if self.sock is not None:
                self.sock.close()
            self.sock = None        # a dropped keep-alive connection: one new try
            status, body = self._exchange(request)
        if status != 200:
            raise RuntimeError(f"GET {url} answered {status}: {body[:300]!r}")
        return body

    def search(self, q):
        """First LIMIT matches, newest first: follows next_cursor while a page is short.

        Returns (records, pages)."""
        records = []
        pages = 0
        cursor = None
        while True:
            params = {"q": q, "limit": str(LIMIT), "start": START}
            if cursor:
                params["cursor"] = cursor
            doc = json.loads(self.get(params))
            pages += 1
            records.extend(doc.get("data", []))
            cursor = (doc.get("pagination") or {}).get("next_cursor")
            if len(records) >= LIMIT or not cursor:
                return records[:LIMIT], pages


def timed_runs(run_one, reps, label):
    """Warm-up (each query once), then `reps` rounds over the set; per-query results."""
    qs = search_queries.all_queries()
    out = {}
    for cls, q in qs:
        res = run_one(q)
        out[q] = {"class": cls, "first": res, "ms": []}
    log(f"{label}: warm-up done; {reps} rounds of {len(qs)} queries")
    for rep in range(reps):
        for cls, q in qs:
            t0 = time.perf_counter()
            run_one(q)
            out[q]["ms"].append((time.perf_counter() - t0) * 1000.0)
    return out


def cmd_time_intake(a):
    client = IntakeClient(a.url, a.key)
    maxpages = {}

    def run_one(q):
        recs, pages = client.search(q)
        maxpages[q] = max(maxpages.get(q, 0), pages)
        return recs

    raw = timed_runs(run_one, a.reps, "intake")
    res = {}
    for q, r in raw.items():
        recs = r["first"]
        bad = []
        for rec in recs:
            text = json.dumps(rec.get("payload"), ensure_ascii=False, separators=(",", ":"))
            if q.lower() not in text.lower():
                bad.append(rec.get("id"))
        created = [rec.get("created_at") for rec in recs]
        res[q] = {
            "class": r["class"], "ms": r["ms"], "results": len(recs),
            "seqs": [find_seq(rec) for rec in recs], "max_pages": maxpages[q],
            "not_containing_q": bad,
            "newest_first": all(created[i] >= created[i + 1] for i in range(len(created) - 1)),
        }
    write_json(a.out, {"reps": a.reps, "queries": res})


# ------------------------------------------------------------------ PostgreSQL

SEARCH_SQL = ("SELECT id, payload, created_at FROM records "
              "WHERE lower(payload::text) LIKE '%%' || lower(%s) || '%%' "
              "ORDER BY created_at DESC LIMIT 10")


COUNT_SQL = ("SELECT count(*) FROM records "
             "WHERE lower(payload::text) LIKE '%%' || lower(%s) || '%%'")


def like_escape(q):
    return q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def pg_connect(dsn):
    try:
        import psycopg
    except ImportError:
        sys.exit("search_bench.py: psycopg is missing (pip install 'psycopg[binary]')")
    return psycopg.connect(dsn, autocommit=True)


def cmd_pg_setup(a):
    conn = pg_connect(a.dsn)
    res = {"server_version": conn.execute("SHOW server_version").fetchone()[0]}
    settings = {}
    for name in ("shared_buffers", "maintenance_work_mem", "work_mem", "jit",
                 "max_parallel_workers_per_gather", "effective_cache_size"):
        settings[name] = conn.execute(f"SHOW {name}").fetchone()[0]
    res["settings"] = settings

    def timed(sql):
        t0 = time.perf_counter()
        conn.execute(sql)
        return round(time.perf_counter() - t0, 2)

    conn.execute("DROP TABLE IF EXISTS records")
    conn.execute("CREATE TABLE records (id bigserial PRIMARY KEY, "
                 "created_at timestamptz NOT NULL, payload jsonb NOT NULL)")
    log("COPY records from " + a.copy)
    t0 = time.perf_counter()
    with conn.cursor() as cur:
        with cur.copy("COPY records (created_at, payload) FROM STDIN") as cp:
            with open(a.copy, "rb") as f:
                while True:
                    block = f.read(1 << 20)
                    if not block:
                        break
                    cp.write(block)
    res["copy_s"] = round(time.perf_counter() - t0, 2)
    res["rows"] = conn.execute("SELECT count(*) FROM records").fetchone()[0]
    log(f"COPY: {res['rows']} rows in {res['copy_s']} s")

    res["btree_build_s"] = timed("CREATE INDEX records_created_at ON records (created_at)")
    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    log("building the GIN trigram index")
    res["gin_build_s"] = timed("CREATE INDEX records_payload_trgm ON records "
                               "USING gin (lower(payload::text) gin_trgm_ops)")
    log(f"GIN index built in {res['gin_build_s']} s")
    res["vacuum_analyze_s"] = timed("VACUUM ANALYZE records")
    for key, rel in (("gin_bytes", "records_payload_trgm"), ("btree_bytes", "records_created_at"),
                     ("pkey_bytes", "records_pkey")):
        res[key] = conn.execute("SELECT pg_relation_size(%s::regclass)", (rel,)).fetchone()[0]
    res["table_bytes"] = conn.execute("SELECT pg_table_size('records')").fetchone()[0]
    res["payload_text_bytes"] = conn.execute(
        "SELECT sum(octet_length(payload::text)) FROM records").fetchone()[0]

    # One count(*) per query (the planner uses the GIN index for the rare ones); at 1M
    # this is faster than a single scan with 50 count(*) FILTER (…) columns.
    log("hit counts: count(*) per query, outside any timing")
    t0 = time.perf_counter()
    counts = {}
    for cls, q in search_queries.all_queries():
        counts[q] = conn.execute(COUNT_SQL, (like_escape(q),)).fetchone()[0]
        log(f"  {cls:9} {q!r:22} {counts[q]}")
    res["count_scan_s"] = round(time.perf_counter() - t0, 2)
    res["counts"] = counts
    write_json(a.out, res)


def plan_summary(node):
    """A short name for a plan: its scan nodes, outermost first."""
    names = []

    def walk(n):
        t = n.get("Node Type", "")
        if "Scan" in t:
            idx = n.get("Index Name")
            names.append(f"{t} ({idx})" if idx else t)
        for c in n.get("Plans", []):
            walk(c)
    walk(node)
    return " + ".join(names)


def cmd_time_pg(a):
    conn = pg_connect(a.dsn)
    conn.execute(f"SET plan_cache_mode = {a.plan_cache_mode}")
    cur = conn.cursor()

    def run_one(q):
        cur.execute(SEARCH_SQL, (like_escape(q),), prepare=True)
        return cur.fetchall()

    raw = timed_runs(run_one, a.reps, "postgresql")
    res = {}
    for q, r in raw.items():
        rows = r["first"]
        plan = conn.execute("EXPLAIN (FORMAT JSON) " + SEARCH_SQL.replace("%s", "%s"),
                            (like_escape(q),)).fetchone()[0]
        if isinstance(plan, str):
            plan = json.loads(plan)
        res[q] = {"class": r["class"], "ms": r["ms"], "results": len(rows),
                  "seqs": [find_seq(row[1]) for row in rows],
                  "plan": plan_summary(plan[0]["Plan"])}
    write_json(a.out, {"reps": a.reps, "plan_cache_mode": a.plan_cache_mode, "queries": res})


# ------------------------------------------------------------------ time-native

WRK_LUA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "search_wrk.lua")


def search_path(base_path, q):
    params = {"q": q, "limit": str(LIMIT), "start": START}
    return base_path.rstrip("/") + "/search?" + urllib.parse.urlencode(
        params, quote_via=urllib.parse.quote)


def wrk_latencies(base_url, path, key, requests, seconds):
    """`requests` answers to one GET on one connection, one at a time; latencies in ms."""
    env = dict(os.environ, SEARCH_REQUESTS=str(requests))
    # wrk's own timeout (2 s by default) would drop a slower answer within the run.
    out = subprocess.run(["wrk", "-t1", "-c1", f"-d{seconds}s", f"--timeout={seconds + 5}s",
                          "-s", WRK_LUA, base_url, "--", path, key], env=env,
                         capture_output=True, text=True, check=True).stdout
    fields = {}
    for line in out.splitlines():
        name, _, rest = line.partition(" ")
        if name in ("latencies_us", "answers", "non_2xx"):
            fields[name] = rest.split()
    if "latencies_us" not in fields:
        raise RuntimeError(f"wrk printed no latencies: {out[-500:]!r}")
    if int(fields["non_2xx"][0]) != 0:
        raise RuntimeError(f"wrk: {fields['non_2xx'][0]} answers to {path} were not 2xx")
    return [int(v) / 1000.0 for v in fields["latencies_us"]]


def pgbench_latencies(pgbench, host, port, sql, requests, seconds, workdir):
    """One prepared statement run on one connection for `seconds` (as wrk's -d); the first
    `requests` latencies in ms. A query slower than `seconds` / `requests` gives fewer, so
    that one bad plan cannot hold the run up for `requests` times its duration."""
    script = os.path.join(workdir, "query.sql")
    with open(script, "w") as f:
        f.write(sql + ";\n")
    prefix = os.path.join(workdir, "pgbench_log")
    subprocess.run([pgbench, "-n", "-h", host, "-p", str(port), "-U", "postgres", "-c", "1",
                    "-j", "1", "-T", str(seconds), "-M", "prepared", "-f", script, "-l",
                    "--log-prefix", prefix, "postgres"],
                   capture_output=True, text=True, check=True)
    runs = []
    for name in os.listdir(workdir):
        if name.startswith("pgbench_log."):
            path = os.path.join(workdir, name)
            with open(path) as f:
                # client_id transaction_no latency_us script_no epoch_s epoch_us
                runs += [(int(line.split()[1]), int(line.split()[2]) / 1000.0)
                         for line in f if line.strip()]
            os.remove(path)
    if not runs:
        raise RuntimeError("pgbench logged no transaction")
    return [ms for _, ms in sorted(runs)[:requests]]


def pg_literal(q):
    """The query's SQL string literal for LIKE (standard_conforming_strings is on)."""
    return "'" + like_escape(q).replace("'", "''") + "'"


def cmd_time_native(a):
    res = {"requests": a.requests, "seconds": a.seconds}
    queries = search_queries.all_queries()
    if a.url:
        u = urllib.parse.urlsplit(a.url)
        base = f"{u.scheme}://{u.hostname}:{u.port}"
        res["intake_client"] = subprocess.run(["wrk", "-v"], capture_output=True,
                                              text=True).stdout.split(" [")[0].strip()
        res["intake"] = {}
        for cls, q in queries:
            res["intake"][q] = {"class": cls, "ms": wrk_latencies(
                base, search_path(u.path, q), a.key, a.requests, a.seconds)}
        log(f"wrk: {len(queries)} queries × {a.requests} requests against intake")
    if a.pgbench:
        res["pg_client"] = subprocess.run([a.pgbench, "--version"], capture_output=True,
                                          text=True).stdout.strip()
        res["pg"] = {}
        with tempfile.TemporaryDirectory() as workdir:
            for cls, q in queries:
                sql = (SEARCH_SQL.replace("%%", "%").replace("%s", pg_literal(q)))
                res["pg"][q] = {"class": cls, "ms": pgbench_latencies(
                    a.pgbench, a.pg_host, a.pg_port, sql, a.requests, a.seconds, workdir)}
        log(f"pgbench: {len(queries)} queries × {a.requests} transactions against PostgreSQL")
    write_json(a.out, res)


# ------------------------------------------------------------------ report

def fmt_ms(v):
    if v is None:
        return "–"
    return f"{v:.2f}" if v < 100 else f"{v:.0f}"


def fmt_bytes(n):
    if n is None:
        return "–"
    return f"{n / 1e6:.1f} MB"


def ratio(i, p):
    if i is None or p is None or p == 0:
        return "–"
    return f"{i / p:.2f}×"


def ms_by_query(native, side):
    """{query: [ms, ...]} of one side of a time-native result (empty when absent)."""
    return {q: r["ms"] for q, r in ((native or {}).get(side) or {}).items()}


def class_table(iq, pq, counts):
    """The per-class latency table (Markdown lines) of two {query: [ms]} dicts."""
    qs = search_queries.all_queries()
    L = ["| class | PG hits per query (min–max) | intake p50 | PG p50 | p50 ratio | "
         "intake p99 | PG p99 | p99 ratio |",
         "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    all_i, all_p = [], []
    for cls in search_queries.CLASSES:
        cq = [q for c, q in qs if c == cls]
        iv = [v for q in cq for v in iq.get(q, [])]
        pv = [v for q in cq for v in pq.get(q, [])]
        all_i += iv
        all_p += pv
        hc = [counts[q] for q in cq if q in counts]
        hits = f"{min(hc):,}–{max(hc):,}" if hc else "–"
        L.append(row(cls, hits, iv, pv))
    L.append(row("**all**", "", all_i, all_p))
    return L


def p50_p99(values):
    """(p50, p99) of VALUES, nearest rank; (None, None) when there are none."""
    return (percentile(values, 50), percentile(values, 99)) if values else (None, None)


def overall(by_query):
    """p50 and p99 (ms) over every request of every query of a {query: [ms]} dict: the
    class table's **all** row, for RESULTS_JSON."""
    figures = p50_p99([v for ms in by_query.values() for v in ms])
    return {k: None if v is None else round(v, 3) for k, v in zip(("p50_ms", "p99_ms"), figures)}


def row(label, hits, iv, pv):
    (i50, i99), (p50, p99) = p50_p99(iv), p50_p99(pv)
    return (f"| {label} | {hits} | {fmt_ms(i50)} | {fmt_ms(p50)} | {ratio(i50, p50)} | "
            f"{fmt_ms(i99)} | {fmt_ms(p99)} | {ratio(i99, p99)} |")


def cmd_classes(a):
    """Key-value lines of a time-intake FILE: p50 and p99 (ms) over every request of all the
    queries and of each class, the slowest query by p99, and whether every result held its
    query and came newest first (benches/scale.sh prints them at each checkpoint)."""
    res = json.load(open(a.file))["queries"]
    by_class = {}
    for r in res.values():
        by_class.setdefault(r["class"], []).extend(r["ms"])
    lines = [("all", [v for r in res.values() for v in r["ms"]])]
    lines += [(cls, by_class[cls]) for cls in search_queries.CLASSES if cls in by_class]
    for label, values in lines:
        p50, p99 = p50_p99(values)
        print(f"{label}_p50_ms {p50:.3f}\n{label}_p99_ms {p99:.3f}")
    worst = max(res, key=lambda q: percentile(res[q]["ms"], 99))
    print(f"worst_query {worst}\nworst_p99_ms {percentile(res[worst]['ms'], 99):.3f}")
    exact = all(not r["not_containing_q"] and r["newest_first"] for r in res.values())
    print(f"exact {int(exact)}")


def cmd_report(a):
    meta = json.load(open(a.meta))
    ld = json.load(open(a.load)) if a.load and os.path.exists(a.load) else None
    it = json.load(open(a.intake)) if a.intake and os.path.exists(a.intake) else None
    ps = json.load(open(a.pg_setup)) if a.pg_setup and os.path.exists(a.pg_setup) else None
    pt = json.load(open(a.pg_times)) if a.pg_times and os.path.exists(a.pg_times) else None
    ib = json.load(open(a.intake_build)) if a.intake_build and os.path.exists(a.intake_build) else None
    inn = json.load(open(a.intake_native)) if a.intake_native and os.path.exists(a.intake_native) else None
    pgn = json.load(open(a.pg_native)) if a.pg_native and os.path.exists(a.pg_native) else None
    qs = search_queries.all_queries()
    counts = (ps or {}).get("counts", {})
    intake_c, pg_c = ms_by_query(inn, "intake"), ms_by_query(pgn, "pg")
    intake_py = {q: r["ms"] for q, r in (it or {}).get("queries", {}).items()}
    pg_py = {q: r["ms"] for q, r in (pt or {}).get("queries", {}).items()}

    L = []
    L.append("## Search benchmark: intake vs PostgreSQL 15 + pg_trgm")
    L.append("")
    L.append(f"- date: {a.date}, commit: {a.commit}")
    L.append(f"- machine: {a.machine}")
    if a.elapsed:
        L.append(f"- whole run (generation, loads, index builds, timing): {a.elapsed} s; "
                 f"load average at its start: {a.loadavg}")
    L.append(f"- data: {meta['records']:,} records from `benches/search_gen.py` (seed "
             f"{meta['seed']}), payload text {fmt_bytes(meta['payload_bytes'])} "
             f"(compact JSON, avg {meta['avg_payload_bytes']} bytes/record)")
    reps = (it or pt or {}).get("reps")
    L.append(f"- queries: 50 in 5 classes of 10 (`benches/search_queries.py`); after one "
             f"warm-up pass, {reps} rounds over the set from one client on one keep-alive "
             f"connection, one query at a time; client and servers share the machine")
    L.append("- intake: `GET /api/v1/data/{slug}/search?q=…&limit=10&start=2000-01-01`, timed "
             "to the first 10 matches (following `next_cursor` while a page is short) or the "
             "end; PostgreSQL: `… WHERE lower(payload::text) LIKE '%'||lower($1)||'%' ORDER "
             f"BY created_at DESC LIMIT 10`, prepared, plan_cache_mode="
             f"{(pt or {}).get('plan_cache_mode', '–')}")
    L.append("- timed twice: through C clients (wrk against intake, pgbench against "
             "PostgreSQL; the answer read, not decoded), then through Python clients (intake "
             "over a minimal HTTP/1.1 client on a socket, PostgreSQL over psycopg; the answer "
             "decoded into Python objects on both sides)")
    L.append("")
    if inn or pgn:
        L.append(f"### Latency per query class (ms), C clients: {(inn or {}).get('intake_client', '–')} "
                 f"for intake, {(pgn or {}).get('pg_client', '–')} for PostgreSQL")
        L.append("")
        L += class_table(intake_c, pg_c, counts)
        L.append("")
        native = inn or pgn
        L.append(f"Each query: its first {native['requests']} requests within "
                 f"{native.get('seconds', 1)} s, fewer when it is slower than that allows "
                 "(`wrk -t1 -c1 -d` with `benches/search_wrk.lua`; `pgbench -c 1 -M prepared "
                 "-T -l` with the query as a literal), one at a time on one connection, after "
                 "the Python pass below warmed both servers. These measure the servers: each "
                 "client is a few microseconds of C per request.")
        multi = [q for q, r in (it or {}).get("queries", {}).items() if r["max_pages"] > 1]
        if inn and multi:
            L.append("")
            L.append("wrk times the first page only; these queries needed more than one page "
                     "in the Python pass, so their intake figure above is low: "
                     + ", ".join(f"`{q}`" for q in multi))
        L.append("")
    L.append(f"### Latency per query class (ms), Python clients: {reps} rounds, answers decoded")
    L.append("")
    L += class_table(intake_py, pg_py, counts)
    L.append("")
    L.append("Ratio = intake / PostgreSQL (below 1 means intake is faster). p50 and p99 are "
             "nearest-rank percentiles over all of the class's requests.")
    L.append("")
    L.append("### Index build and size")
    L.append("")
    L.append("| | intake (tantivy, `<data_dir>/search`) | PostgreSQL (GIN gin_trgm_ops) |")
    L.append("| --- | ---: | ---: |")
    ib = ib or {}
    ps_ = ps or {}
    i_build = f"{ib['logged_s']} s" if ib.get("logged_s") is not None else "–"
    if ib.get("wall_s") is not None:
        i_build += f" (start to log line: {ib['wall_s']} s)"
    g_build = f"{ps_['gin_build_s']} s" if ps_.get("gin_build_s") is not None else "–"
    L.append(f"| index build time | {i_build} | {g_build} |")
    L.append(f"| index size | {fmt_bytes(ib.get('index_bytes'))} | "
             f"{fmt_bytes(ps_.get('gin_bytes'))} |")
    pb = meta["payload_bytes"]
    isz = ib.get("index_bytes")
    gsz = ps_.get("gin_bytes")
    L.append(f"| index size / payload text | {isz / pb:.2f}× | " if isz else "| index size / payload text | – | ")
    L[-1] += f"{gsz / pb:.2f}× |" if gsz else "– |"
    L.append(f"| records indexed | {ib.get('records', '–')} | {ps_.get('rows', '–')} |")
    L.append("")
    L.append(f"- payload text (sum of compact JSON bytes, from the generator): "
             f"{fmt_bytes(pb)}; PostgreSQL's jsonb text form of the same records: "
             f"{fmt_bytes(ps_.get('payload_text_bytes'))}")
    if ib:
        L.append(f"- intake data directory after the rebuild: {fmt_bytes(ib.get('data_dir_bytes'))} "
                 f"(store, change log and index)")
    if ps:
        L.append(f"- PostgreSQL: COPY {ps['copy_s']} s, btree on created_at {ps['btree_build_s']} s "
                 f"({fmt_bytes(ps['btree_bytes'])}), VACUUM ANALYZE {ps['vacuum_analyze_s']} s, "
                 f"hit counts {ps.get('count_scan_s', '–')} s (50 × count(*)), "
                 f"table {fmt_bytes(ps['table_bytes'])}; PostgreSQL {ps['server_version']}, "
                 + ", ".join(f"{k}={v}" for k, v in ps["settings"].items()))
    if ld:
        L.append(f"- intake load: {ld['accepted']:,} of {ld['records']:,} records accepted "
                 f"(202) in {ld['seconds']} s ({ld['records_per_s']:,.0f}/s, "
                 f"{ld['connections']} connections, pipeline depth {ld['pipeline']}, "
                 f"{ld['event_loop']}); failed {ld['failed']}, retried {ld['retried']}, "
                 f"connection errors {ld['connection_errors']}")

    # Agreement between the two systems.
    if it and pt:
        agree_n = 0
        agree_set = 0
        small = 0
        notes = []
        for cls, q in qs:
            ir, pr = it["queries"][q], pt["queries"][q]
            if ir["results"] == pr["results"]:
                agree_n += 1
            else:
                notes.append(f"`{q}`: intake {ir['results']} results, PostgreSQL {pr['results']}")
            if pr["results"] < LIMIT:
                small += 1
                if sorted(ir["seqs"]) == sorted(pr["seqs"]):
                    agree_set += 1
                else:
                    notes.append(f"`{q}`: different records (intake seq {sorted(ir['seqs'])}, "
                                 f"PostgreSQL {sorted(pr['seqs'])})")
            if ir["not_containing_q"]:
                notes.append(f"`{q}`: intake returned records not containing it: "
                             f"{ir['not_containing_q']}")
            if not ir["newest_first"]:
                notes.append(f"`{q}`: intake's page is not newest first")
        L.append(f"- agreement: the number of results (≤ 10) is the same for {agree_n} of "
                 f"{len(qs)} queries; for the {small} queries with fewer than 10 matches the "
                 f"same records for {agree_set}; every intake result contains its query: "
                 f"{'yes' if not any(it['queries'][q]['not_containing_q'] for _, q in qs) else 'NO'}")
        for n in notes[:20]:
            L.append(f"  - {n}")
    L.append("")
    L.append("### Per query")
    L.append("")
    L.append("| class | q | PG hits | intake p50 (C) | PG p50 (C) | intake p50 | PG p50 | "
             "intake p99 | PG p99 | intake pages | PG plan |")
    L.append("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for cls, q in qs:
        ir = it["queries"][q] if it else None
        pr = pt["queries"][q] if pt else None
        L.append(f"| {cls} | `{q}` | {counts.get(q, '–') if q not in counts else f'{counts[q]:,}'} | "
                 f"{fmt_ms(percentile(intake_c[q], 50) if q in intake_c else None)} | "
                 f"{fmt_ms(percentile(pg_c[q], 50) if q in pg_c else None)} | "
                 f"{fmt_ms(percentile(ir['ms'], 50) if ir else None)} | "
                 f"{fmt_ms(percentile(pr['ms'], 50) if pr else None)} | "
                 f"{fmt_ms(percentile(ir['ms'], 99) if ir else None)} | "
                 f"{fmt_ms(percentile(pr['ms'], 99) if pr else None)} | "
                 f"{ir['max_pages'] if ir else '–'} | {pr['plan'] if pr else '–'} |")
    L.append("")
    L.append("(C): through wrk and pgbench; the other columns through the Python clients. "
             "intake pages: the most requests one timed search needed (more than 1 when a "
             "page came back short with a `next_cursor`). PG plan: the scans of "
             "`EXPLAIN` for that query's parameter.")
    text = "\n".join(L) + "\n"
    with open(a.out, "w") as f:
        f.write(text)
    sys.stdout.write(text)
    if a.json:
        write_json(a.json, {
            "records": meta["records"],
            "c_clients": {"intake": overall(intake_c), "pg": overall(pg_c)},
            "python_clients": {"intake": overall(intake_py), "pg": overall(pg_py)},
        })


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("load-intake")
    p.add_argument("--url", required=True, help="http://127.0.0.1:PORT/api/v1/data/SLUG")
    p.add_argument("--key", required=True)
    p.add_argument("--file", required=True)
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--pipeline", type=int, default=1)
    p.add_argument("--out", required=True)
    p.set_defaults(fn=cmd_load_intake)

    p = sub.add_parser("time-intake")
    p.add_argument("--url", required=True, help="http://127.0.0.1:PORT/api/v1/data/SLUG")
    p.add_argument("--key", required=True)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--out", required=True)
    p.set_defaults(fn=cmd_time_intake)

    p = sub.add_parser("classes")
    p.add_argument("file", help="a time-intake --out file")
    p.set_defaults(fn=cmd_classes)

    p = sub.add_parser("pg-setup")
    p.add_argument("--dsn", required=True)
    p.add_argument("--copy", required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(fn=cmd_pg_setup)

    p = sub.add_parser("time-pg")
    p.add_argument("--dsn", required=True)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--plan-cache-mode", default="force_custom_plan",
                   choices=("auto", "force_custom_plan", "force_generic_plan"))
    p.add_argument("--out", required=True)
    p.set_defaults(fn=cmd_time_pg)

    p = sub.add_parser("time-native")
    p.add_argument("--url", help="intake: http://127.0.0.1:PORT/api/v1/data/SLUG")
    p.add_argument("--key")
    p.add_argument("--pgbench", help="PostgreSQL: the pgbench program")
    p.add_argument("--pg-host", default="127.0.0.1")
    p.add_argument("--pg-port", type=int)
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--seconds", type=int, default=1,
                   help="wrk's -d and pgbench's -T: this long per query (both wait it out)")
    p.add_argument("--out", required=True)
    p.set_defaults(fn=cmd_time_native)

    p = sub.add_parser("report")
    p.add_argument("--meta", required=True)
    p.add_argument("--load")
    p.add_argument("--intake")
    p.add_argument("--intake-build")
    p.add_argument("--pg-setup")
    p.add_argument("--pg-times")
    p.add_argument("--intake-native")
    p.add_argument("--pg-native")
    p.add_argument("--date", default="")
    p.add_argument("--commit", default="")
    p.add_argument("--machine", default="")
    p.add_argument("--elapsed", default="")
    p.add_argument("--loadavg", default="")
    p.add_argument("--out", required=True)
    p.add_argument("--json", help="also write p50 and p99 over all queries here, per side "
                   "and client")
    p.set_defaults(fn=cmd_report)

    a = ap.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
