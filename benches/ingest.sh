#!/usr/bin/env bash
# Ingest benchmark: intake vs. a bare warp server (the HTTP ceiling).
#
# Runs the same wrk load (POST of a ~1 KB JSON record, benches/post.lua)
# against `intake serve` and against benches/http_ceiling.rs, then prints a
# Markdown table and writes it to benches/results/ingest-latest.md.
#
# Builds go through cargo with --message-format=json-render-diagnostics
# (JSON on stdout, from which the executables' paths are read; compiler
# messages rendered on stderr as usual).
#
# Usage (from the repo root):
#   bash benches/ingest.sh
#
# Env:
#   DURATION     wrk duration            (default 30s)
#   CONNECTIONS  wrk connections         (default 64)
#   THREADS      wrk threads             (default 2)
#   ONLY         all | intake | ceiling  (default all)
#   INTAKE_BIN   use this intake binary instead of building one (optional)
#
# All traffic goes to 127.0.0.1 only.
set -euo pipefail

DURATION="${DURATION:-30s}"
CONNECTIONS="${CONNECTIONS:-64}"
THREADS="${THREADS:-2}"
ONLY="${ONLY:-all}"
HOST=127.0.0.1

case "$ONLY" in
  all) RUN_INTAKE=1; RUN_CEILING=1 ;;
  intake) RUN_INTAKE=1; RUN_CEILING=0 ;;
  ceiling) RUN_INTAKE=0; RUN_CEILING=1 ;;
  *) echo "ingest.sh: ONLY must be all, intake or ceiling (got '$ONLY')" >&2; exit 2 ;;
esac

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
LUA="$ROOT/benches/post.lua"
RESULTS_DIR="$ROOT/benches/results"
RESULTS_FILE="$RESULTS_DIR/ingest-latest.md"

log() { echo "ingest.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"

# ---------------------------------------------------------------- cleanup

WORK="$(mktemp -d "${TMPDIR:-/tmp}/intake-bench.XXXXXX")"
SERVER_PIDS=()   # servers started by this script
SUPER_PIDS=()    # their python supervisors (background jobs of this shell)

WRK_PID=""       # a running wrk

cleanup() {
  local pid
  if [ -n "$WRK_PID" ]; then
    kill -TERM "$WRK_PID" 2>/dev/null || true
    wait "$WRK_PID" 2>/dev/null || true
  fi
  stop_servers 50 "${SERVER_PIDS[@]}"
  for pid in "${SUPER_PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- tools

command -v python3 >/dev/null || die "python3 is required"
command -v curl >/dev/null || die "curl is required"

ensure_wrk

# Python helper: spawns a server, measures the time from Popen to the first
# successful TCP connect (polled every 1 ms), writes "pid N" and
# "startup_ms X" to a state file, then waits for the server and exits with
# its exit code (128+signal if it was killed by a signal).
SPAWN_PY="$WORK/spawn.py"
cat >"$SPAWN_PY" <<'PY'
import os, socket, subprocess, sys, time

host, port, state, logfile = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
cmd = sys.argv[5:]

def write_state(text):
    tmp = state + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, state)

with open(logfile, "wb") as lf:
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=lf, stderr=subprocess.STDOUT)
    startup_ms = None
    deadline = t0 + 30.0
    while time.perf_counter() < deadline and proc.poll() is None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.connect((host, port))
            startup_ms = (time.perf_counter() - t0) * 1000.0
            break
        except OSError:
            time.sleep(0.001)
        finally:
            s.close()
    if startup_ms is None:
        write_state("pid %d\nstartup_ms failed\n" % proc.pid)
    else:
        write_state("pid %d\nstartup_ms %.1f\n" % (proc.pid, startup_ms))
    rc = proc.wait()
    sys.exit(rc if rc >= 0 else 128 - rc)
PY

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# state_get FILE KEY -> value
state_get() { awk -v k="$2" '$1 == k { print $2 }' "$1"; }

# start_server NAME PORT CMD... ; sets SRV_PID, SRV_SUPER, SRV_STARTUP_MS, SRV_LOG
start_server() {
  local name="$1" port="$2"; shift 2
  local state="$WORK/$name.state"
  SRV_LOG="$WORK/$name.log"
  python3 "$SPAWN_PY" "$HOST" "$port" "$state" "$SRV_LOG" "$@" &
  SRV_SUPER=$!
  SUPER_PIDS+=("$SRV_SUPER")
  for _ in $(seq 1 400); do
    [ -f "$state" ] && break
    sleep 0.1
  done
  [ -f "$state" ] || die "$name: supervisor wrote no state"
  SRV_PID="$(state_get "$state" pid)"
  SERVER_PIDS+=("$SRV_PID")
  SRV_STARTUP_MS="$(state_get "$state" startup_ms)"
  if [ "$SRV_STARTUP_MS" = "failed" ]; then
    log "$name: server did not accept connections on $HOST:$port; its log:"
    cat "$SRV_LOG" >&2 || true
    die "$name: server failed to start"
  fi
  log "$name: pid $SRV_PID listening on $HOST:$port after ${SRV_STARTUP_MS} ms"
}

