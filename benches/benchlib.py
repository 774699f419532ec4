"""Helpers the benchmark drivers share (benches/webhooks.py, benches/soak.py, benches/lean.sh):
a free loopback port, waiting for a spawned server to listen, one JSON call to intake, the
set-up both webhook drivers make (a receiver, an intake server, an endpoint whose owner webhook
points at the receiver), a profile's variables, memory samples and per-thread CPU.

Run as a program, it serves benches/lib.sh (one sub-command each, see main()):
  supervise HOST PORT TIMEOUT_S STATE LOG CMD...   start_server's supervisor (supervise())
  profile-env FILE                                 a profile's NAME=VALUE lines (profile_vars())
  mem-peaks FILE [FROM TO]                         peaks of mem_sample's lines (mem_peaks())
  cpu-watch PID FILE [INTERVAL]                    CPU ticks per thread until SIGTERM (cpu_watch())
  cpu-per-request FILE REQUESTS                    CPU per request over a cpu-watch FILE
  figures [--merge] FILE KEY VALUE...              a run's key figures as JSON (write_figures())
  load-batches URL KEY RECORDS CONNECTIONS LUA     RECORDS copies of LUA's record through the
                                                   batch route URL (load_batches())"""

import argparse
import contextlib
import json
import os
import re
import signal
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


def start_intake(intake, work, config, extra_env=None):
    """`intake init`, then `intake serve` on a free loopback port, data dir WORK/data, with the
    TOML sections CONFIG (a [storage] backend among them, say) and the variables of the profile
    file PROFILE_ENV (when set), then EXTRA_ENV (a dict; RUST_LOG is "warn" unless it sets it), its
    output in WORK/intake.log. Returns (process, base URL, owner token)."""
    data_dir = os.path.join(work, "data")
    port = free_port()
    config_file = os.path.join(work, "intake.toml")
    with open(config_file, "w") as f:
        f.write(f'listen = "127.0.0.1:{port}"\ndata_dir = "{data_dir}"\n{config}')
    init = subprocess.run(
        [intake, "init", "--config", config_file, "--owner-email", "bench@example.com", "--json"],
        check=True, capture_output=True, text=True).stdout
    token = next(json.loads(l) for l in init.splitlines() if l.startswith("{"))["token"]
    server_log = open(os.path.join(work, "intake.log"), "w")
    # The profile's variables (PROFILE_ENV) and EXTRA_ENV go to the server alone.
    env = dict(os.environ, RUST_LOG="warn")
    env.update(profile_vars(os.environ.get("PROFILE_ENV", "")))
    env.update(extra_env or {})
    proc = subprocess.Popen([intake, "serve", "--config", config_file],
                            stdout=server_log, stderr=subprocess.STDOUT, env=env)
    wait_listening(port, proc, "intake")
    return proc, f"http://127.0.0.1:{port}", token


def endpoint_with_webhook(base, token, hook_url):
    """Creates the endpoint "bench" with its sandbox owner webhook to HOOK_URL; returns
    (slug, sandbox key)."""
    ep = call("POST", f"{base}/api/v1/manage/endpoints", token, {"name": "bench"})
    call("PUT", f"{base}/api/v1/manage/endpoints/{ep['slug']}/webhooks/sandbox", token,
         {"url": hook_url})
    return ep["slug"], ep["sandbox_key"]


# ------------------------------------------------------------ profiles

PROFILE_NAME = re.compile(r"^INTAKE_[A-Z0-9_]+$")


def profile_vars(path):
    """The variables of a profile file (benches/profiles/NAME.env), in order: one NAME=VALUE
    per line, NAME an INTAKE_... variable (intake's config override, see
    docs/src/configuration.md), VALUE taken as written (one pair of surrounding quotes
    removed); blank lines and lines starting with # are skipped, an `export ` prefix is
    allowed. An empty PATH has none. Exits on anything else."""
    if not path:
        return []
    pairs = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            line = line.removeprefix("export ").lstrip()
            name, eq, value = line.partition("=")
            if not eq or not PROFILE_NAME.match(name):
                sys.exit(f"{path}:{n}: not an INTAKE_...=value line: {line!r}")
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            pairs.append((name, value))
    return pairs


# ------------------------------------------------------------ memory

def mem_watch(pid, path):
    """Starts benches/lib.sh's mem_sample on PID into PATH (the sampler every benchmark uses);
    returns the sampler's process (terminate it, or let it end with PID)."""
    lib = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib.sh")
    return subprocess.Popen(["bash", "-c", 'source "$1" && mem_sample "$2" "$3"', "mem_sample",
                             lib, str(pid), path])


