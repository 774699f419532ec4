#!/usr/bin/env python3
"""API conformance run: schemathesis against the served OpenAPI document and the real server.

Starts the built binary (`target/debug/intake`, or $INTAKE_BIN) on a loopback port with a
fresh data dir (tests/support/intake_server.py), creates an endpoint through the
management API for its sandbox key (and another for the management calls), and runs `schemathesis run` with every check against
`/api/v1/openapi.json`: data operations authenticate with the sandbox key, management ones
with the owner token (`schemathesis.toml`). Exits with schemathesis's status; the server's
log is printed when it fails. Extra arguments go to `schemathesis run`.
"""

import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "support"))
from intake_server import running_intake  # noqa: E402

METRICS_TOKEN = "conformance-metrics-token"


def main():
    config = f'[operations]\nmetrics_token = "{METRICS_TOKEN}"\n'
    with running_intake(config=config, prefix="intake-conformance-") as intake:
        data = intake.create_endpoint("Conformance data")
        manage = intake.create_endpoint("Conformance management")
        env = dict(
            os.environ,
            INTAKE_SANDBOX_KEY=data["sandbox_key"],
            INTAKE_OWNER_TOKEN=intake.token,
            INTAKE_METRICS_TOKEN=METRICS_TOKEN,
            INTAKE_DATA_SLUG=data["slug"],
            INTAKE_MANAGE_SLUG=manage["slug"],
            SCHEMATHESIS_HOOKS=os.path.join(HERE, "hooks.py"),
        )
        started = time.time()
        run = subprocess.run(
            [
                # The interpreter running this script, which has schemathesis installed
                # (.ci/run: `python3 -m pip install`), whatever is on PATH.
                sys.executable,
                "-m",
                "schemathesis.cli",
                "--config-file",
                os.path.join(HERE, "schemathesis.toml"),
                "run",
                f"{intake.base}/api/v1/openapi.json",
                "--no-color",
                *sys.argv[1:],
            ],
            env=env,
        )
        print(f"conformance run: {time.time() - started:.0f} s")
        if run.returncode != 0:
            # Raised inside the server's block, so its warnings and errors are printed.
            sys.exit(run.returncode)


if __name__ == "__main__":
    main()
