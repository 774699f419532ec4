#!/usr/bin/env python3
"""Runs the receivers of the receiver guide (docs/src/receivers/) against real deliveries.

One intake (tests/support/intake_server.py; `[webhooks] allowed_cidrs` lets loopback
through) and, for each receiver named, an endpoint whose sandbox owner webhook is that receiver,
started as the guide says (PORT, INTAKE_WEBHOOK_SECRET: the endpoint's sandbox secret from the
management API) on a free loopback port. Then:

- intake sends a test event, and the data API creates, replaces and deletes a record; the
  secret is reissued, then one more record created and one more test event sent: they carry
  the new secret's signature and the previous one's, and the receiver holds the previous one;
- the receiver must log each of those events once (one JSON line with `type` and `id`), and
  intake's delivery log must show each record delivery delivered at its first attempt with 204;
- requests sent straight to the receiver must get 400: a changed body, a wrong secret, a
  stale timestamp, malformed or missing signature headers, a signed body that is not JSON.
  A correctly signed request sent after them is the next line the receiver logs, so none of
  them was taken.

Usage: python3 tests/receivers/run.py [RECEIVER...]   (default: python node)

- python: the `standardwebhooks` package installed for this interpreter;
- node: `npm install --prefix target/receivers-node standardwebhooks@1.1.1`;
- go: receiver.go built as the guide says, at target/receivers-go/receiver (or $RECEIVER_GO_BIN);
- ruby: `gem install standardwebhooks webrick`.

Ends with 'N passed, N failed' (one per receiver); exits 1 when one failed.
"""

import http.client
import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone

from standardwebhooks.webhooks import Webhook

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "support"))
from intake_server import running_intake  # noqa: E402

SNIPPETS = os.path.join(ROOT, "docs", "src", "receivers")
# (command, extra environment) per receiver, run from the repository's root.
RECEIVERS = {
    "python": ([sys.executable, os.path.join(SNIPPETS, "receiver.py")], {}),
    "node": (
        ["node", os.path.join(SNIPPETS, "receiver.js")],
        # require() looks beside the file first, then here: the file stays as the guide shows it.
        {"NODE_PATH": os.path.join(ROOT, "target", "receivers-node", "node_modules")},
    ),
    "go": (
        [
            os.environ.get(
                "RECEIVER_GO_BIN", os.path.join(ROOT, "target", "receivers-go", "receiver")
            )
        ],
        {},
    ),
    "ruby": (["ruby", os.path.join(SNIPPETS, "receiver.rb")], {}),
}
# Deliveries leave right after the commit; this only bounds a failing run.
DEADLINE = 15


class Failed(Exception):
    pass