def proc_kb(pid, field):
    """A kB figure of /proc/PID/status (VmRSS, VmHWM)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise ValueError(f"no {field} in /proc/{pid}/status")


def mem_peaks(path, t_from=None, t_to=None):
    """Figures over mem_sample's lines in PATH ("EPOCH RSS ANON FILE HWM", kB), only those
    taken from T_FROM to T_TO (epoch seconds) when given: samples, rss_first_kb, rss_min_kb,
    rss_max_kb, rss_last_kb, anon_max_kb, file_max_kb (each the largest sample: the peaks of
    the parts need not fall on the same sample), hwm_kb (the last sample's VmHWM, the true
    peak of the process so far, between samples included) and series_mb (every RSS in MiB)."""
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) != 5:
                continue
            t, rss, anon, file_kb, hwm = float(parts[0]), *map(int, parts[1:])
            if (t_from is None or t >= t_from) and (t_to is None or t <= t_to):
                rows.append((t, rss, anon, file_kb, hwm))
    if not rows:
        return {"samples": 0}
    rss = [r[1] for r in rows]
    return {
        "samples": len(rows),
        "rss_first_kb": rss[0], "rss_min_kb": min(rss), "rss_max_kb": max(rss),
        "rss_last_kb": rss[-1],
        "anon_max_kb": max(r[2] for r in rows), "file_max_kb": max(r[3] for r in rows),
        "hwm_kb": rows[-1][4],
        "series_mb": ",".join(f"{v / 1024:.0f}" for v in rss),
    }


# ------------------------------------------------------------ CPU per thread

def thread_group(comm):
    """A thread's group: its name without a trailing number (merge_thread_3 -> merge_thread,
    thrd-tantivy-index0 -> thrd-tantivy-index; names are cut to 15 characters by the kernel)."""
    return re.sub(r"[-_#:.]*\d+$", "", comm) or comm


def _stat_ticks(path):
    """(comm, utime + stime in clock ticks) from a /proc/.../stat file."""
    with open(path) as f:
        text = f.read()
    comm = text[text.index("(") + 1:text.rindex(")")]
    fields = text[text.rindex(")") + 2:].split()
    return comm, int(fields[11]) + int(fields[12])


def cpu_snapshot(pid):
    """The process's utime + stime so far (clock ticks; its exited threads included) and each
    live thread's, from /proc/PID/stat and /proc/PID/task/*/stat; the main thread is
    "main"."""
    _, total = _stat_ticks(f"/proc/{pid}/stat")
    threads = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            comm, ticks = _stat_ticks(f"/proc/{pid}/task/{tid}/stat")
        except (OSError, ValueError):
            continue   # the thread ended meanwhile
        threads[tid] = ["main" if tid == str(pid) else comm, ticks]
    return {"pid": pid, "time": time.time(), "ticks": total, "clk_tck": os.sysconf("SC_CLK_TCK"),
            "threads": threads}


class _Stop(Exception):
    pass


def cpu_watch(pid, path, interval=0.2):
    """Follows the process's threads from now until SIGTERM (or the process's end), then
    writes {"before": snapshot, "after": snapshot} to PATH (cpu_snapshot()s). A thread's CPU
    is known only while it lives, and short-lived threads (tantivy's indexing threads, say)
    come and go during a load, so the threads are read every INTERVAL seconds and "after"
    keeps every thread seen, each with its last reading: only what a thread used in its last
    INTERVAL before ending goes unattributed. PATH.ready is written once "before" is taken."""
    def stop(_sig, _frame):
        raise _Stop()
    signal.signal(signal.SIGTERM, stop)
    before = cpu_snapshot(pid)
    after = json.loads(json.dumps(before))
    open(path + ".ready", "w").close()
    try:
        while True:
            time.sleep(interval)
            _merge(after, pid)
    except (_Stop, OSError, ValueError):
        pass
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        _merge(after, pid)
    except (OSError, ValueError):
        pass   # the process has ended: the last reading stands
    with open(path, "w") as f:
        json.dump({"before": before, "after": after}, f)


def _merge(into, pid):
    now = cpu_snapshot(pid)
    into["ticks"], into["time"] = now["ticks"], now["time"]
    into["threads"].update(now["threads"])


def cpu_per_request(before, after, requests):
    """CPU µs per request between two cpu_snapshot()s (or cpu_watch()'s pair): cpu_us (the
    whole process), cpu_cores (cores busy on average), and cpu_us.GROUP for each thread group
    (thread_group()) that used any; a thread started in between counts from zero, and what no
    thread in AFTER accounts for (threads that ended unseen) is cpu_us.(exited)."""
    hz = after["clk_tck"]
    per = 1e6 / hz / requests if requests else 0.0
    out = {"cpu_us": round((after["ticks"] - before["ticks"]) * per, 2)}
    span = after["time"] - before["time"]
    out["cpu_cores"] = round((after["ticks"] - before["ticks"]) / hz / span, 2) if span > 0 else 0
    groups = {}
    live = 0
    for tid, (comm, ticks) in after["threads"].items():
        used = ticks - before["threads"].get(tid, [comm, 0])[1]
        live += used
        group = comm if comm == "main" else thread_group(comm)
        groups[group] = groups.get(group, 0) + used
    exited = after["ticks"] - before["ticks"] - live
    if exited > 0:
        groups["(exited)"] = exited
    for group, ticks in sorted(groups.items(), key=lambda kv: -kv[1]):
        if ticks > 0:
            out[f"cpu_us.{group}"] = round(ticks * per, 2)
    return out


# ------------------------------------------------------------ key figures

def write_figures(path, figures, merge=False):
    """Writes FIGURES (a dict) to PATH as one JSON object; with MERGE, into the object already
    there (if any)."""
    data = {}
    if merge and os.path.exists(path):
        with open(path) as f:
            data = json.load(f)
    data.update(figures)
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")


def figure_value(text):
    """A figure given as text: a number when it reads as one, None when empty."""
    if text == "":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


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


def bench_record(lua_path):
    """The ~1 KB JSON record of benches/post.lua (its `local body = [[...]]`)."""
    with open(lua_path) as f:
        text = f.read()
    match = re.search(r"local body = \[\[\n(.*?)\n\]\]", text, re.S)
    if not match:
        sys.exit(f"{lua_path}: no `local body = [[...]]`")
    return match.group(1).strip()


def load_batches(url, key, records, connections, lua_path, per_batch=1000):
    """Stores `records` copies of post.lua's record through the batch route at `url`, 1,000 per
    request, from `connections` threads; exits on any answer but 202."""
    import concurrent.futures
    record = bench_record(lua_path)
    batches = [min(per_batch, records - start) for start in range(0, records, per_batch)]

    def send(count):
        body = ("\n".join([record] * count) + "\n").encode()
        request = urllib.request.Request(url, data=body, method="POST", headers={
            "Authorization": f"Bearer {key}", "Content-Type": "application/x-ndjson"})
        with urllib.request.urlopen(request, timeout=120) as answer:
            if answer.status != 202:
                raise RuntimeError(f"a batch answered {answer.status}")
        return count

    with concurrent.futures.ThreadPoolExecutor(max_workers=connections) as pool:
        stored = sum(pool.map(send, batches))
    print("records", stored)
    print("body_bytes", len(record.encode()))


def print_kv(figures):
    for k, v in figures.items():
        print(k, v)


def main():
    # By hand rather than argparse: the server's own options follow `supervise` and must pass
    # untouched.
    cmd, args = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    if cmd == "supervise" and len(args) >= 6:
        host, port, timeout_s, state, logfile = args[:5]
        supervise(host, int(port), float(timeout_s), state, logfile, args[5:])
    elif cmd == "profile-env" and len(args) == 1:
        for name, value in profile_vars(args[0]):
            print(f"{name}={value}")
    elif cmd == "mem-peaks" and len(args) in (1, 3):
        window = [float(a) for a in args[1:]] or [None, None]
        print_kv(mem_peaks(args[0], *window))
    elif cmd == "cpu-watch" and len(args) in (2, 3):
        cpu_watch(int(args[0]), args[1], *[float(a) for a in args[2:]])
    elif cmd == "cpu-per-request" and len(args) == 2:
        with open(args[0]) as f:
            pair = json.load(f)
        print_kv(cpu_per_request(pair["before"], pair["after"], int(args[1])))
    elif cmd == "figures" and args:
        merge = args[0] == "--merge"
        path, *pairs = args[1:] if merge else args
        write_figures(path, {k: figure_value(v) for k, v in zip(pairs[::2], pairs[1::2])}, merge)
    elif cmd == "load-batches" and len(args) == 5:
        load_batches(args[0], args[1], int(args[2]), int(args[3]), args[4])
    else:
        sys.exit("usage: benchlib.py supervise HOST PORT TIMEOUT_S STATE LOG CMD... | "
                 "profile-env FILE | mem-peaks FILE [FROM TO] | cpu-watch PID FILE [INTERVAL] | "
                 "cpu-per-request FILE REQUESTS | figures [--merge] FILE KEY VALUE... | "
                 "load-batches URL KEY RECORDS CONNECTIONS LUA")


if __name__ == "__main__":
    main()
