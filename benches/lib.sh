# Helpers shared by the benchmark scripts. Source it first:
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# It sets ROOT, the repo root, and makes it the working directory; it defines log and die
# (prefixed with the script's name; a script may redefine log after sourcing). Helpers that
# keep files use WORK, the script's temporary directory.
# shellcheck shell=bash

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# INTAKE_BIN picks the binary to measure; it must not reach the server's environment, where
# intake refuses INTAKE_* variables that name no config key.
export -n INTAKE_BIN 2>/dev/null || true

HOST=127.0.0.1   # all benchmark traffic stays on the loopback
BENCH_NAME="${0##*/}"
log() { echo "$BENCH_NAME: $*" >&2; }
die() { log "error: $*"; exit 1; }

# choose_sides OTHER FLAG: for a benchmark of intake against OTHER, ONLY (default all) names
# the sides to run: all, intake or OTHER. Sets RUN_INTAKE and the variable named FLAG (the
# other side's) to 1 or 0; exits with status 2 on any other value.
choose_sides() {
  local other="$1" flag="$2"
  case "${ONLY:=all}" in
    all) RUN_INTAKE=1; printf -v "$flag" 1 ;;
    intake) RUN_INTAKE=1; printf -v "$flag" 0 ;;
    "$other") RUN_INTAKE=0; printf -v "$flag" 1 ;;
    *) echo "$BENCH_NAME: ONLY must be all, intake or $other (got '$ONLY')" >&2; exit 2 ;;
  esac
}

# ---------------------------------------------------------------- tools

# require CMD...: dies unless every CMD is installed
require() {
  local cmd
  for cmd in "$@"; do
    command -v "$cmd" >/dev/null || die "$cmd is required"
  done
}

# apt_install PKG...: installs Debian packages (through sudo when not root; apt-get update
# once per run).
APT_UPDATED=0
apt_install() {
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || die "need to apt-get install $*, but we are not root (no sudo either)"
    sudo="sudo"
  fi
  if [ "$APT_UPDATED" = 0 ]; then
    $sudo apt-get update >&2
    APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y "$@" >&2
}

# Installs Debian's wrk when it is missing.
ensure_wrk() {
  command -v wrk >/dev/null && return 0
  log "wrk not found; installing Debian's wrk"
  apt_install wrk
  command -v wrk >/dev/null || die "wrk install failed"
}

# free_port -> a TCP port on the loopback that nothing listens on right now
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# kv FILE KEY -> the value of FILE's "KEY value" line (wrk scripts and state files write them)
kv() { awk -v k="$2" '$1 == k { print $2 }' "$1"; }

