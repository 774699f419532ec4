#!/usr/bin/env bash
# Search benchmark: intake's search API vs. PostgreSQL 15 + pg_trgm, same data, same run.
#
# 1. benches/search_gen.py makes RECORDS seeded JSON records (~500 bytes each).
# 2. PostgreSQL: a throw-away cluster (initdb in a temp dir, pg_ctl on 127.0.0.1 and a
#    free port, never the system cluster), table records(id, created_at, payload jsonb),
#    COPY, btree on created_at, GIN (lower(payload::text) gin_trgm_ops) (timed),
#    VACUUM ANALYZE, and the hit count of every query.
# 3. intake: init, serve, one endpoint, every record POSTed (benches/search_bench.py
#    load-intake: asyncio, keep-alive connections; every answer must be 202), then
#    SIGTERM, delete <data_dir>/search, start again and time the index rebuild from its
#    log line "search index rebuilt: N records in S s"; du -sb of <data_dir>/search.
# 4. The 50 queries of benches/search_queries.py: one warm-up pass, then REPS rounds,
#    one query at a time on one keep-alive connection, against intake, then PostgreSQL,
#    from Python; then NATIVE_REQUESTS of each query through C clients, wrk
#    (benches/search_wrk.lua) against intake and pgbench against PostgreSQL.
# 5. A Markdown report on stdout and in benches/results/search-latest.md.
#
# Usage (from the repo root):
#   bash benches/search.sh
#   RECORDS=20000 bash benches/search.sh          # a quick check
#   RECORDS=20000 ONLY=pg bash benches/search.sh  # PostgreSQL alone
#
# Env:
#   RECORDS      records in the data set                   (default 1000000)
#   REPS         timed rounds over the 50 queries          (default 20)
#   NATIVE_REQUESTS  requests per query through wrk and pgbench (default 200)
#   ONLY         all | intake | pg                         (default all)
#   SEED         generator seed                            (default 20240101)
#   CONNECTIONS  keep-alive connections of the intake load (default 64)
#   PIPELINE     HTTP/1.1 pipeline depth of the intake load (default 4)
#   PLAN_CACHE_MODE  PostgreSQL plan_cache_mode of the timed session
#                    (default force_custom_plan; auto or force_generic_plan)
#   INTAKE_BIN   use this intake binary instead of building one (optional)
#   RESULTS_FILE where to write the report (default benches/results/search-latest.md)
#
# Needs python3 and curl; installs psycopg (pip), wrk and PostgreSQL (apt-get: wrk, postgresql,
# postgresql-contrib) when they are missing. All traffic goes to 127.0.0.1 only. The
# trap stops every process this script started (PostgreSQL included) and removes its
# temporary directory on any exit, Ctrl-C included.
set -euo pipefail

RECORDS="${RECORDS:-1000000}"
REPS="${REPS:-20}"
NATIVE_REQUESTS="${NATIVE_REQUESTS:-200}"
ONLY="${ONLY:-all}"
SEED="${SEED:-20240101}"
CONNECTIONS="${CONNECTIONS:-64}"
PIPELINE="${PIPELINE:-4}"
PLAN_CACHE_MODE="${PLAN_CACHE_MODE:-force_custom_plan}"
HOST=127.0.0.1

case "$ONLY" in
  all) RUN_INTAKE=1; RUN_PG=1 ;;
  intake) RUN_INTAKE=1; RUN_PG=0 ;;
  pg) RUN_INTAKE=0; RUN_PG=1 ;;
  *) echo "search.sh: ONLY must be all, intake or pg (got '$ONLY')" >&2; exit 2 ;;
esac
case "$RECORDS" in
  '' | *[!0-9]*) echo "search.sh: RECORDS must be a positive integer (got '$RECORDS')" >&2; exit 2 ;;
