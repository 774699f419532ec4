#!/usr/bin/env python3
"""API conformance run: schemathesis against the served OpenAPI document and the real server.

Starts the built binary (`target/debug/intake`, or $INTAKE_BIN) on a loopback port with a
fresh data dir (`intake init --json` gives the owner token), creates an endpoint through the
management API for its sandbox key (and another for the management calls), and runs `schemathesis run` with every check against
`/api/v1/openapi.json`: data operations authenticate with the sandbox key, management ones
with the owner token (`schemathesis.toml`). Exits with schemathesis's status; the server's
log is printed when it fails. Extra arguments go to `schemathesis run`.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = os.environ.get("INTAKE_BIN", os.path.join(ROOT, "target", "debug", "intake"))
METRICS_TOKEN = "conformance-metrics-token"


def start_server(data_dir, log):
    """`intake serve` on an ephemeral loopback port; returns (process, base URL)."""
    config = os.path.join(data_dir, "intake.toml")
    with open(config, "w") as f:
        f.write(f'[operations]\nmetrics_token = "{METRICS_TOKEN}"\n')
    env = dict(os.environ, RUST_LOG="info")
    proc = subprocess.Popen(
        [BIN, "serve", "--data-dir", data_dir, "--listen", "127.0.0.1:0", "--config", config],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    deadline = time.time() + 30
    while time.time() < deadline:
        with open(log.name) as f:
            found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", f.read())
        if found:
            return proc, found.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    sys.exit("intake serve did not start:\n" + open(log.name).read())


def create_endpoint(base, token, name):
    body = json.dumps({"name": name}).encode()
    req = urllib.request.Request(
        f"{base}/api/v1/manage/endpoints",
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.load(resp)


def main():
    with tempfile.TemporaryDirectory(prefix="intake-conformance-") as tmp:
        data_dir = os.path.join(tmp, "data")
        init = subprocess.run(
            [BIN, "init", "--data-dir", data_dir, "--owner-email", "owner@example.com", "--json"],
            check=True,
            capture_output=True,
            text=True,
        )
        token = json.loads(init.stdout)["token"]
        with open(os.path.join(tmp, "serve.log"), "w+") as log:
            proc, base = start_server(data_dir, log)
            try:
                data = create_endpoint(base, token, "Conformance data")
                manage = create_endpoint(base, token, "Conformance management")
                env = dict(
                    os.environ,
                    INTAKE_SANDBOX_KEY=data["sandbox_key"],
                    INTAKE_OWNER_TOKEN=token,
                    INTAKE_METRICS_TOKEN=METRICS_TOKEN,
                    INTAKE_DATA_SLUG=data["slug"],
                    INTAKE_MANAGE_SLUG=manage["slug"],
                )
                started = time.time()
                run = subprocess.run(
                    [
                        # The interpreter running this script, which has schemathesis
                        # installed (.ci/run: `python3 -m pip install`), whatever is on PATH.
                        sys.executable,
                        "-m",
                        "schemathesis.cli",
                        "--config-file",
                        os.path.join(HERE, "schemathesis.toml"),
                        "run",
                        f"{base}/api/v1/openapi.json",
                        "--no-color",
                        *sys.argv[1:],
                    ],
                    env=env,
                )
                print(f"conformance run: {time.time() - started:.0f} s")
                if proc.poll() is not None:
                    print(f"intake serve exited during the run ({proc.returncode})")
                    run.returncode = run.returncode or 1
            finally:
                proc.terminate()
                proc.wait(timeout=30)
            if run.returncode != 0:
                log.seek(0)
                print("--- server log (errors and warnings) ---")
                for line in log:
                    if " ERROR " in line or " WARN " in line:
                        print(line, end="")
            sys.exit(run.returncode)


if __name__ == "__main__":
    main()