# proc_kb PID FIELD -> value in kB from /proc/PID/status (VmRSS, VmHWM)
proc_kb() { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"; }
kb_to_mb() { awk -v kb="$1" 'BEGIN { printf "%.1f", kb / 1024 }'; }

# write_figures KEY VALUE...: when RESULTS_JSON is set, writes the pairs there as one JSON
# object (numbers as numbers, empty values as null): a run's key figures for other programs
# (benches/compare.sh, benches/lean.sh). add_figures KEY VALUE...: the same, added to what
# RESULTS_JSON already holds.
write_figures() {
  [ -n "${RESULTS_JSON:-}" ] || return 0
  python3 "$ROOT/benches/benchlib.py" figures "$RESULTS_JSON" "$@"
}
add_figures() {
  [ -n "${RESULTS_JSON:-}" ] || return 0
  python3 "$ROOT/benches/benchlib.py" figures --merge "$RESULTS_JSON" "$@"
}

# fsync_ms DIR -> the disk's raw fdatasync latency right now, in ms: 200 x (4 KiB pwrite +
# fdatasync) in DIR's file system. Durable writes are bounded by it, and on a shared virtual
# disk it moves between runs.
fsync_ms() {
  python3 - "$1" <<'PY'
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
}

# ---------------------------------------------------------------- processes

# run_bg CMD...: runs a helper in the background and waits for it, so that a signal to the
# script is handled at once (stop_child, in the exit trap, stops the helper).
CHILD_PID=""
run_bg() {
  local rc=0
  "$@" &
  CHILD_PID=$!
  wait "$CHILD_PID" || rc=$?
  CHILD_PID=""
  return "$rc"
}

# stop_child: for the exit trap: stops the helper run_bg is waiting for, if any.
stop_child() {
  [ -n "$CHILD_PID" ] || return 0
  kill -TERM "$CHILD_PID" 2>/dev/null || true
  wait "$CHILD_PID" 2>/dev/null || true
}

# stop_servers TENTHS PID...: SIGTERM every PID, give each up to TENTHS tenths of a second to
# exit, then SIGKILL what is left.
stop_servers() {
  local tenths="$1" pid
  shift
  for pid in "$@"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "$@"; do
    for _ in $(seq 1 "$tenths"); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  done
}

SERVER_PIDS=()   # servers started by start_server and not yet stopped
SUPER_PIDS=()    # their supervisors (background jobs of this shell)

# start_server NAME PORT TIMEOUT_S CMD...: starts CMD under benchlib.py's supervisor, which
# times it from spawning to the first TCP connect to PORT (polled every 1 ms, for up to
# TIMEOUT_S) and then waits for it; dies if it never listens. Sets SRV_PID, SRV_SUPER,
# SRV_STARTUP_MS and SRV_LOG ($WORK/NAME.log, where the server's output goes).
start_server() {
  local name="$1" port="$2" timeout="$3"; shift 3
  local state="$WORK/$name.state"
  SRV_LOG="$WORK/$name.log"
  rm -f "$state"
  python3 "$ROOT/benches/benchlib.py" supervise "$HOST" "$port" "$timeout" "$state" "$SRV_LOG" "$@" &
  SRV_SUPER=$!
  SUPER_PIDS+=("$SRV_SUPER")
  # The supervisor writes its state within TIMEOUT_S; 10 s more for Python itself.
  for _ in $(seq 1 $(( timeout * 10 + 100 ))); do
    [ -f "$state" ] && break
    sleep 0.1
  done
  [ -f "$state" ] || die "$name: supervisor wrote no state"
  SRV_PID="$(kv "$state" pid)"
  SERVER_PIDS+=("$SRV_PID")
  SRV_STARTUP_MS="$(kv "$state" startup_ms)"
  if [ "$SRV_STARTUP_MS" = "failed" ]; then
    log "$name: server did not accept connections on $HOST:$port; its log:"
    cat "$SRV_LOG" >&2 || true
    die "$name: server failed to start"
  fi
  log "$name: pid $SRV_PID listening on $HOST:$port after ${SRV_STARTUP_MS} ms"
}

# stop_server NAME PID SUPERVISOR_PID TIMEOUT_S: SIGTERM, up to TIMEOUT_S for the server to
# exit, then SIGKILL. Sets SRV_RC, its exit status (128+signal when a signal ended it).
stop_server() {
  local name="$1" pid="$2" super="$3" timeout="$4"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 $(( timeout * 10 ))); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "$name: still running $timeout s after SIGTERM; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  SRV_RC=0
  wait "$super" || SRV_RC=$?
  log "$name: exited with status $SRV_RC"
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

# cleanup_on_exit TENTHS [FUNCTION]: on any exit, Ctrl-C (status 130) and SIGTERM (143)
# included: runs FUNCTION (what the script alone started), stops the samplers (mem_watch,
# cpu_watch), the helper run_bg waits for and every server start_server started (TENTHS
# tenths of a second each, then SIGKILL), reaps their supervisors and removes WORK (when the
# script has one).
cleanup_on_exit() {
  # shellcheck disable=SC2064  # the arguments are meant to be expanded now
  trap "clean_up $1 ${2:-}" EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

clean_up() {
  local tenths="$1" extra="${2:-}" pid
  [ -z "$extra" ] || "$extra"
  for pid in "${WATCH_PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  stop_child
  stop_servers "$tenths" "${SERVER_PIDS[@]}"
  for pid in "${SUPER_PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  [ -z "${WORK:-}" ] || rm -rf "$WORK"
}

# cpu_ticks PID -> user + system CPU ticks the process has used
cpu_ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
CLK_TCK="$(getconf CLK_TCK)"

# wait_idle PID TIMEOUT_S: waits until the process uses under 2 % of a core over 2 s (the
# search indexer and tantivy's merges done). Sets SETTLED (1 or 0) and SETTLE_S (seconds).
wait_idle() {
  local pid="$1" timeout="$2" t0 prev cur deadline
  t0="$(date +%s)"
  SETTLED=0
  prev="$(cpu_ticks "$pid")"
  deadline=$(( t0 + timeout ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    sleep 2
    cur="$(cpu_ticks "$pid")"
    if [ $(( (cur - prev) * 100 )) -le $(( 2 * 2 * CLK_TCK )) ]; then SETTLED=1; break; fi
    prev="$cur"
  done
  SETTLE_S=$(( $(date +%s) - t0 ))
}

# ---------------------------------------------------------------- memory, CPU, disk

# mem_sample PID FILE [INTERVAL]: every INTERVAL seconds (default MEM_INTERVAL, 0.25) until PID
# is gone, appends one line "EPOCH RSS ANON FILE HWM" (kB) to FILE: Rss and Anonymous from
# /proc/PID/smaps_rollup, file-backed = Rss - Anonymous (mapped files such as tantivy's segments,
# and shared memory: pages the kernel can reclaim without writing them anywhere), and VmHWM from
# /proc/PID/status. Reads with shell builtins only (one `sleep` per sample), so it costs the
# machine next to nothing. The one memory sampler of the benchmarks: scripts run it through
# mem_watch, Python drivers through benchlib.py's mem_watch.
MEM_INTERVAL="${MEM_INTERVAL:-0.25}"
mem_sample() {
  local pid="$1" out="$2" interval="${3:-$MEM_INTERVAL}"
  while mem_sample_once "$pid" >>"$out"; do
    sleep "$interval"
  done
}

# mem_sample_once PID -> one sample line (see mem_sample); fails when PID is gone (or a zombie)
mem_sample_once() {
  local pid="$1" key value rest rss="" anon="" hwm=""
  { while read -r key value rest; do
      case "$key" in
        Rss:) rss="$value" ;;
        Anonymous:) anon="$value" ;;
      esac
    done <"/proc/$pid/smaps_rollup"; } 2>/dev/null || return 1
  { while read -r key value rest; do
      case "$key" in VmHWM:) hwm="$value" ;; esac
    done <"/proc/$pid/status"; } 2>/dev/null || return 1
  { [ -n "$rss" ] && [ -n "$anon" ] && [ -n "$hwm" ]; } || return 1
  echo "$EPOCHREALTIME $rss $anon $(( rss - anon )) $hwm"
}

WATCH_PIDS=()   # running mem_watch and cpu_watch samplers (stopped by mem_unwatch,
                # cpu_unwatch or the exit trap)

# mem_watch PID FILE: samples PID's memory into FILE in the background (mem_sample) until
# mem_unwatch. Sets MEM_WATCH_PID, the sampler's PID.
mem_watch() {
  mem_sample "$1" "$2" &
  MEM_WATCH_PID=$!
  WATCH_PIDS+=("$MEM_WATCH_PID")
}

# mem_unwatch SAMPLER_PID PID FILE: stops the sampler and appends one last sample of PID.
mem_unwatch() {
  kill -TERM "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  forget_pid WATCH_PIDS "$1"
  mem_sample_once "$2" >>"$3" || true
}

# mem_peaks FILE [FROM TO] -> "key value" lines over FILE's samples (those taken between the
# epoch seconds FROM and TO when given): samples, rss_{first,min,max,last}_kb, anon_max_kb,
# file_max_kb, hwm_kb (the last VmHWM) and series_mb (every RSS, comma-separated). See
# benchlib.py mem_peaks.
mem_peaks() { python3 "$ROOT/benches/benchlib.py" mem-peaks "$@"; }

# hwm_reset PID: resets the process's VmHWM to its current RSS (writing 5 to
# /proc/PID/clear_refs), so that a later VmHWM is the peak of what came after. Fails where the
# kernel does not allow it.
hwm_reset() { echo 5 2>/dev/null >"/proc/$1/clear_refs"; }

# cpu_watch PID FILE: follows the process's threads in the background (benchlib.py cpu_watch:
# every 0.2 s, so that threads which end meanwhile keep their CPU and name) until
# cpu_unwatch, which writes FILE. Returns once the first reading is taken; sets
# CPU_WATCH_PID.
cpu_watch() {
  rm -f "$2" "$2.ready"
  python3 "$ROOT/benches/benchlib.py" cpu-watch "$1" "$2" &
  CPU_WATCH_PID=$!
  WATCH_PIDS+=("$CPU_WATCH_PID")
  for _ in $(seq 1 100); do
    [ -f "$2.ready" ] && return 0
    sleep 0.05
  done
  die "cpu_watch: no first reading of PID $1 within 5 s"
}

# cpu_unwatch WATCHER_PID: stops cpu_watch, which then writes its FILE.
cpu_unwatch() {
  kill -TERM "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  forget_pid WATCH_PIDS "$1"
}

# cpu_per_request FILE REQUESTS -> "key value" lines over a cpu_watch FILE: cpu_us (the
# process's utime + stime in µs per request), cpu_cores (cores busy on average over the span),
# and cpu_us.GROUP per thread-name group (see benchlib.py cpu_per_request).
cpu_per_request() { python3 "$ROOT/benches/benchlib.py" cpu-per-request "$@"; }

# du_parts DIR -> "NAME BYTES" for each entry at DIR's top (du -sb: apparent size, a directory
# with everything in it), largest first, then "TOTAL BYTES" for the whole of DIR.
du_parts() {
  local entry
  for entry in "$1"/* "$1"/.[!.]*; do
    [ -e "$entry" ] || continue
    printf '%s %s\n' "${entry##*/}" "$(du -sb "$entry" | cut -f1)"
  done | sort -k2,2nr
  printf 'TOTAL %s\n' "$(du -sb "$1" | cut -f1)"
}

