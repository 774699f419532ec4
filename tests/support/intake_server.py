"""A real intake server for the Python-driven checks under tests/ (the conformance run, the
generated clients' walks, the receiver snippets).

`running_intake()` runs `intake init` in a fresh data dir (its `--json` output gives the owner
token), starts `intake serve` on an ephemeral loopback port and yields an `Intake` with the base
URL, the owner token and `call`/`create_endpoint`. On exit the server is stopped; when the body
raised or the server died, the server's warnings and errors are printed.

The binary is `target/debug/intake`, or $INTAKE_BIN.
"""

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("INTAKE_BIN", os.path.join(ROOT, "target", "debug", "intake"))
# The server reads every INTAKE_* variable as configuration and refuses one that names no key,
# so the helper's own variable is not passed on.
SERVER_ENV = {name: value for name, value in os.environ.items() if name != "INTAKE_BIN"}


class Intake:
    """A started server: `base` (http://127.0.0.1:PORT), `token` (the owner's), `process`."""

    def __init__(self, base, token, process):
        self.base = base
        self.token = token
        self.process = process

    def call(self, method, path, token=None, body=None):
        """One JSON call; returns (status, parsed body or None). Never raises on 4xx/5xx."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        return status, (json.loads(raw) if raw else None)

    def create_endpoint(self, name, required_fields=()):
        """Creates an endpoint as the owner; returns its JSON (slug, sandbox_key, ...)."""
        request = {"name": name, "required_fields": list(required_fields)}
        status, body = self.call("POST", "/api/v1/manage/endpoints", self.token, request)
        if status != 201:
            raise RuntimeError(f"creating endpoint {name!r}: {status} {body}")
        return body


def _wait_listening(proc, log_path):
    deadline = time.time() + 30
    while time.time() < deadline:
        with open(log_path) as f:
            found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", f.read())
        if found:
            return found.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    sys.exit("intake serve did not start:\n" + open(log_path).read())


@contextlib.contextmanager
def running_intake(config="", env=None, prefix="intake-check-"):
    """Yields a started `Intake`. CONFIG is extra TOML for its config file; ENV extra variables
    for the server process."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        data_dir = os.path.join(tmp, "data")
        init = subprocess.run(
            [BIN, "init", "--data-dir", data_dir, "--owner-email", "owner@example.com", "--json"],
            check=True,
            capture_output=True,
            text=True,
            env=SERVER_ENV,
        )
        token = json.loads(init.stdout)["token"]
        config_path = os.path.join(tmp, "intake.toml")
        with open(config_path, "w") as f:
            f.write(config)
        log_path = os.path.join(tmp, "serve.log")
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [BIN, "serve", "--data-dir", data_dir, "--listen", "127.0.0.1:0",
                 "--config", config_path],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(SERVER_ENV, RUST_LOG="info", **(env or {})),
            )
        ok = False
        try:
            intake = Intake(_wait_listening(proc, log_path), token, proc)
            yield intake
            if proc.poll() is not None:
                raise RuntimeError(f"intake serve exited during the run ({proc.returncode})")
            ok = True
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            if not ok:
                print("--- server log (errors and warnings) ---")
                with open(log_path) as f:
                    for line in f:
                        if " ERROR " in line or " WARN " in line:
                            print(line, end="")