# stop_server NAME PID SUPERVISOR_PID: SIGTERM, wait (15 s, then SIGKILL)
stop_server() {
  local name="$1" pid="$2" super="$3" rc=0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 150); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "$name: still running 15 s after SIGTERM; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$super" || rc=$?
  log "$name: exited with status $rc"
  forget_pid SERVER_PIDS "$pid"
  forget_pid SUPER_PIDS "$super"
}

# forget_pid ARRAY PID: drop PID from the named array (it has been reaped)
forget_pid() {
  local -n arr="$1"
  local kept=() p
  for p in "${arr[@]}"; do
    [ "$p" = "$2" ] || kept+=("$p")
  done
  arr=("${kept[@]}")
}

# proc_kb PID FIELD -> value in kB from /proc/PID/status (VmRSS, VmHWM)
proc_kb() { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"; }
kb_to_mb() { awk -v kb="$1" 'BEGIN { printf "%.1f", kb / 1024 }'; }

# run_wrk NAME URL KEY -> writes $WORK/NAME.wrk; prints wrk's report to stderr
run_wrk() {
  local name="$1" url="$2" key="$3" path
  path="/${url#http://*/}"
  log "$name: wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency $url"
  # In the background + wait, so that a SIGTERM/SIGINT to this script is
  # handled at once (the trap also stops wrk) rather than after the run.
  PATH_TO_POST="$path" INTAKE_KEY="$key" \
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s "$LUA" "$url" \
    >"$WORK/$name.wrk" &
  WRK_PID=$!
  wait "$WRK_PID"
  WRK_PID=""
  cat "$WORK/$name.wrk" >&2
}

wrk_get() { awk -v k="$2" '$1 == k { print $2 }' "$WORK/$1.wrk"; }

# probe NAME URL KEY: one POST; dies unless the answer is 2xx
probe() {
  local name="$1" url="$2" key="$3" code
  local auth=()
  [ -n "$key" ] && auth=(-H "Authorization: Bearer $key")
  code="$(curl -s -o "$WORK/$name.probe" -w '%{http_code}' -X POST "$url" \
    -H 'Content-Type: application/json' "${auth[@]}" -d '{"probe":true,"n":1}')" || code=000
  case "$code" in
    2??) ;;
    *) log "$name: probe POST $url answered $code:"; cat "$WORK/$name.probe" >&2 || true; echo >&2
       die "$name: probe POST was not accepted" ;;
  esac
}

# --------------------------------------------------------------- builds

# cargo_exe KIND NAME JSONFILE -> executable path of that target
cargo_exe() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
kind, name, path = sys.argv[1:4]
exe = None
for line in open(path):
    line = line.strip()
    if not line.startswith("{"):
        continue
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if msg.get("reason") != "compiler-artifact":
        continue
    target = msg.get("target", {})
    if target.get("name") == name and kind in target.get("kind", []) and msg.get("executable"):
        exe = msg["executable"]
print(exe or "")
PY
}

if [ "$RUN_INTAKE" = 1 ] && [ -n "${INTAKE_BIN:-}" ]; then
  log "using INTAKE_BIN=$INTAKE_BIN (no build)"
  [ -x "$INTAKE_BIN" ] || die "INTAKE_BIN=$INTAKE_BIN is not executable"
elif [ "$RUN_INTAKE" = 1 ]; then
  log "building intake (cargo build --release --bins)"
  cargo build --release --bins --message-format=json-render-diagnostics >"$WORK/build-bins.json"
  INTAKE_BIN="$(cargo_exe bin intake "$WORK/build-bins.json")"
  [ -n "$INTAKE_BIN" ] || INTAKE_BIN="$ROOT/target/release/intake"
  [ -x "$INTAKE_BIN" ] || die "no intake binary at $INTAKE_BIN"
fi

if [ "$RUN_CEILING" = 1 ]; then
  log "building the ceiling (cargo bench --bench http_ceiling --no-run)"
  cargo bench --bench http_ceiling --no-run --message-format=json-render-diagnostics >"$WORK/build-ceiling.json"
  CEILING_BIN="$(cargo_exe bench http_ceiling "$WORK/build-ceiling.json")"
  { [ -n "$CEILING_BIN" ] && [ -x "$CEILING_BIN" ]; } || die "could not find the http_ceiling executable in cargo's JSON output"