# ---------------------------------------------------------------- profiles

# serve_env: sets SERVE_ENV, the words to put before "$INTAKE_BIN" serve so that the server,
# and nothing else, gets the variables of the profile file PROFILE_ENV (a benches/profiles/*.env
# file: INTAKE_...=value lines, see benchlib.py profile_vars): `env NAME=VALUE...`, just `env`
# when PROFILE_ENV is unset or empty. env execs the server, so the PID stays the server's.
serve_env() {
  local lines
  SERVE_ENV=(env)
  [ -n "${PROFILE_ENV:-}" ] || return 0
  lines="$(python3 "$ROOT/benches/benchlib.py" profile-env "$PROFILE_ENV")" \
    || die "bad profile PROFILE_ENV=$PROFILE_ENV"
  [ -z "$lines" ] || mapfile -t -O 1 SERVE_ENV <<<"$lines"
  log "profile $PROFILE_ENV: ${SERVE_ENV[*]:1}"
}

# ---------------------------------------------------------------- PostgreSQL

# A throwaway PostgreSQL cluster in WORK/pg, never the system cluster: pg_find, pg_start, and
# pg_stop in the exit trap (cleanup_on_exit's FUNCTION).
PG_DATA=""       # the cluster's data directory, once initdb ran
PG_STARTED=0