def expect(condition, message):
    if not condition:
        raise Failed(message)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Receiver:
    """A receiver snippet running as a subprocess: `url`, `next_events(n)`, `post(...)`."""

    def __init__(self, name, secret):
        argv, extra_env = RECEIVERS[name]
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/intake"
        env = dict(os.environ, PORT=str(self.port), INTAKE_WEBHOOK_SECRET=secret, **extra_env)
        self.proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.lines = queue.Queue()
        self.stderr = []
        self.pumps = [
            threading.Thread(
                target=self._pump, args=(self.proc.stdout, self.lines.put), daemon=True
            ),
            threading.Thread(
                target=self._pump, args=(self.proc.stderr, self.stderr.append), daemon=True
            ),
        ]
        for pump in self.pumps:
            pump.start()
        try:
            self._wait_listening()
        except Failed as err:
            self.stop()
            raise Failed(f"{err}; its stderr:\n{''.join(self.stderr)}") from None

    @staticmethod
    def _pump(stream, sink):
        for line in stream:
            sink(line)

    def _wait_listening(self):
        deadline = time.time() + 30
        while time.time() < deadline:
            expect(self.proc.poll() is None, f"exited at start ({self.proc.returncode})")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise Failed("not listening after 30 s")

    def next_events(self, count):
        """The next COUNT lines of its stdout, parsed; fails past the deadline."""
        deadline = time.time() + DEADLINE
        events = []
        while len(events) < count:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.time()))
            except queue.Empty:
                raise Failed(
                    f"logged {len(events)} of {count} events within {DEADLINE} s: {events}"
                ) from None
            try:
                events.append(json.loads(line))
            except ValueError:
                raise Failed(f"logged a line that is not one JSON event: {line!r}") from None
        return events

    def post(self, body, headers):
        """POSTs straight to the receiver; returns the status, or why there was none."""
        req = urllib.request.Request(self.url, data=body, method="POST", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status
        except urllib.error.HTTPError as err:
            return err.code
        except (OSError, http.client.HTTPException) as err:
            return f"no answer ({err!r})"  # e.g. the handler raised and the connection closed

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for pump in self.pumps:
            pump.join(timeout=5)


def ok(intake, method, path, body=None, token=None, status=(200,)):
    """One call that must answer one of STATUS (as the owner unless TOKEN); returns its body."""
    code, answer = intake.call(method, path, token or intake.token, body)
    expect(code in status, f"{method} {path}: {code} {answer}")
    return answer


def deliveries_settled(intake, slug, count):
    """The sandbox delivery log once COUNT deliveries are there and none is pending."""
    deadline = time.time() + DEADLINE
    while True:
        found = ok(
            intake, "GET", f"/api/v1/manage/endpoints/{slug}/deliveries?environment=sandbox"
        )["data"]
        if len(found) == count and all(d["state"] != "pending" for d in found):
            return found
        expect(time.time() < deadline, f"deliveries not settled within {DEADLINE} s: {found}")
        time.sleep(0.1)


def signed(secret, body, msg_id="rec_forged", at=None):
    """Standard Webhooks headers for BODY (bytes) under SECRET, made with the Python library."""
    at = at or datetime.now(timezone.utc)
    return {
        "Content-Type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, at, body.decode()),
    }


def forgeries(secret):
    """(what, body, headers) of requests a verifying receiver must refuse with 400."""
    body = json.dumps({"type": "record.created", "data": {"id": "rec_forged"}}).encode()
    good = signed(secret, body)
    other_secret = "whsec_" + "A" * 43 + "="
    not_json = b"not json"
    return [
        ("changed body", body.replace(b"forged", b"f0rged"), good),
        ("wrong secret", body, signed(other_secret, body)),
        (
            "stale timestamp",
            body,
            signed(secret, body, at=datetime.now(timezone.utc) - timedelta(minutes=10)),
        ),
        ("signature not base64", body, {**good, "webhook-signature": "v1,not base64!"}),
        ("signature entry without a comma", body, {**good, "webhook-signature": "v1"}),
        ("no signature headers", body, {"Content-Type": "application/json"}),
        ("signed body that is not JSON", not_json, signed(secret, not_json)),
    ]


def check(intake, name):
    """Drives one receiver; returns a one-line summary or raises Failed."""
    endpoint = intake.create_endpoint(f"Receiver {name}")
    slug, key = endpoint["slug"], endpoint["sandbox_key"]
    manage = f"/api/v1/manage/endpoints/{slug}"
    secret = ok(intake, "GET", f"{manage}/webhook-secrets/sandbox")["secret"]
    receiver = Receiver(name, secret)
    try:
        sub = ok(
            intake, "PUT", f"{manage}/webhooks/sandbox", {"url": receiver.url}, status=(200, 201)
        )
        test_path = f"{manage}/webhooks/sandbox/subscriptions/{sub['id']}/test"
        test = ok(intake, "POST", test_path)
        expect(test["delivered"] and test["status"] == 204, f"test event: {test}")

        data = f"/api/v1/data/{slug}"
        record = ok(intake, "POST", data, {"n": 1}, key, (202,))["id"]
        # Not ASCII, stored and sent unescaped: the libraries must sign the bytes, not a text.
        ok(intake, "PUT", f"{data}/{record}", {"n": 2, "name": "Zoë ✓ 😀"}, key, (202,))
        ok(intake, "DELETE", f"{data}/{record}", None, key, (202,))
        ok(intake, "POST", f"{manage}/webhook-secrets/sandbox/reissue")
        after_reissue = ok(intake, "POST", data, {"n": 3}, key, (202,))["id"]
        test_after = ok(intake, "POST", test_path)
        expect(test_after["delivered"], f"test event after the reissue: {test_after}")

        wanted = [
            ("webhook.test", test["webhook_id"]),
            ("record.created", record),
            ("record.replaced", record),
            ("record.deleted", record),
            ("record.created", after_reissue),
            ("webhook.test", test_after["webhook_id"]),
        ]
        # Deliveries run in parallel: their order of arrival is not the writes' order.
        got = sorted((e["type"], e["id"]) for e in receiver.next_events(len(wanted)))
        expect(got == sorted(wanted), f"logged {got}, expected {sorted(wanted)}")

        # Test events are logged too, marked as tests (docs/src/webhooks.md).
        log = deliveries_settled(intake, slug, len(wanted))
        tests_logged = sorted(d["record_id"] for d in log if d["test"])
        expect(
            tests_logged == sorted([test["webhook_id"], test_after["webhook_id"]]),
            f"the test events logged: {tests_logged}",
        )
        for d in log:
            attempts = ok(intake, "GET", f"{manage}/deliveries/{d['id']}")["attempt_log"]
            expect(
                d["state"] == "delivered" and d["attempts"] == 1 and attempts[-1]["status"] == 204,
                f"delivery {d['id']} of {d['record_id']}: {d['state']}, {attempts}",
            )

        forged = forgeries(secret)
        for what, body, headers in forged:
            status = receiver.post(body, headers)
            expect(status == 400, f"{what}: answered {status}, not 400")
        control = json.dumps({"type": "record.created", "data": {"id": "rec_control"}}).encode()
        status = receiver.post(control, signed(secret, control, "rec_control"))
        expect(status == 204, f"a correctly signed request: answered {status}")
        after = receiver.next_events(1)
        expect(
            after == [{"type": "record.created", "id": "rec_control"}],
            f"logged {after} before the correctly signed request: it took a refused one",
        )
        return (
            f"{len(wanted)} events verified and logged (two after a secret reissue), "
            f"{len(log)} deliveries delivered at the first attempt, "
            f"{len(forged)} forged requests refused with 400"
        )
    except Failed:
        receiver.stop()  # first, so that its stderr is read to the end
        print(f"--- {name} receiver's stderr ---\n" + "".join(receiver.stderr), end="")
        raise
    finally:
        receiver.stop()


def main(names):
    unknown = [n for n in names if n not in RECEIVERS]
    if unknown:
        sys.exit(f"unknown receivers {unknown}; known: {', '.join(RECEIVERS)}")
    started = time.time()
    failed = 0
    with running_intake(
        config='[webhooks]\nallowed_cidrs = ["127.0.0.0/8"]\n', prefix="intake-receivers-"
    ) as intake:
        for name in names:
            try:
                print(f"{name}: {check(intake, name)}", flush=True)
            except Failed as err:
                failed += 1
                print(f"{name}: FAILED: {err}", flush=True)
        print(f"receivers run: {time.time() - started:.1f} s")
        print(f"{len(names) - failed} passed, {failed} failed", flush=True)
        if failed:
            # Raised inside the server's block, so its warnings and errors are printed.
            sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:] or ["python", "node"])