esac
[ "$RECORDS" -gt 0 ] || { echo "search.sh: RECORDS must be positive" >&2; exit 2; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BENCH_PY="$ROOT/benches/search_bench.py"
GEN_PY="$ROOT/benches/search_gen.py"
RESULTS_DIR="$ROOT/benches/results"
RESULTS_FILE="${RESULTS_FILE:-$RESULTS_DIR/search-latest.md}"

T_START="$(date +%s)"
LOADAVG_START="$(cut -d' ' -f1-3 /proc/loadavg)"
log() { echo "search.sh: [$(( $(date +%s) - T_START ))s] $*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"

# ---------------------------------------------------------------- cleanup

WORK="$(mktemp -d "${TMPDIR:-/tmp}/intake-search-bench.XXXXXX")"
SERVER_PIDS=()   # intake servers started by this script
SUPER_PIDS=()    # their python supervisors (background jobs of this shell)
CHILD_PID=""     # a running helper (load, timing)
PG_DATA=""       # the PostgreSQL cluster's data directory, once initdb ran
PG_STARTED=0

as_pg() { # run a PostgreSQL server program as the postgres OS user when we are root
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

stop_pg() {
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

cleanup() {
  local pid
  if [ -n "$CHILD_PID" ]; then
    kill -TERM "$CHILD_PID" 2>/dev/null || true
    wait "$CHILD_PID" 2>/dev/null || true
  fi
  stop_servers 100 "${SERVER_PIDS[@]}"
  for pid in "${SUPER_PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  stop_pg
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# run_bg CMD...: run a helper in the background and wait for it, so that a signal to
# this script is handled at once (the trap also stops the helper).
run_bg() {
  local rc=0
  "$@" &
  CHILD_PID=$!
  wait "$CHILD_PID" || rc=$?
  CHILD_PID=""
  return "$rc"
}

# ---------------------------------------------------------------- tools

SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
APT_UPDATED=0
apt_install() {
  if [ "$(id -u)" -ne 0 ] && [ -z "$SUDO" ]; then
    die "need to apt-get install $*, but we are not root (no sudo either)"
  fi
  if [ "$APT_UPDATED" = 0 ]; then
    $SUDO apt-get update >&2
    APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y "$@" >&2
}

command -v python3 >/dev/null || die "python3 is required"
command -v curl >/dev/null || die "curl is required"

if [ "$RUN_PG" = 1 ]; then
  if ! python3 -c 'import psycopg' 2>/dev/null; then
    log "psycopg not found; pip install 'psycopg[binary]'"
    python3 -m pip install --quiet "psycopg[binary]" >&2 || die "pip install psycopg[binary] failed"
  fi
  pg_bin_dir() {
    local d
    d="$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
    if [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; fi
  }
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
fi

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# ---------------------------------------------------------------- data

DATA="$WORK/gen"
log "generating $RECORDS records (seed $SEED)"
run_bg python3 "$GEN_PY" --records "$RECORDS" --seed "$SEED" --out "$DATA" >"$WORK/gen.json" \
  || die "search_gen.py failed"
log "generated: $(cat "$WORK/gen.json")"

# ---------------------------------------------------------------- PostgreSQL

if [ "$RUN_PG" = 1 ]; then
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
  # Settings for a 2-core, 24 GiB machine doing this read benchmark: enough shared
  # buffers to hold the table and its indexes, a large maintenance_work_mem for the GIN
  # build, JIT off (it only adds compile time to these short queries).
  PG_OPTS="-c listen_addresses=$HOST -c port=$PG_PORT -c unix_socket_directories=$PG_DIR"
  PG_OPTS+=" -c shared_buffers=2GB -c maintenance_work_mem=1GB -c work_mem=64MB"
  PG_OPTS+=" -c effective_cache_size=16GB -c jit=off -c max_wal_size=8GB"
  PG_OPTS+=" -c checkpoint_timeout=30min -c logging_collector=off"
  PG_STARTED=1
  as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_DIR/server.log" -w -t 120 -o "$PG_OPTS" start \
    >"$WORK/pg_ctl.log" 2>&1 || { cat "$WORK/pg_ctl.log" "$PG_DIR/server.log" >&2; die "pg_ctl start failed"; }
  PG_DSN="host=$HOST port=$PG_PORT user=postgres dbname=postgres"
  log "PostgreSQL listening on $HOST:$PG_PORT"
  run_bg python3 "$BENCH_PY" pg-setup --dsn "$PG_DSN" --copy "$DATA/records.copy" \
    --out "$WORK/pg_setup.json" || die "PostgreSQL setup failed"
  PG_ROWS="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["rows"])' "$WORK/pg_setup.json")"
  [ "$PG_ROWS" = "$RECORDS" ] || die "PostgreSQL holds $PG_ROWS rows, not $RECORDS"
  # The COPY file is no longer needed: free the disk.
  rm -f "$DATA/records.copy"
fi

# --------------------------------------------------------------- intake

# Python helper: spawns a server, writes "pid N" and "startup_ms X" to a state file once
# the port accepts connections (polled every 1 ms, for up to DEADLINE s), then waits for
# the server and exits with its exit code (128+signal if killed by a signal).
SPAWN_PY="$WORK/spawn.py"
cat >"$SPAWN_PY" <<'PY'
import os, socket, subprocess, sys, time

host, port, deadline_s, state, logfile = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
cmd = sys.argv[6:]

def write_state(text):
    tmp = state + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, state)

with open(logfile, "ab") as lf:
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=lf, stderr=subprocess.STDOUT)
    startup_ms = None
    deadline = t0 + deadline_s
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

state_get() { awk -v k="$2" '$1 == k { print $2 }' "$1"; }

# start_server NAME PORT CMD... ; sets SRV_PID, SRV_SUPER, SRV_STARTUP_MS, SRV_LOG
start_server() {
  local name="$1" port="$2"; shift 2
  local state="$WORK/$name.state"
  SRV_LOG="$WORK/$name.log"
  rm -f "$state"
  python3 "$SPAWN_PY" "$HOST" "$port" 600 "$state" "$SRV_LOG" "$@" &
  SRV_SUPER=$!
  SUPER_PIDS+=("$SRV_SUPER")
  for _ in $(seq 1 6100); do
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

forget_pid() {
  local -n arr="$1"
  local kept=() p
  for p in "${arr[@]}"; do
    [ "$p" = "$2" ] || kept+=("$p")
  done
  arr=("${kept[@]}")
}

# stop_server NAME PID SUPERVISOR_PID: SIGTERM, wait (120 s, then SIGKILL)
stop_server() {
  local name="$1" pid="$2" super="$3" rc=0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 1200); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "$name: still running 120 s after SIGTERM; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$super" || rc=$?
  log "$name: exited with status $rc"
  forget_pid SERVER_PIDS "$pid"
  forget_pid SUPER_PIDS "$super"
}

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

if [ "$RUN_INTAKE" = 1 ]; then
  if [ -n "${INTAKE_BIN:-}" ]; then
    log "using INTAKE_BIN=$INTAKE_BIN (no build)"
    [ -x "$INTAKE_BIN" ] || die "INTAKE_BIN=$INTAKE_BIN is not executable"
  else
    log "building intake (cargo build --release --bins)"
    run_bg cargo build --release --bins --message-format=json-render-diagnostics >"$WORK/build-bins.json" \
      || die "cargo build failed"
    INTAKE_BIN="$(cargo_exe bin intake "$WORK/build-bins.json")"
    [ -n "$INTAKE_BIN" ] || INTAKE_BIN="$ROOT/target/release/intake"
    [ -x "$INTAKE_BIN" ] || die "no intake binary at $INTAKE_BIN"
  fi

  I_DATA="$WORK/intake-data"
  mkdir -p "$I_DATA"
  log "intake: init --data-dir $I_DATA"
  "$INTAKE_BIN" init --data-dir "$I_DATA" --owner-email bench@example.com --json >"$WORK/init.json" \
    || die "intake init failed; it printed: $(cat "$WORK/init.json")"
  TOKEN="$(python3 -c 'import json,sys
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("{"):
        print(json.loads(line)["token"]); break' "$WORK/init.json")" \
    || die "intake init printed no JSON with a token: $(cat "$WORK/init.json")"
  [ -n "$TOKEN" ] || die "intake init printed no JSON line with a token"

  I_PORT="$(free_port)"
  I_ADDR="$HOST:$I_PORT"
  start_server intake "$I_PORT" "$INTAKE_BIN" serve --data-dir "$I_DATA" --listen "$I_ADDR"
  I_PID="$SRV_PID"; I_SUPER="$SRV_SUPER"; I_LOG="$SRV_LOG"

  log "intake: creating endpoint 'bench'"
  CODE="$(curl -s -o "$WORK/endpoint.json" -w '%{http_code}' -X POST "http://$I_ADDR/api/v1/manage/endpoints" \
    -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -d '{"name":"bench"}')" || CODE=000
  [ "$CODE" = 201 ] || die "intake: creating the endpoint answered $CODE: $(cat "$WORK/endpoint.json" 2>/dev/null || true)"
  read -r SLUG KEY < <(python3 -c 'import json,sys
d = json.load(open(sys.argv[1]))
if "slug" not in d and isinstance(d.get("endpoint"), dict):
    d = d["endpoint"]
print(d["slug"], d["sandbox_key"])' "$WORK/endpoint.json") \
    || die "intake: endpoint answer lacks slug/sandbox_key: $(cat "$WORK/endpoint.json")"
  { [ -n "${SLUG:-}" ] && [ -n "${KEY:-}" ]; } || die "intake: empty slug or sandbox_key"
  I_URL="http://$I_ADDR/api/v1/data/$SLUG"

  # Search must exist before we spend minutes loading.
  CODE="$(curl -s -o "$WORK/probe.json" -w '%{http_code}' -H "Authorization: Bearer $KEY" \
    "$I_URL/search?q=probe&limit=10&start=2000-01-01")" || CODE=000
  [ "$CODE" = 200 ] || die "intake: GET $I_URL/search answered $CODE: $(cat "$WORK/probe.json" 2>/dev/null || true) (no search in this build?)"

  log "intake: loading $RECORDS records ($CONNECTIONS connections, pipeline depth $PIPELINE)"
  run_bg python3 "$BENCH_PY" load-intake --url "$I_URL" --key "$KEY" --file "$DATA/records.jsonl" \
    --connections "$CONNECTIONS" --pipeline "$PIPELINE" --out "$WORK/load.json" \
    || die "intake: the load did not get a 202 for every record (see above)"

  log "intake: stopping the server, deleting $I_DATA/search, starting again to rebuild the index"
  stop_server intake "$I_PID" "$I_SUPER"
  [ -d "$I_DATA/search" ] || log "warning: there was no $I_DATA/search to delete"
  rm -rf "$I_DATA/search"
  T0="$(date +%s.%N)"
  start_server intake-rebuild "$I_PORT" "$INTAKE_BIN" serve --data-dir "$I_DATA" --listen "$I_ADDR"
  I_PID="$SRV_PID"; I_SUPER="$SRV_SUPER"; I_LOG="$SRV_LOG"
  REBUILT=""
  for _ in $(seq 1 36000); do   # up to an hour
    REBUILT="$(grep -o 'search index rebuilt: [0-9]* records in [0-9.]* s' "$I_LOG" | tail -n 1 || true)"
    [ -n "$REBUILT" ] && break
    kill -0 "$I_PID" 2>/dev/null || { cat "$I_LOG" >&2; die "intake exited during the rebuild"; }
    sleep 0.1
  done
  T1="$(date +%s.%N)"
  [ -n "$REBUILT" ] || die "intake: no 'search index rebuilt' line in its log within an hour"
  log "intake: $REBUILT"
  read -r I_REBUILT_N I_REBUILT_S < <(echo "$REBUILT" | awk '{ print $4, $7 }')
  [ "$I_REBUILT_N" = "$RECORDS" ] || log "warning: intake rebuilt its index over $I_REBUILT_N records, not $RECORDS"
  sync
  I_INDEX_BYTES="$(du -sb "$I_DATA/search" | awk '{ print $1 }')"
  I_DATA_BYTES="$(du -sb "$I_DATA" | awk '{ print $1 }')"
  python3 -c 'import json,sys
n, s, t0, t1, ib, db, su = sys.argv[2:9]
json.dump({"records": int(n), "logged_s": float(s), "wall_s": round(float(t1) - float(t0), 1),
           "index_bytes": int(ib), "data_dir_bytes": int(db), "startup_ms": su}, open(sys.argv[1], "w"))' \
    "$WORK/intake_build.json" "$I_REBUILT_N" "$I_REBUILT_S" "$T0" "$T1" "$I_INDEX_BYTES" "$I_DATA_BYTES" "$SRV_STARTUP_MS"
  log "intake: index $I_INDEX_BYTES bytes (du -sb $I_DATA/search)"

  log "intake: waiting for the server to go idle (tantivy merges segments after the rebuild)"
  wait_idle "$I_PID" 300
  log "intake: $([ "$SETTLED" = 1 ] || echo "NOT ")idle after ${SETTLE_S}s"
  log "intake: timing the queries (warm-up + $REPS rounds)"
  run_bg python3 "$BENCH_PY" time-intake --url "$I_URL" --key "$KEY" --reps "$REPS" \
    --out "$WORK/intake_times.json" || die "intake: timing failed"
  ensure_wrk
  log "intake: timing the queries through wrk (the first $NATIVE_REQUESTS requests of 1 s each)"
  run_bg python3 "$BENCH_PY" time-native --url "$I_URL" --key "$KEY" \
    --requests "$NATIVE_REQUESTS" --out "$WORK/intake_native.json" || die "intake: wrk timing failed"
fi

if [ "$RUN_PG" = 1 ]; then
  log "PostgreSQL: timing the queries (warm-up + $REPS rounds, plan_cache_mode=$PLAN_CACHE_MODE)"
  run_bg python3 "$BENCH_PY" time-pg --dsn "$PG_DSN" --reps "$REPS" \
    --plan-cache-mode "$PLAN_CACHE_MODE" --out "$WORK/pg_times.json" || die "PostgreSQL: timing failed"
  [ -x "$PG_BIN/pgbench" ] || die "no pgbench in $PG_BIN"
  log "PostgreSQL: timing the queries through pgbench (the first $NATIVE_REQUESTS transactions of 1 s each)"
  run_bg python3 "$BENCH_PY" time-native --pgbench "$PG_BIN/pgbench" --pg-host "$HOST" \
    --pg-port "$PG_PORT" --requests "$NATIVE_REQUESTS" --out "$WORK/pg_native.json" \
    || die "PostgreSQL: pgbench timing failed"
fi

if [ "$RUN_INTAKE" = 1 ]; then
  stop_server intake "$I_PID" "$I_SUPER"
fi
stop_pg

# --------------------------------------------------------------- report

NPROC="$(nproc)"
CPU_MODEL="$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
MEM_GB="$(awk '/^MemTotal/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo)"
REV="$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
ELAPSED="$(( $(date +%s) - T_START ))"
mkdir -p "$(dirname "$RESULTS_FILE")"
python3 "$BENCH_PY" report --meta "$DATA/meta.json" --load "$WORK/load.json" \
  --intake "$WORK/intake_times.json" --intake-build "$WORK/intake_build.json" \
  --pg-setup "$WORK/pg_setup.json" --pg-times "$WORK/pg_times.json" \
  --intake-native "$WORK/intake_native.json" --pg-native "$WORK/pg_native.json" \
  --date "$(date -u +%Y-%m-%dT%H:%M:%SZ)" --commit "$REV" \
  --machine "$NPROC CPUs (nproc), ${CPU_MODEL:-unknown}, ${MEM_GB} GiB RAM (RECORDS=$RECORDS, REPS=$REPS, ONLY=$ONLY)" \
  --elapsed "$ELAPSED" --loadavg "$LOADAVG_START" \
  --out "$RESULTS_FILE"
log "written to ${RESULTS_FILE#"$ROOT"/}"