# as_pg CMD...: runs a PostgreSQL server program as the postgres OS user when we are root
# (the server refuses to run as root).
as_pg() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

# running PID: true while PID is a live process (not a zombie waiting to be reaped)
running() {
  local st
  st="$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null || true)"
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

pg_bin_dir() {
  local d
  d="$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
  if [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; fi
}

# pg_find: sets PG_BIN (the newest /usr/lib/postgresql/*/bin) and PG_VERSION; installs Debian's
# postgresql and postgresql-contrib (pg_trgm) when the server or pg_trgm is missing.
pg_find() {
  PG_BIN="$(pg_bin_dir)"
  if [ -z "$PG_BIN" ] || [ ! -f "$(dirname "$PG_BIN")/lib/pg_trgm.so" ]; then
    log "PostgreSQL server or pg_trgm not found; installing Debian's postgresql, postgresql-contrib"
    apt_install postgresql postgresql-contrib
    PG_BIN="$(pg_bin_dir)"
  fi
  [ -n "$PG_BIN" ] || die "no PostgreSQL server programs under /usr/lib/postgresql/*/bin"
  PG_VERSION="$("$PG_BIN/postgres" --version | awk '{ print $3 }')"
  case "$PG_VERSION" in
    15.*) ;;
    *) log "warning: PostgreSQL $PG_VERSION, not 15 (Debian 12's); carrying on" ;;
  esac
  if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || die "no 'postgres' OS user to run initdb as"
    command -v runuser >/dev/null || die "runuser is required (util-linux)"
  fi
}

