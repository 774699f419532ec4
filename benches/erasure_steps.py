"""The steps of an erasure as the server logged them, each with the server's own p99 time for
the POSTs of the ingest load while it ran (from the request log; whole seconds), as a Markdown
table; then the same second by second, with the steps under way in each. Used by
benches/erasure.sh.

Usage: erasure_steps.py SERVER_LOG ERASURE_ID BASELINE_FROM BASELINE_TO (Unix seconds)
"""

import datetime
import re
import sys

STAMP = re.compile(r"^\[(\S+)Z ")
POST = re.compile(r" POST /api/v1/data/\S+ 202 ([0-9.]+)ms$")


def main():
    log, erasure, base_from, base_to = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    step = re.compile(rf"erasure {re.escape(erasure)}: (.*?)(?: in |, )([0-9.]+) s$")
    posts, steps = [], []
    with open(log, errors="replace") as lines:
        for line in lines:
            line = line.rstrip()
            found = STAMP.match(line)
            if not found:
                continue
            at = (
                datetime.datetime.fromisoformat(found.group(1))
                .replace(tzinfo=datetime.timezone.utc)
                .timestamp()
            )
            if m := POST.search(line):
                posts.append((at, float(m.group(1))))
            elif m := step.search(line):
                steps.append((m.group(1), at - float(m.group(2)), at))

    def p99(lo, hi):
        ms = sorted(ms for at, ms in posts if lo <= at <= hi)
        if not ms:
            return 0, "no POST"
        return len(ms), f"{ms[min(len(ms) - 1, int(len(ms) * 0.99))]:.1f} ms"

    print("| step | took | POSTs | server p99 |")
    print("| --- | ---: | ---: | ---: |")
    count, took = p99(base_from, base_to)
    print(f"| (the load alone) | {base_to - base_from} s | {count} | {took} |")
    for what, lo, hi in steps:
        count, took = p99(lo - 1, hi)
        print(f"| {what} | {hi - lo:.1f} s | {count} | {took} |")
    if not steps:
        return

    print()
    print("Second by second from the erasure's first step:")
    print()
    print("| second | POSTs | server p99 | steps under way |")
    print("| ---: | ---: | ---: | --- |")
    first = int(min(lo for _, lo, _ in steps))
    last = int(max(hi for _, _, hi in steps))
    for second in range(first, last + 1):
        count, took = p99(second, second + 0.999999)
        under_way = ", ".join(
            short(what) for what, lo, hi in steps if lo < second + 1 and hi >= second
        )
        print(f"| {second - first} | {count} | {took} | {under_way} |")


def short(step):
    """A step's name in a word."""
    for words, name in [
        ("counted", "count"),
        ("erased", "erase"),
        ("dictionar", "dictionary"),
        ("leaves", "leaves"),
        ("search index", "merge"),
        ("free pages", "scrub"),
    ]:
        if words in step:
            return name
    return step.split()[0]


if __name__ == "__main__":
    main()