fi

# --------------------------------------------------------------- intake

I_SOCKERR="" I_RPS="" I_P50="" I_P99="" I_NON2XX="" I_PEAK_MB="" I_IDLE_MB="" I_STARTUP_MS="" I_REQS="" I_WRITER=""
if [ "$RUN_INTAKE" = 1 ]; then
  DATA_DIR="$WORK/data"
  mkdir -p "$DATA_DIR"
  log "intake: init --data-dir $DATA_DIR"
  "$INTAKE_BIN" init --data-dir "$DATA_DIR" --owner-email bench@example.com --json >"$WORK/init.json" \
    || die "intake init failed; it printed: $(cat "$WORK/init.json")"
  TOKEN="$(python3 -c 'import json,sys
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("{"):
        print(json.loads(line)["token"]); break' "$WORK/init.json")" \
    || die "intake init printed no JSON with a token: $(cat "$WORK/init.json")"
  [ -n "$TOKEN" ] || die "intake init printed no JSON line with a token; it printed: $(cat "$WORK/init.json")"

  PORT="$(free_port)"
  ADDR="$HOST:$PORT"
  start_server intake "$PORT" "$INTAKE_BIN" serve --data-dir "$DATA_DIR" --listen "$ADDR"
  I_PID="$SRV_PID"; I_SUPER="$SRV_SUPER"; I_STARTUP_MS="$SRV_STARTUP_MS"; I_LOG="$SRV_LOG"
  for _ in $(seq 1 50); do
    grep -q "listening on http://$ADDR" "$I_LOG" && break
    sleep 0.1
  done
  grep -q "listening on http://$ADDR" "$I_LOG" \
    || log "intake: warning: no 'listening on http://$ADDR' line in its log"

  log "intake: creating endpoint 'bench'"
  CODE="$(curl -s -o "$WORK/endpoint.json" -w '%{http_code}' -X POST "http://$ADDR/api/v1/manage/endpoints" \
    -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -d '{"name":"bench"}')" || CODE=000
  [ "$CODE" = 201 ] || die "intake: creating the endpoint answered $CODE: $(cat "$WORK/endpoint.json" 2>/dev/null || true)"
  read -r SLUG SANDBOX_KEY < <(python3 -c 'import json,sys
d = json.load(open(sys.argv[1]))
if "slug" not in d and isinstance(d.get("endpoint"), dict):
    d = d["endpoint"]
print(d["slug"], d["sandbox_key"])' "$WORK/endpoint.json") \
    || die "intake: endpoint answer lacks slug/sandbox_key: $(cat "$WORK/endpoint.json")"
  { [ -n "${SLUG:-}" ] && [ -n "${SANDBOX_KEY:-}" ]; } || die "intake: empty slug or sandbox_key"

  URL="http://$ADDR/api/v1/data/$SLUG"
  probe intake "$URL" "$SANDBOX_KEY"

  sleep 2
  I_IDLE_MB="$(kb_to_mb "$(proc_kb "$I_PID" VmRSS)")"
  log "intake: idle RSS $I_IDLE_MB MB"

  run_wrk intake "$URL" "$SANDBOX_KEY"
  I_PEAK_MB="$(kb_to_mb "$(proc_kb "$I_PID" VmHWM)")"
  I_REQS="$(wrk_get intake requests)"; I_RPS="$(wrk_get intake rps)"
  I_P50="$(wrk_get intake p50_ms)"; I_P99="$(wrk_get intake p99_ms)"
  I_NON2XX="$(wrk_get intake non2xx)"; I_SOCKERR="$(wrk_get intake socket_errors)"
  stop_server intake "$I_PID" "$I_SUPER"
  # The writer's own account of the run: writes, commits, average batch, commit time.
  I_WRITER="$(grep -o 'ingest writer stopped: .*' "$I_LOG" | sed 's/^ingest writer stopped: //' | tail -n 1 || true)"
fi

# --------------------------------------------------------------- ceiling

C_SOCKERR="" C_RPS="" C_P50="" C_P99="" C_NON2XX="" C_PEAK_MB="" C_STARTUP_MS="" C_REQS=""
if [ "$RUN_CEILING" = 1 ]; then
  PORT="$(free_port)"
  ADDR="$HOST:$PORT"
  start_server ceiling "$PORT" "$CEILING_BIN" --listen "$ADDR"
  C_PID="$SRV_PID"; C_SUPER="$SRV_SUPER"; C_STARTUP_MS="$SRV_STARTUP_MS"
  URL="http://$ADDR/api/v1/data/bench"
  probe ceiling "$URL" ""
  sleep 1
  run_wrk ceiling "$URL" "bench-key"
  C_PEAK_MB="$(kb_to_mb "$(proc_kb "$C_PID" VmHWM)")"
  C_REQS="$(wrk_get ceiling requests)"; C_RPS="$(wrk_get ceiling rps)"
  C_P50="$(wrk_get ceiling p50_ms)"; C_P99="$(wrk_get ceiling p99_ms)"
  C_NON2XX="$(wrk_get ceiling non2xx)"; C_SOCKERR="$(wrk_get ceiling socket_errors)"
  stop_server ceiling "$C_PID" "$C_SUPER"
fi

# --------------------------------------------------------------- report

or_skip() { if [ -n "$1" ]; then echo "$1$2"; else echo "skipped"; fi; }
row() { # name rps p50 p99 non2xx peak
  if [ -n "$2" ]; then
    printf '| %s | %s | %s ms | %s ms | %s | %s |\n' "$1" "$2" "$3" "$4" "$5" "$6"
  else
    printf '| %s | skipped | | | | |\n' "$1"
  fi
}

NPROC="$(nproc)"
CPU_MODEL="$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
[ -n "$CPU_MODEL" ] || CPU_MODEL="unknown"
REV="$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
PCT=""
if [ -n "$I_RPS" ] && [ -n "$C_RPS" ]; then
  PCT="$(awk -v i="$I_RPS" -v c="$C_RPS" 'BEGIN { if (c > 0) printf "%.1f", 100 * i / c; else print "n/a" }')"
fi
BODY_BYTES="$(wrk_get intake body_bytes 2>/dev/null || wrk_get ceiling body_bytes 2>/dev/null || true)"

# The disk's raw fdatasync latency right now: durable ingest is bounded by it, and on a
# shared virtual disk it moves between runs. 200 x (4 KiB pwrite + fdatasync) in the data dir's
# file system.
FSYNC_MS="$(python3 - "$WORK" <<'PY'
import os, sys, time
path = os.path.join(sys.argv[1], "fsync.probe")
fd = os.open(path, os.O_WRONLY | os.O_CREAT)
n = 200
t = time.time()
for i in range(n):
    os.pwrite(fd, b"x" * 4096, i * 4096)
    os.fdatasync(fd)
print(f"{(time.time() - t) / n * 1000:.3f}")
os.close(fd)
os.remove(path)
PY
)"