# pg_start SETTING...: initdb into WORK/pg/data (trust authentication, UTF8, locale C.UTF-8),
# then pg_ctl start on HOST and a free port with the settings given as `-c NAME=VALUE` words
# (no spaces inside one). Sets PG_DIR, PG_DATA, PG_PORT and PG_DSN (libpq key/value string:
# user postgres, database postgres). Run pg_find first.
pg_start() {
  local opts
  PG_DIR="$WORK/pg"
  PG_DATA="$PG_DIR/data"
  mkdir -p "$PG_DIR"
  if [ "$(id -u)" -eq 0 ]; then
    chmod 0711 "$WORK"            # postgres must reach $WORK/pg
    chown postgres: "$PG_DIR"
  fi
  log "PostgreSQL $PG_VERSION: initdb $PG_DATA"
  as_pg "$PG_BIN/initdb" -D "$PG_DATA" -U postgres -A trust -E UTF8 --locale=C.UTF-8 \
    >"$WORK/initdb.log" 2>&1 || { cat "$WORK/initdb.log" >&2; die "initdb failed"; }
  PG_PORT="$(free_port)"
  opts="-c listen_addresses=$HOST -c port=$PG_PORT -c unix_socket_directories=$PG_DIR"
  opts+=" -c logging_collector=off $*"
  PG_STARTED=1
  as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_DIR/server.log" -w -t 120 -o "$opts" start \
    >"$WORK/pg_ctl.log" 2>&1 || { cat "$WORK/pg_ctl.log" "$PG_DIR/server.log" >&2; die "pg_ctl start failed"; }
  PG_DSN="host=$HOST port=$PG_PORT user=postgres dbname=postgres"
  log "PostgreSQL listening on $HOST:$PG_PORT"
}

# pg_stop: stops the cluster pg_start started (pg_ctl stop -m fast; SIGQUIT, then SIGKILL, to
# its postmaster if that fails); nothing when none runs.
pg_stop() {
  [ "$PG_STARTED" = 1 ] || return 0
  local pid=""
  [ -f "$PG_DATA/postmaster.pid" ] && pid="$(head -n 1 "$PG_DATA/postmaster.pid" 2>/dev/null || true)"
  if ! as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -w -t 60 stop >"$WORK/pg_stop.log" 2>&1; then
    cat "$WORK/pg_stop.log" >&2 || true
    # Only the postmaster of our own cluster: its command line names our data directory.
    if [ -n "$pid" ] && running "$pid" && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$PG_DATA"; then
      log "PostgreSQL (pid $pid) still running after pg_ctl stop; sending SIGQUIT"
      kill -QUIT "$pid" 2>/dev/null || true
      sleep 2
      if running "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
    fi
  fi
  PG_STARTED=0
}

# pg_psql SQL: runs SQL through psql against the cluster (database PG_DB, default postgres),
# stopping at the first error; prints unaligned, tuples-only output.
pg_psql() { pg_psql_with -c "$1"; }

# pg_psql_with ARG...: psql as pg_psql runs it, with ARG... for what to run (-f FILE, -v
# NAME=VALUE and a script on stdin).
pg_psql_with() {
  "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$HOST" -p "$PG_PORT" -U postgres -d "${PG_DB:-postgres}" "$@"
}

# ---------------------------------------------------------------- builds

# cargo_exe KIND NAME JSONFILE -> the executable of that target in cargo's JSON messages
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

# build_intake: sets INTAKE_BIN to the binary to measure: the one INTAKE_BIN names, or the
# shipped binary built now (cargo build --profile dist --bins: fat LTO, as the static build, the
# .deb and the container image). Dies unless it is executable.
# Cargo prints JSON on stdout (the executable's path is read from it) and renders its
# compiler messages on stderr as usual.
build_intake() {
  if [ -n "${INTAKE_BIN:-}" ]; then
    log "using INTAKE_BIN=$INTAKE_BIN (no build)"
  else
    log "building intake (cargo build --profile dist --bins)"
    run_bg cargo build --profile dist --bins --message-format=json-render-diagnostics \
      >"$WORK/build-bins.json" || die "cargo build failed"
    INTAKE_BIN="$(cargo_exe bin intake "$WORK/build-bins.json")"
    [ -n "$INTAKE_BIN" ] || INTAKE_BIN="$ROOT/target/dist/intake"
  fi
  [ -x "$INTAKE_BIN" ] || die "no intake binary at $INTAKE_BIN"
}

