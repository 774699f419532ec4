#!/usr/bin/env python3
"""Read latencies at the data size a scale run has reached (benches/scale.sh): the first list
page, 200 pages deep by cursor, a GET of one record by id, the first poll page from the
beginning and from 6,000 records back, each on one keep-alive connection. Prints key-value
lines: NAME_p50_ms and NAME_p99_ms for list_first, list_deep, get, poll_start and poll_back.

usage: scale_reads.py URL KEY    (URL: http://127.0.0.1:PORT/api/v1/data/SLUG)
"""
import http.client
import json
import random
import sys
import time
import urllib.parse

import search_bench


def main():
    url, key = sys.argv[1], sys.argv[2]
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    headers = {"Authorization": f"Bearer {key}"}

    def get(path):
        started = time.perf_counter()
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        body = response.read()
        elapsed = (time.perf_counter() - started) * 1000
        if response.status != 200:
            raise SystemExit(f"GET {path} answered {response.status}: {body[:200]!r}")
        return elapsed, json.loads(body)

    base = parts.path
    figures = {"list_first": [get(f"{base}?limit=30")[0] for _ in range(200)]}
    deep, cursor, ids = [], None, []
    for _ in range(200):
        path = f"{base}?limit=30" + (f"&cursor={urllib.parse.quote(cursor)}" if cursor else "")
        elapsed, page = get(path)
        deep.append(elapsed)
        ids += [record["id"] for record in page["data"]]
        cursor = (page.get("pagination") or {}).get("next_cursor")
        if not cursor:
            break
    figures["list_deep"] = deep
    rng = random.Random(1)
    figures["get"] = [get(f"{base}/{rng.choice(ids)}")[0] for _ in range(300)]
    figures["poll_start"] = [get(f"{base}/poll?since=2000-01-01&limit=100")[0] for _ in range(50)]
    # The created_at of the oldest record the deep pages reached (6,000 back at most).
    since = urllib.parse.quote(get(f"{base}/{ids[-1]}")[1]["created_at"])
    figures["poll_back"] = [get(f"{base}/poll?since={since}&limit=100")[0] for _ in range(50)]
    for name, values in figures.items():
        p50, p99 = search_bench.p50_p99(values)
        print(f"{name}_p50_ms {p50:.3f}\n{name}_p99_ms {p99:.3f}")


if __name__ == "__main__":
    main()