REPORT="$WORK/report.md"
{
  echo "## Ingest benchmark"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit: $REV"
  echo "- machine: $NPROC CPUs (nproc), $CPU_MODEL"
  echo "- load: wrk -t$THREADS -c$CONNECTIONS -d$DURATION, keep-alive, POST of a ${BODY_BYTES:-~1000}-byte JSON record (benches/post.lua) to 127.0.0.1; client and server share the machine"
  echo
  echo "| server | requests/s | p50 | p99 | non-2xx | peak RSS MB |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: |"
  row "intake" "$I_RPS" "$I_P50" "$I_P99" "$I_NON2XX" "$I_PEAK_MB"
  row "bare warp ceiling" "$C_RPS" "$C_P50" "$C_P99" "$C_NON2XX" "$C_PEAK_MB"
  echo
  echo "- intake idle RSS: $(or_skip "$I_IDLE_MB" " MB")"
  echo "- intake startup to listening: $(or_skip "$I_STARTUP_MS" " ms")"
  echo "- intake writer: $(or_skip "$I_WRITER" "")"
  echo "- disk: 4 KiB pwrite + fdatasync takes $(or_skip "$FSYNC_MS" " ms") on this file system"
  echo "- intake requests/s as % of ceiling: $(or_skip "$PCT" " %")"
  echo "- requests completed: intake $(or_skip "$I_REQS" ""), ceiling $(or_skip "$C_REQS" "")"
  echo "- wrk socket errors (connect/read/write/timeout): intake $(or_skip "$I_SOCKERR" ""), ceiling $(or_skip "$C_SOCKERR" "")"
  echo "- ceiling startup to listening: $(or_skip "$C_STARTUP_MS" " ms")"
} >"$REPORT"

mkdir -p "$RESULTS_DIR"
cp "$REPORT" "$RESULTS_FILE"
echo
cat "$REPORT"
log "written to ${RESULTS_FILE#"$ROOT"/}"

if [ -n "$I_NON2XX" ] && [ -n "$I_REQS" ] && [ "$I_NON2XX" != 0 ]; then
  log "warning: intake answered $I_NON2XX of $I_REQS requests with a non-2xx status"
fi