# build_bench NAME: builds the harness-less bench target benches/NAME.rs and prints its path.
# BENCH_PROFILE picks the profile (default release): `cargo build --release` rather than
# `cargo bench --no-run`, whose bench profile would compile the library once more, while this
# shares the README build's. CI's soak builds its helpers with BENCH_PROFILE=dev, which shares
# `cargo test`'s build instead (seconds, against minutes for a release build of the
# benchmarks' dev-dependencies): at the soak's pace a debug receiver and debug readers keep up.
build_bench() {
  local name="$1" profile="${BENCH_PROFILE:-release}" exe
  log "building $name (cargo build --profile $profile --bench $name)"
  cargo build --profile "$profile" --bench "$name" --message-format=json-render-diagnostics \
    >"$WORK/build-$name.json" || die "cargo build --profile $profile --bench $name failed"
  exe="$(cargo_exe bench "$name" "$WORK/build-$name.json")"
  { [ -n "$exe" ] && [ -x "$exe" ]; } || die "could not find the $name executable in cargo's JSON output"
  echo "$exe"
}

# ---------------------------------------------------------------- intake

# init_intake DATA_DIR [ARG...]: intake init (owner bench@example.com) into DATA_DIR, with the
# further ARGs (say --config FILE); sets TOKEN, the owner's API token.
init_intake() {
  local dir="$1"
  shift
  mkdir -p "$dir"
  log "intake: init --data-dir $dir $*"
  "$INTAKE_BIN" init --data-dir "$dir" "$@" --owner-email bench@example.com --json >"$WORK/init.json" \
    || die "intake init failed; it printed: $(cat "$WORK/init.json")"
  TOKEN="$(python3 -c 'import json,sys
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("{"):
        print(json.loads(line)["token"]); break' "$WORK/init.json")" \
    || die "intake init printed no JSON with a token: $(cat "$WORK/init.json")"
  [ -n "$TOKEN" ] || die "intake init printed no JSON line with a token; it printed: $(cat "$WORK/init.json")"
}

# create_endpoint ADDR: creates the endpoint "bench" through the management API of the intake
# at ADDR with the owner's TOKEN; sets SLUG and SANDBOX_KEY.
create_endpoint() {
  local addr="$1" code
  log "intake: creating endpoint 'bench'"
  code="$(curl -s -o "$WORK/endpoint.json" -w '%{http_code}' -X POST "http://$addr/api/v1/manage/endpoints" \
    -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -d '{"name":"bench"}')" || code=000
  [ "$code" = 201 ] || die "intake: creating the endpoint answered $code: $(cat "$WORK/endpoint.json" 2>/dev/null || true)"
  read -r SLUG SANDBOX_KEY < <(python3 -c 'import json,sys
d = json.load(open(sys.argv[1]))
if "slug" not in d and isinstance(d.get("endpoint"), dict):
    d = d["endpoint"]
print(d["slug"], d["sandbox_key"])' "$WORK/endpoint.json") \
    || die "intake: endpoint answer lacks slug/sandbox_key: $(cat "$WORK/endpoint.json")"
  { [ -n "${SLUG:-}" ] && [ -n "${SANDBOX_KEY:-}" ]; } || die "intake: empty slug or sandbox_key"
}

# ---------------------------------------------------------------- the ingest load

# post_load_cmd URL KEY THREADS CONNECTIONS: sets POST_LOAD to the command of the ingest load:
# wrk with benches/post.lua (keep-alive POSTs of the ~1 KB record, KEY as the bearer key; an
# empty KEY sends none) against URL for DURATION. Its report ends with post.lua's "key value"
# lines (requests, rps, p50_ms, p99_ms, non2xx, socket_errors, body_bytes). The command is
# wrk itself (through env), so its PID is wrk's.
post_load_cmd() {
  POST_LOAD=(env "PATH_TO_POST=/${1#http://*/}" "INTAKE_KEY=$2"
    wrk -t"$3" -c"$4" -d"$DURATION" --latency -s "$ROOT/benches/post.lua" "$1")
}

# paced_post_load NAME URL KEY: the paced ingest load (benches/post_paced.lua: CONNECTIONS
# connections, each pausing DELAY_MS before every POST of the ~1 KB record, KEY as the bearer
# key) against URL for DURATION; wrk's report, ending with post.lua's figures, goes to
# $WORK/NAME.wrk.
paced_post_load() {
  env BENCH_DIR="$ROOT/benches" DELAY_MS="$DELAY_MS" "PATH_TO_POST=/${2#http://*/}" \
    "INTAKE_KEY=$3" wrk -t2 -c"$CONNECTIONS" -d"$DURATION" --latency \
    -s "$ROOT/benches/post_paced.lua" "$2" >"$WORK/$1.wrk"
}

