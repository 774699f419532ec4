"""Checks webhooks captured by tests/webhooks.rs with the public `standardwebhooks` package.

Usage: python3 verify_webhooks.py CASES.json

CASES.json is a list of {"secret", "headers", "body", "check"}. `check` is:
- "verify": Webhook(secret).verify(body, headers) must accept it (signature and timestamp);
- "signed": one `webhook-signature` entry must be the package's signature under `secret`
  (the timestamp is not compared with the current time: for a server on a manual clock);
- "not_signed": no entry may be.
Exits 1 and names every failing case.
"""

import json
import sys
from datetime import datetime, timezone

from standardwebhooks.webhooks import Webhook


def check(case):
    hook = Webhook(case["secret"])
    headers, body = case["headers"], case["body"]
    if case["check"] == "verify":
        hook.verify(body, headers)
        return None
    at = datetime.fromtimestamp(int(headers["webhook-timestamp"]), tz=timezone.utc)
    expected = hook.sign(headers["webhook-id"], at, body)
    present = expected in headers["webhook-signature"].split(" ")
    if present != (case["check"] == "signed"):
        return f"expected {case['check']}, signature entries {headers['webhook-signature']!r}"
    return None


def main(path):
    with open(path, encoding="utf-8") as f:
        cases = json.load(f)
    failures = []
    for i, case in enumerate(cases):
        try:
            problem = check(case)
        except Exception as e:  # the package raises WebhookVerificationError and others
            problem = repr(e)
        if problem:
            failures.append(f"case {i} ({case['check']}): {problem}")
    for failure in failures:
        print(failure)
    print(f"{len(cases) - len(failures)} of {len(cases)} webhooks check out")
    return 1 if failures or not cases else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
