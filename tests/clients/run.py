#!/usr/bin/env python3
"""Generated clients: a Python and a TypeScript client generated from a real server's OpenAPI
document, each walking the data API against that server (docs/src/clients.md).

Starts the built binary (`target/debug/intake`, or $INTAKE_BIN; tests/support/intake_server.py)
without a poll hold-back, creates an endpoint with a required field, and fetches
`/api/v1/openapi.json` and the endpoint's own document. From each it generates a Python client
(openapi-python-client) and a TypeScript client (@hey-api/openapi-ts with its fetch client);
a generator printing a warning fails the run, as it means a part of the API it could not
type (one warning excepted: openapi-python-client cannot type the batch operation's NDJSON
body, and generates it with its JSON array body alone). Then it type-checks the walks (mypy --strict for `walk.py`, tsc --strict for
`walk.ts`) against the clients of the whole document, and runs them with the endpoint's
sandbox key. A third endpoint has a JSON Schema: `typed.py` and `typed.ts`, type-checked
against the clients of its document, create a record with the payload types generated from
the schema and read its typed properties back.

The tools are pinned in tests/clients/requirements.txt (pip) and tests/clients/package.json
(npm, installed into target/clients-node); this script checks that those versions are
installed and says how to install them when not. Exits non-zero on any failure, printing the
server's warnings and errors.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "support"))
from intake_server import running_intake  # noqa: E402

NODE_DIR = os.path.join(ROOT, "target", "clients-node")
NODE_BIN = os.path.join(NODE_DIR, "node_modules", ".bin")
# The package the walk imports: what openapi-python-client names a client of "intake API".
PYTHON_PACKAGE = "intake_api_client"
# Generators report what they could not map and go on: any such line fails the run.
WARNING = re.compile(r"warn|error|⚠|❗", re.IGNORECASE)
# Except this report of openapi-python-client, which maps no `application/x-ndjson` body: it
# generates `create_record_batch` with the batch's other body, the JSON array (docs/src/
# clients.md). The report ends with the request body it skipped, indented JSON whose last
# line is `}`.
PYTHON_NDJSON_WARNING = re.compile(
    r"^WARNING parsing POST /api/v1/data/[^/\s]+/batch within data\.\n\n"
    r"Unsupported content type application/x-ndjson\n\n\{\n.*?^\}\n",
    re.MULTILINE | re.DOTALL,
)
# The heading and closing line openapi-python-client puts around its reports, with nothing
# left between them.
PYTHON_NO_REPORTS = re.compile(
    r"^Warning\(s\) encountered while generating\.[^\n]*\n\s*"
    r"^If you believe this was a mistake[^\n]*\n?",
    re.MULTILINE,
)
# The JSON Schema of the typed endpoint: its document's payload type is generated from it
# (`typed.py` and `typed.ts` use its properties), a nested object and a `$defs` item included.
TYPED_SCHEMA = {
    "type": "object",
    "required": ["customer"],
    "properties": {
        "email": {"type": "string"},
        "customer": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string"}, "vip": {"type": "boolean"}},
        },
        "items": {"type": "array", "items": {"$ref": "#/$defs/item"}},
    },
    "$defs": {
        "item": {
            "type": "object",
            "required": ["sku"],
            "properties": {"sku": {"type": "string"}, "quantity": {"type": "integer"}},
        },
    },
}
# Poll holds records back for 60 s by default (docs/src/search-and-poll.md); the walks poll
# records they have just created.
CONFIG = '[poll]\nhold_back = "0s"\n'
INSTALL = (
    "python3 -m pip install -r tests/clients/requirements.txt\n"
    "mkdir -p target/clients-node && cp tests/clients/package.json target/clients-node/ && "
    "npm install --no-audit --no-fund --prefix target/clients-node"
)


def pinned_tools_missing():
    """The pinned tools that are not installed at their pinned version."""
    missing = []
    with open(os.path.join(HERE, "requirements.txt")) as f:
        for line in f:
            if "==" in line and not line.startswith("#"):
                name, version = line.strip().split("==")
                try:
                    installed = metadata.version(name)
                except metadata.PackageNotFoundError:
                    installed = None
                if installed != version:
                    missing.append(f"{name}=={version} (pip: {installed or 'absent'})")
    with open(os.path.join(HERE, "package.json")) as f:
        wanted = json.load(f)["devDependencies"]
    for name, version in wanted.items():
        try:
            with open(os.path.join(NODE_DIR, "node_modules", name, "package.json")) as f:
                installed = json.load(f)["version"]
        except FileNotFoundError:
            installed = None
        if installed != version:
            missing.append(f"{name}@{version} (target/clients-node: {installed or 'absent'})")
    return missing


def python_generator_warnings(output):
    """What openapi-python-client printed, without the expected NDJSON report (and the lines
    around the reports when that was the only one)."""
    return PYTHON_NO_REPORTS.sub("", PYTHON_NDJSON_WARNING.sub("", output))


def run(label, command, cwd, env=None, generator=None):
    """Runs `command`; fails on a non-zero exit, or for a generator (a function from its output
    to the part that must hold no warning) on a warning line."""
    started = time.time()
    done = subprocess.run(
        command,
        cwd=cwd,
        env=dict(os.environ, NO_COLOR="1", FORCE_COLOR="0", **(env or {})),
        capture_output=True,
        text=True,
    )
    output = done.stdout + done.stderr
    checked = generator(output) if generator else ""
    warnings = [line for line in checked.splitlines() if WARNING.search(line)]
    if done.returncode != 0 or (generator and warnings):
        print(output)
        raise SystemExit(
            f"{label}: exit {done.returncode}"
            + "".join(f"\n  warning: {line}" for line in warnings if generator)
        )
    print(f"{label}: ok ({time.time() - started:.1f} s)")
    return output


def generate(document, name, tmp):
    """The Python and TypeScript clients of DOCUMENT (a JSON file) in TMP/NAME: their dirs."""
    python_dir = os.path.join(tmp, name, "python")
    typescript_dir = os.path.join(tmp, name, "typescript")
    run(
        f"openapi-python-client, {name}",
        [sys.executable, "-m", "openapi_python_client", "generate", "--path", document,
         "--output-path", os.path.join(python_dir, PYTHON_PACKAGE), "--meta", "none"],
        tmp,
        generator=python_generator_warnings,
    )
    run(
        f"@hey-api/openapi-ts, {name}",
        [os.path.join(NODE_BIN, "openapi-ts"), "--input", document,
         "--output", os.path.join(typescript_dir, "client"), "--client", "@hey-api/client-fetch"],
        tmp,
        generator=lambda output: output,
    )
    return python_dir, typescript_dir


def main():
    missing = pinned_tools_missing()
    if missing:
        sys.exit("not installed: " + ", ".join(missing) + "\ninstall them with:\n" + INSTALL)
    started = time.time()
    with (
        tempfile.TemporaryDirectory(prefix="intake-clients-") as tmp,
        running_intake(config=CONFIG, prefix="intake-clients-") as intake,
    ):
        # An endpoint per walk: each lists and polls its records alone.
        walks = {
            language: intake.create_endpoint(f"{language} walk", required_fields=["email"])
            for language in ["Python", "TypeScript"]
        }
        own = walks["Python"]
        typed = intake.create_endpoint("Typed", required_fields=["email"])
        status, answer = intake.call(
            "PATCH", f"/api/v1/manage/endpoints/{typed['slug']}", intake.token,
            {"schema": TYPED_SCHEMA},
        )
        if status != 200:
            raise SystemExit(f"PATCH the typed endpoint's schema: {status} {answer}")
        documents = {
            "whole": ("/api/v1/openapi.json", None),
            "endpoint": (f"/api/v1/data/{own['slug']}/openapi.json", own["sandbox_key"]),
            "typed": (f"/api/v1/data/{typed['slug']}/openapi.json", typed["sandbox_key"]),
        }
        clients = {}
        for name, (path, token) in documents.items():
            status, document = intake.call("GET", path, token)
            if status != 200:
                raise SystemExit(f"GET {path}: {status} {document}")
            file = os.path.join(tmp, f"{name}.json")
            with open(file, "w") as f:
                json.dump(document, f)
            clients[name] = generate(file, name, tmp)

        python_dir, typescript_dir = clients["whole"]
        # mypy reads the generated package as source (MYPYPATH): it has no `py.typed`.
        python_env = {
            "PYTHONPATH": python_dir,
            "MYPYPATH": python_dir,
            "MYPY_CACHE_DIR": os.path.join(tmp, "mypy"),
        }
        walk_py = os.path.join(HERE, "walk.py")
        run("mypy --strict walk.py", [sys.executable, "-m", "mypy", "--strict", walk_py], tmp,
            python_env)
        typed_python_dir, typed_typescript_dir = clients["typed"]
        typed_python_env = dict(python_env, PYTHONPATH=typed_python_dir, MYPYPATH=typed_python_dir)
        typed_py = os.path.join(HERE, "typed.py")
        run("mypy --strict typed.py", [sys.executable, "-m", "mypy", "--strict", typed_py], tmp,
            typed_python_env)
        # The walk sits beside the generated client it imports (`./client`).
        shutil.copy(os.path.join(HERE, "walk.ts"), typescript_dir)
        shutil.copy(os.path.join(HERE, "typed.ts"), typed_typescript_dir)
        endpoint_client = os.path.join(clients["endpoint"][1], "client", "index.ts")
        run(
            "tsc --strict walk.ts typed.ts (and the endpoint document's client)",
            [os.path.join(NODE_BIN, "tsc"), "--strict", "--noEmitOnError", "--target", "es2022",
             "--module", "commonjs", "--esModuleInterop", "--lib", "es2022,dom", "--types", "node",
             "--typeRoots", os.path.join(NODE_DIR, "node_modules", "@types"),
             "--rootDir", tmp, "--outDir", os.path.join(tmp, "js"),
             os.path.join(typescript_dir, "walk.ts"), endpoint_client,
             os.path.join(typed_typescript_dir, "typed.ts")],
            tmp,
        )
        walk_js = os.path.join(tmp, "js", os.path.relpath(typescript_dir, tmp), "walk.js")
        typed_js = os.path.join(tmp, "js", os.path.relpath(typed_typescript_dir, tmp), "typed.js")
        for label, command, env, endpoint in [
            ("python walk.py", [sys.executable, walk_py], python_env, walks["Python"]),
            ("node walk.js", ["node", walk_js], None, walks["TypeScript"]),
            ("python typed.py", [sys.executable, typed_py], typed_python_env, typed),
            ("node typed.js", ["node", typed_js], None, typed),
        ]:
            arguments = [intake.base, endpoint["slug"], endpoint["sandbox_key"]]
            print(run(label, [*command, *arguments], tmp, env).strip())
    print(f"generated clients: {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