# post_load_run NAME RECORDS_PER_REQUEST [SETUP]: a fresh server and data dir under $WORK/NAME,
# an endpoint, one probe, then `SETUP ADDR` if given (a function that changes the endpoint, e.g.
# sets a schema), then the ingest load for DURATION (RECORDS_PER_REQUEST above 1: batches of
# that many copies as NDJSON); its figures go to FIG[NAME.*] (requests rps p50_ms p99_ms non2xx
# socket_errors body_bytes records_per_request records_s writer). The caller declares FIG.
post_load_run() {
  local name="$1" per="$2" setup="${3:-}" figure
  init_intake "$WORK/$name"
  local port addr
  port="$(free_port)"
  addr="$HOST:$port"
  start_server "intake-$name" "$port" 30 "${SERVE_ENV[@]}" "$INTAKE_BIN" serve \
    --data-dir "$WORK/$name" --listen "$addr"
  local pid="$SRV_PID" super="$SRV_SUPER" server_log="$SRV_LOG"
  create_endpoint "$addr"
  local url="http://$addr/api/v1/data/$SLUG"
  probe "$name" "$url" "$SANDBOX_KEY"
  [ -z "$setup" ] || "$setup" "$addr"
  post_load_cmd "$url" "$SANDBOX_KEY" "$THREADS" "$CONNECTIONS"
  # POST_LOAD is `env VAR=... wrk ...`: BATCH joins its variables.
  local load=("${POST_LOAD[0]}" "BATCH=$per" "${POST_LOAD[@]:1}")
  log "$name: ${load[*]}"
  run_bg "${load[@]}" >"$WORK/$name.wrk"
  cat "$WORK/$name.wrk" >&2
  stop_server "intake-$name" "$pid" "$super" 15
  for figure in requests rps p50_ms p99_ms non2xx socket_errors body_bytes records_per_request; do
    FIG[$name.$figure]="$(kv "$WORK/$name.wrk" "$figure")"
  done
  FIG[$name.records_s]="$(awk -v r="${FIG[$name.rps]}" -v n="$per" 'BEGIN { printf "%.0f", r * n }')"
  FIG[$name.writer]="$(grep -o 'ingest writer stopped: .*' "$server_log" | sed 's/^ingest writer stopped: //' | tail -n 1 || true)"
}

# probe NAME URL KEY: one POST of a small record (KEY as the bearer key, none when empty);
# dies unless the answer is 2xx
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

# ---------------------------------------------------------------- reports

# machine_facts: sets NPROC, CPU_MODEL and REV (the commit, git describe) for a report. REV is
# the commit the intake binary names (`intake --version`) when there is one: INTAKE_BIN may be
# a build of another commit than the tree's.
machine_facts() {
  NPROC="$(nproc)"
  CPU_MODEL="$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
  [ -n "$CPU_MODEL" ] || CPU_MODEL="unknown"
  REV="$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
  local built=""
  if [ -n "${INTAKE_BIN:-}" ] && [ -x "$INTAKE_BIN" ]; then
    built="$("$INTAKE_BIN" --version 2>/dev/null | sed -n 's/.*(commit \([^;]*\);.*/\1/p')"
  fi
  [ -z "$built" ] || REV="$built"
}

# publish_report FILE: prints the Markdown report FILE and copies it to RESULTS_FILE.
publish_report() {
  mkdir -p "$(dirname "$RESULTS_FILE")"
  cp "$1" "$RESULTS_FILE"
  echo
  cat "$1"
  log "written to ${RESULTS_FILE#"$ROOT"/}"
}

# ---------------------------------------------------------------- webhook drivers

# run_receiver_driver DRIVER RESULTS_FILE: builds intake (or takes INTAKE_BIN) and the webhook
# receiver (benches/webhook_receiver.rs), then runs the Python driver benches/DRIVER with
# both in a temporary directory that is removed on exit; the driver writes RESULTS_FILE.
run_receiver_driver() {
  local driver="$1" results="$2" receiver
  require python3
  ensure_wrk
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/intake-${driver%.py}.XXXXXX")"
  cleanup_on_exit 50
  build_intake
  receiver="$(build_bench webhook_receiver)"
  BENCH_DIR="$ROOT/benches" python3 "$ROOT/benches/$driver" \
    --intake "$INTAKE_BIN" --receiver "$receiver" --work "$WORK" --results "$results"
}
