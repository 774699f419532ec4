"""Helpers the benchmark drivers share (benches/webhooks.py, benches/soak.py): a free loopback
port, waiting for a spawned server to listen, one JSON call to intake, and the set-up both
webhook drivers make (a receiver, an intake server, an endpoint whose owner webhook points at
the receiver).

Run as a program, `python3 benches/benchlib.py supervise HOST PORT TIMEOUT_S STATE LOG CMD...`
is the server supervisor of benches/lib.sh's start_server (see supervise())."""

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def first_connect(host, port, proc, timeout_s, poll_s):
    """Seconds from now until HOST:PORT first accepts a TCP connection, polled every POLL_S;
    None when PROC exits or TIMEOUT_S passes first."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s and proc.poll() is None:
        try:
            conn = socket.create_connection((host, port), timeout=1)
        except OSError:
            time.sleep(poll_s)
            continue
        waited = time.perf_counter() - t0
        conn.close()
        return waited
    return None


def wait_listening(port, proc, name):
    if first_connect("127.0.0.1", port, proc, 30, 0.01) is not None:
        return
    if proc.poll() is not None:
        sys.exit(f"{name} exited with {proc.returncode}")
    sys.exit(f"{name} did not listen on {port}")


def call(method, url, token=None, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=60) as resp:
        text = resp.read().decode()
    return json.loads(text) if text.startswith(("{", "[")) else text


# ------------------------------------------------------------ the webhook drivers' set-up

def driver_args():
    """The arguments benches/lib.sh's run_receiver_driver passes to a driver."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--intake", required=True)
    ap.add_argument("--receiver", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--results", required=True)
    return ap.parse_args()


@contextlib.contextmanager
def stopped_on_exit():
    """A list to put started processes in; each is stopped (SIGTERM, SIGKILL after 30 s) when
    the block ends, however it ends."""
    procs = []
    try:
        yield procs
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def start_receiver(receiver):
    """Starts benches/webhook_receiver.rs on a free loopback port; returns (process, its URL)."""
    port = free_port()
    proc = subprocess.Popen([receiver, "--listen", f"127.0.0.1:{port}"], stderr=subprocess.DEVNULL)
    wait_listening(port, proc, "receiver")
    return proc, f"http://127.0.0.1:{port}"


def start_intake(intake, work, config):
    """`intake init` in WORK/data, then `intake serve` on a free loopback port with the TOML
    sections CONFIG, its output in WORK/intake.log. Returns (process, base URL, owner token)."""
    data_dir = os.path.join(work, "data")
    init = subprocess.run(
        [intake, "init", "--data-dir", data_dir, "--owner-email", "bench@example.com", "--json"],
        check=True, capture_output=True, text=True).stdout
    token = next(json.loads(l) for l in init.splitlines() if l.startswith("{"))["token"]
    port = free_port()
    config_file = os.path.join(work, "intake.toml")
    with open(config_file, "w") as f:
        f.write(f'listen = "127.0.0.1:{port}"\ndata_dir = "{data_dir}"\n{config}')
    server_log = open(os.path.join(work, "intake.log"), "w")
    proc = subprocess.Popen([intake, "serve", "--config", config_file],
                            stdout=server_log, stderr=subprocess.STDOUT,
                            env=dict(os.environ, RUST_LOG="warn"))
    wait_listening(port, proc, "intake")
    return proc, f"http://127.0.0.1:{port}", token


def endpoint_with_webhook(base, token, hook_url):
    """Creates the endpoint "bench" with its sandbox owner webhook to HOOK_URL; returns
    (slug, sandbox key)."""
    ep = call("POST", f"{base}/api/v1/manage/endpoints", token, {"name": "bench"})
    call("PUT", f"{base}/api/v1/manage/endpoints/{ep['slug']}/webhooks/sandbox", token,
         {"url": hook_url})
    return ep["slug"], ep["sandbox_key"]


# ------------------------------------------------------------ the shell scripts' supervisor

def supervise(host, port, timeout_s, state, logfile, cmd):
    """Spawns CMD (output appended to LOGFILE), measures the time from spawning to the first
    TCP connect to HOST:PORT (polled every 1 ms, for up to TIMEOUT_S), writes "pid N" and
    "startup_ms X" (or "startup_ms failed") to STATE, then waits for the server and exits with
    its exit code (128+signal when a signal ended it). A script in the shell cannot time the
    startup this closely, hence Python."""
    with open(logfile, "ab") as lf:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=lf, stderr=subprocess.STDOUT)
        spawned = time.perf_counter() - t0
        waited = first_connect(host, port, proc, timeout_s - spawned, 0.001)
        startup = "failed" if waited is None else "%.1f" % ((spawned + waited) * 1000.0)
        # Written whole and renamed, so the shell never reads half a file.
        with open(state + ".tmp", "w") as f:
            f.write("pid %d\nstartup_ms %s\n" % (proc.pid, startup))
        os.replace(state + ".tmp", state)
        rc = proc.wait()
        sys.exit(rc if rc >= 0 else 128 - rc)


def main():
    # By hand rather than argparse: the server's own options follow and must pass untouched.
    if len(sys.argv) < 8 or sys.argv[1] != "supervise":
        sys.exit("usage: benchlib.py supervise HOST PORT TIMEOUT_S STATE LOG CMD...")
    host, port, timeout_s, state, logfile = sys.argv[2:7]
    supervise(host, int(port), float(timeout_s), state, logfile, sys.argv[7:])


if __name__ == "__main__":
    main()
