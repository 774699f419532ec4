#!/usr/bin/env bash
# PostgreSQL backend benchmark (issue #21, "Performance"): intake on PostgreSQL against the
# database's own durable INSERT ceiling and against intake on redb, same machine, same run.
#
# 1. A throwaway PostgreSQL cluster (initdb in a temp dir, pg_ctl on 127.0.0.1 and a free
#    port; fsync and synchronous_commit on, as intake requires).
# 2. The ceiling: pgbench inserting the ~1 KB record of benches/post.lua, a fresh id per
#    transaction, one row per transaction, into a table like intake's `records` (partition
#    bigint, id bytea, updated_at bigint, payload bytea, folded text, PK (partition, id)):
#    once without and once with the gin_trgm_ops index on folded; `pgbench -c CONNECTIONS
#    -j THREADS -T DURATION -M prepared`; durable single-row INSERTs per second.
# 3. intake on PostgreSQL, 1 node: init --config, serve, one endpoint, the wrk POST load
#    (benches/post.lua) at CONNECTIONS connections for DURATION.
# 4. intake on PostgreSQL, 2 nodes on the same database (the second data dir holds a copy of
#    the first's master.key): two wrk processes at once, half the connections each.
# 5. intake on redb: the same wrk load.
#    Steps 2 to 5 run ROUNDS times, interleaved; the report gives each round and the median.
# 5b. The trigram index's cost per row three ways (step `index`, once, needs `ceiling`):
#    INDEX_ROWS copies of the ceiling's record inserted in durable transactions of
#    INDEX_BATCH rows, into a table without the index and into one with it (what a background
#    indexer following the store would pay), then the index built in bulk over a table of
#    them (CREATE INDEX, the cheapest way there is): PostgreSQL's CPU per row of each.
# 6. CPU per request of every run: utime+stime from /proc of intake and of all PostgreSQL
#    processes (the postmaster's reaped children included), of the load generator, and of
#    the whole machine, before and after; from them an estimate for a larger machine.
# 7. Search: RECORDS records of benches/search_gen.py loaded into intake on PostgreSQL and
#    intake on redb (benches/search_bench.py load-intake), then the 50 queries of
#    benches/search_queries.py on both: through wrk (benches/search_wrk.lua, the first page)
#    and through search_bench.py's Python client (REPS rounds, following next_cursor).
# 8. A Markdown report on stdout and in benches/results/postgres-latest.md
#    (benches/postgres_report.py).
#
# Usage (from the repo root):
#   bash benches/postgres.sh                               # about 25 minutes on 2 cores
#   RECORDS=20000 DURATION=5s ROUNDS=1 bash benches/postgres.sh   # a quick check of every step
#   DURATION=5s STEPS=ceiling bash benches/postgres.sh     # the pgbench ceiling alone
#   DURATION=20s ROUNDS=1 STEPS="ceiling index" bash benches/postgres.sh   # the index's cost
#
# Env:
#   DURATION     length of each write run (pgbench and wrk)       (default 30s)
#   CONNECTIONS  connections of each write run (pgbench, wrk)     (default 64)
#   THREADS      pgbench -j and wrk -t                            (default 2)
#   ROUNDS       rounds of the write runs (ceiling, pg1, pg2, redb), interleaved; the
#                report gives each round and the median           (default 3)
#   STEPS        which steps to run, of: ceiling pg1 pg2 redb index search (index needs
#                ceiling)                                         (default all six)
#   INDEX_ROWS   rows of the index step                           (default 100000)
#   INDEX_BATCH  rows per transaction of its batches              (default 1000)
#   RECORDS      records of the search data set                   (default 1000000)
#   REPS         rounds of the Python client over the 50 queries  (default 10)
#   NATIVE_REQUESTS  requests per query through wrk               (default 200)
#   NATIVE_SECONDS   most seconds per query through wrk (a query slower than that gets no
#                figure there; wrk runs that long for every query, however fast; the
#                Python client times every query)                (default 2)
#   SEED         search_gen.py's seed (the query set was chosen for the default)
#                                                                 (default 20240101)
#   LOAD_CONNECTIONS, PIPELINE  connections and pipeline depth of the search data load
#                                                                 (default 64 and 4)
#   POOL_SIZE    [storage.postgres] pool_size of the nodes        (default: intake's)
#   INGEST_WRITERS  [storage.postgres] ingest_writers of the nodes (default: intake's)
#   IDLE_TIMEOUT most seconds to wait for a server to go idle after a load (default 900)
#   INTAKE_BIN   use this intake binary instead of building one (optional)
#   RESULTS_FILE where to write the report (default benches/results/postgres-latest.md)
#   RESULTS_JSON also write the key figures there as JSON (optional)
#
# Needs python3, curl and psql; installs wrk and PostgreSQL (apt-get: wrk, postgresql,
# postgresql-contrib) when they are missing. All traffic goes to 127.0.0.1. The trap stops
# every process this script started (PostgreSQL included) and removes its temporary
# directory on any exit, Ctrl-C included.
set -euo pipefail

DURATION="${DURATION:-30s}"
CONNECTIONS="${CONNECTIONS:-64}"
THREADS="${THREADS:-2}"
ROUNDS="${ROUNDS:-3}"
STEPS="${STEPS:-ceiling pg1 pg2 redb index search}"
INDEX_ROWS="${INDEX_ROWS:-100000}"
INDEX_BATCH="${INDEX_BATCH:-1000}"
RECORDS="${RECORDS:-1000000}"
REPS="${REPS:-10}"
NATIVE_REQUESTS="${NATIVE_REQUESTS:-200}"
NATIVE_SECONDS="${NATIVE_SECONDS:-2}"
SEED="${SEED:-20240101}"
LOAD_CONNECTIONS="${LOAD_CONNECTIONS:-64}"
PIPELINE="${PIPELINE:-4}"
POOL_SIZE="${POOL_SIZE:-}"
INGEST_WRITERS="${INGEST_WRITERS:-}"
IDLE_TIMEOUT="${IDLE_TIMEOUT:-900}"

# shellcheck source=benches/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RESULTS_FILE="${RESULTS_FILE:-$ROOT/benches/results/postgres-latest.md}"
BENCH_PY="$ROOT/benches/search_bench.py"

T_START="$(date +%s)"
LOADAVG_START="$(cut -d' ' -f1-3 /proc/loadavg)"
log() { echo "postgres.sh: [$(( $(date +%s) - T_START ))s] $*" >&2; }

# DURATION for pgbench, which takes whole seconds: 30, 30s, 2m or 1h.
case "$DURATION" in
  *[!0-9smh]* | '' | [smh]*) die "DURATION must be like 30s, 2m or 1h (got '$DURATION')" ;;
  *s) DURATION_S="${DURATION%s}" ;;
  *m) DURATION_S=$(( ${DURATION%m} * 60 )) ;;
  *h) DURATION_S=$(( ${DURATION%h} * 3600 )) ;;
  *) DURATION_S="$DURATION" ;;
esac
case "$DURATION_S" in '' | *[!0-9]*) die "DURATION must be like 30s, 2m or 1h (got '$DURATION')" ;; esac
for n in CONNECTIONS THREADS ROUNDS RECORDS INDEX_ROWS INDEX_BATCH REPS NATIVE_REQUESTS NATIVE_SECONDS LOAD_CONNECTIONS PIPELINE IDLE_TIMEOUT; do
  case "${!n}" in '' | *[!0-9]* | 0) die "$n must be a positive integer (got '${!n}')" ;; esac
done
[ "$CONNECTIONS" -ge 2 ] || die "CONNECTIONS must be at least 2 (the two-node run halves it)"
for step in $STEPS; do
  case "$step" in
    ceiling | pg1 | pg2 | redb | index | search) ;;
    *) die "STEPS takes ceiling, pg1, pg2, redb, index and search (got '$step')" ;;
  esac
done
wants() { case " $STEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
if wants index && ! wants ceiling; then die "STEPS: index needs ceiling (its database and record)"; fi

# ---------------------------------------------------------------- cleanup

WORK="$(mktemp -d "${TMPDIR:-/tmp}/intake-pg-bench.XXXXXX")"
FIG="$WORK/figures"      # what the report is made of (benches/postgres_report.py reads it)
mkdir -p "$FIG"
WRK_PIDS=()              # the two wrk processes of the two-node run, while they run

stop_helpers() {
  local pid
  for pid in "${WRK_PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  # The intake nodes first: they hold connections to the cluster.
  stop_servers 100 "${SERVER_PIDS[@]}"
  pg_stop
}
cleanup_on_exit 100 stop_helpers

# ---------------------------------------------------------------- tools

require python3 curl
ensure_wrk
pg_find
command -v "$PG_BIN/psql" >/dev/null || die "no psql in $PG_BIN"
[ -x "$PG_BIN/pgbench" ] || die "no pgbench in $PG_BIN"
if wants pg1 || wants pg2 || wants redb || wants search; then build_intake; fi

# ---------------------------------------------------------------- CPU accounting

# cpu_snapshot FILE PID...: "key value" lines of the CPU used so far, in clock ticks: by the
# intake processes PID... (intake), by PostgreSQL (pg: the postmaster with its reaped
# children, and every live child), by the programs this script ran and reaped (client: its
# cutime + cstime, i.e. wrk and pgbench), and by the whole machine (busy and total, from
# /proc/stat), with a monotonic clock (seconds).
cpu_snapshot() {
  local out="$1"
  shift
  python3 - "$out" "$$" "$PG_DATA/postmaster.pid" "$@" <<'PY'
import os, sys, time

def fields(pid):
    """/proc/PID/stat's fields after the command name: [0] is the state, [1] the ppid,
    [11] utime, [12] stime, [13] cutime, [14] cstime; None once the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None

out, shell, pidfile = sys.argv[1:4]
intake = 0
for pid in sys.argv[4:]:
    f = fields(pid)
    if f:
        intake += int(f[11]) + int(f[12])
pg = 0
try:
    with open(pidfile) as f:
        postmaster = f.readline().strip()
except OSError:
    postmaster = ""
if postmaster:
    f = fields(postmaster)
    if f:
        pg += sum(int(v) for v in f[11:15])
    for name in os.listdir("/proc"):
        if name.isdigit() and name != postmaster:
            f = fields(name)
            if f and f[1] == postmaster:
                pg += int(f[11]) + int(f[12])
f = fields(shell)
client = int(f[13]) + int(f[14]) if f else 0
with open("/proc/stat") as fh:
    cpu = [int(v) for v in fh.readline().split()[1:]]
# user nice system idle iowait irq softirq steal (guest time is inside user already)
busy = cpu[0] + cpu[1] + cpu[2] + cpu[5] + cpu[6] + cpu[7]
with open(out, "w") as fh:
    fh.write(f"time {time.monotonic():.3f}\nintake {intake}\npg {pg}\nclient {client}\n"
             f"machine_busy {busy}\nmachine_total {busy + cpu[3] + cpu[4]}\n")
PY
}

# settle: a checkpoint, so that no run inherits the previous one's dirty pages, then a pause.
settle() {
  pg_psql "CHECKPOINT" >/dev/null
  sleep 2
}

# ---------------------------------------------------------------- PostgreSQL

# Durability as intake requires it (fsync, synchronous_commit and full_page_writes on, which
# are PostgreSQL's defaults; intake refuses to start otherwise); room for pgbench's and two
# nodes' connections; memory and WAL sized for this 2-core, 24 GiB machine, so that the runs
# measure commits, not checkpoints.
pg_start -c fsync=on -c synchronous_commit=on -c full_page_writes=on -c max_connections=300 \
  -c shared_buffers=2GB -c effective_cache_size=16GB -c maintenance_work_mem=1GB -c jit=off \
  -c max_wal_size=8GB -c checkpoint_timeout=30min
[ "$(pg_psql "SHOW fsync")" = on ] || die "fsync is not on"
[ "$(pg_psql "SHOW synchronous_commit")" = on ] || die "synchronous_commit is not on"
{
  echo "pg_version $PG_VERSION"
  for setting in fsync synchronous_commit full_page_writes wal_sync_method shared_buffers \
    max_wal_size checkpoint_timeout commit_delay; do
    echo "setting.$setting $(pg_psql "SHOW $setting")"
  done
  echo "fsync_ms $(fsync_ms "$WORK")"
} >"$FIG/pg.txt"

# The record of the wrk load, from benches/post.lua (between `local body = [[` and `]]`).
BODY="$(sed -n '/^local body = \[\[$/,/^\]\]$/p' "$ROOT/benches/post.lua" | sed '1d;$d')"
[ -n "$BODY" ] || die "no record body found in benches/post.lua"

# ---------------------------------------------------------------- 2. the ceiling

# The columns, collation and key of intake's records (src/store/postgres/migrations), for the
# ceiling's tables.
RECORDS_COLUMNS='partition bigint NOT NULL, id bytea NOT NULL, updated_at bigint NOT NULL,
  payload bytea NOT NULL, folded text COLLATE "C" NOT NULL, PRIMARY KEY (partition, id)'
# And the method and column of its trigram index, after `CREATE INDEX name ON table`.
TRIGRAM_INDEX='USING gin (folded gin_trgm_ops)'

# ceiling NAME INDEX: pgbench's durable single-row INSERTs into a fresh copy of intake's
# records table (INDEX 1: with its gin_trgm_ops index on folded). Writes NAME.pgbench (pgbench's
# report), NAME.lat (latency p50/p99 from pgbench's per-transaction log), NAME.rows and the CPU
# snapshots NAME.cpu0/1.
ceiling() {
  local name="$1" index="$2" logs="$WORK/pgbench-$1"
  PG_DB=ceiling pg_psql "DROP TABLE IF EXISTS records"
  PG_DB=ceiling pg_psql "CREATE TABLE records ($RECORDS_COLUMNS)"
  if [ "$index" = 1 ]; then
    PG_DB=ceiling pg_psql "CREATE INDEX records_folded ON records $TRIGRAM_INDEX"
  fi
  settle
  mkdir -p "$logs"
  log "ceiling ($name): pgbench -c $CONNECTIONS -j $THREADS -T $DURATION_S -M prepared"
  cpu_snapshot "$FIG/$name.cpu0"
  run_bg "$PG_BIN/pgbench" -n -h "$HOST" -p "$PG_PORT" -U postgres -c "$CONNECTIONS" \
    -j "$THREADS" -T "$DURATION_S" -M prepared -f "$WORK/insert.sql" \
    -D "payload=$PAYLOAD_HEX" -D "folded=$FOLDED" -l --log-prefix "$logs/log" ceiling \
    >"$FIG/$name.pgbench" 2>"$WORK/$name.pgbench.err" \
    || { cat "$WORK/$name.pgbench.err" >&2; die "pgbench failed"; }
  cpu_snapshot "$FIG/$name.cpu1"
  cat "$FIG/$name.pgbench" >&2
  # Latency of every transaction: pgbench -l logs "client_id transaction_no time_us ...".
  python3 - "$logs" >"$FIG/$name.lat" <<'PY'
import os, sys
lat = []
for name in os.listdir(sys.argv[1]):
    with open(os.path.join(sys.argv[1], name)) as f:
        lat += [int(line.split()[2]) for line in f if line.strip()]
lat.sort()
def rank(p):  # nearest rank
    return lat[max(0, -(-len(lat) * p // 100) - 1)] / 1000.0
print(f"logged {len(lat)}")
if lat:
    print(f"p50_ms {rank(50):.3f}\np99_ms {rank(99):.3f}")
PY
  rm -rf "$logs"
  {
    echo "rows $(PG_DB=ceiling pg_psql "SELECT count(*) FROM records")"
    echo "avg_row_bytes $(PG_DB=ceiling pg_psql "SELECT round(avg(length(payload) + octet_length(folded))) FROM records")"
  } >"$FIG/$name.rows"
}

# index_cost: the trigram index's cost per row, three ways (5b above), on the ceiling's
# database and record. Writes index.txt (rows, batch) and the CPU snapshots index.cpu0 to
# index.cpu3 around the batches without the index, those with it, and the bulk build.
index_cost() {
  local rows="$INDEX_ROWS" batch="$INDEX_BATCH" k
  log "index: $rows rows in batches of $batch, without and with the index, then built in bulk"
  PG_DB=ceiling pg_psql_with -v payload="$PAYLOAD_HEX" -v folded="$FOLDED" -v rows="$rows" \
    >/dev/null <<SQL
SET client_min_messages = warning;
DROP TABLE IF EXISTS source, batched_plain, batched_trgm, bulk;
CREATE TABLE source AS SELECT g AS n, 1::bigint AS partition, int8send(g) || int8send(g) AS id,
  g AS updated_at, :'payload'::bytea AS payload, :'folded'::text COLLATE "C" AS folded
  FROM generate_series(1, :rows) AS g;
CREATE INDEX ON source (n);
CREATE TABLE batched_plain ($RECORDS_COLUMNS);
CREATE TABLE batched_trgm ($RECORDS_COLUMNS);
CREATE INDEX batched_trgm_folded ON batched_trgm $TRIGRAM_INDEX;
CREATE TABLE bulk ($RECORDS_COLUMNS);
INSERT INTO bulk SELECT partition, id, updated_at, payload, folded FROM source;
VACUUM ANALYZE source;
VACUUM ANALYZE bulk;
SQL
  # One statement a batch, each its own durable transaction (psql commits each).
  for table in batched_plain batched_trgm; do
    for ((k = 0; k < rows; k += batch)); do
      echo "INSERT INTO $table SELECT partition, id, updated_at, payload, folded FROM source WHERE n > $k AND n <= $((k + batch));"
    done >"$WORK/$table.sql"
  done
  settle
  cpu_snapshot "$FIG/index.cpu0"
  PG_DB=ceiling run_bg pg_psql_with -f "$WORK/batched_plain.sql" >/dev/null
  cpu_snapshot "$FIG/index.cpu1"
  PG_DB=ceiling run_bg pg_psql_with -f "$WORK/batched_trgm.sql" >/dev/null
  cpu_snapshot "$FIG/index.cpu2"
  PG_DB=ceiling pg_psql "CREATE INDEX bulk_folded ON bulk $TRIGRAM_INDEX"
  cpu_snapshot "$FIG/index.cpu3"
  printf "rows %s\nbatch %s\n" "$rows" "$batch" >"$FIG/index.txt"
  PG_DB=ceiling pg_psql "DROP TABLE source, batched_plain, batched_trgm, bulk"
}

# ---------------------------------------------------------------- intake nodes

# pg_node NAME DB: writes WORK/NAME/intake.toml, the config of an intake node on the database
# DB (its data dir WORK/NAME/data, a free port); sets NODE_CONFIG and NODE_ADDR.
pg_node() {
  local name="$1" db="$2" port
  port="$(free_port)"
  mkdir -p "$WORK/$name"
  NODE_CONFIG="$WORK/$name/intake.toml"
  NODE_ADDR="$HOST:$port"
  cat >"$NODE_CONFIG" <<EOF
listen = "$NODE_ADDR"
data_dir = "$WORK/$name/data"

[storage]
backend = "postgres"

[storage.postgres]
url = "host=$HOST port=$PG_PORT user=postgres dbname=$db"
tls = "disable"
${POOL_SIZE:+pool_size = $POOL_SIZE}
${INGEST_WRITERS:+ingest_writers = $INGEST_WRITERS}
EOF
}

# start_pg_node NAME: serves the node pg_node NAME configured; sets SRV_PID, SRV_SUPER, SRV_LOG.
start_pg_node() {
  start_server "$1" "${NODE_ADDR##*:}" 60 "$INTAKE_BIN" serve --config "$NODE_CONFIG"
}

# writer_line LOG -> the ingest writers' account of their run (logged when they stop)
writer_line() { grep -o 'ingest writer stopped: .*' "$1" | sed 's/^ingest writer stopped: //' | tail -n 1 || true; }

# load NAME URL KEY PID...: the wrk POST load against URL, CPU snapshots around it (PID...:
# the intake processes); writes NAME.wrk and NAME.cpu0/1.
load() {
  local name="$1" url="$2" key="$3"
  shift 3
  settle
  log "$name: wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency $url"
  post_load_cmd "$url" "$key" "$THREADS" "$CONNECTIONS"
  cpu_snapshot "$FIG/$name.cpu0" "$@"
  run_bg "${POST_LOAD[@]}" >"$FIG/$name.wrk"
  cpu_snapshot "$FIG/$name.cpu1" "$@"
  cat "$FIG/$name.wrk" >&2
}

# pg_two_nodes NAME: the two-node run NAME: both nodes started afresh, two wrk at once, half
# the connections each, one per node; writes NAME.node1.wrk, NAME.node2.wrk, NAME.cpu0/1 and
# NAME.writer.
pg_two_nodes() {
  local name="$1" half_t half_c rc=0 pid a_pid a_super a_log b_pid b_super b_log
  NODE_CONFIG="$NODE1_CONFIG" NODE_ADDR="$NODE1_ADDR"
  start_pg_node "$name-node1"
  a_pid="$SRV_PID" a_super="$SRV_SUPER" a_log="$SRV_LOG"
  NODE_CONFIG="$NODE2_CONFIG" NODE_ADDR="$NODE2_ADDR"
  start_pg_node "$name-node2"
  b_pid="$SRV_PID" b_super="$SRV_SUPER" b_log="$SRV_LOG"
  probe "$name-node2" "http://$NODE2_ADDR/api/v1/data/$PG_SLUG" "$PG_KEY"
  settle
  half_t=$(( THREADS / 2 > 0 ? THREADS / 2 : 1 ))
  half_c=$(( CONNECTIONS / 2 ))
  log "$name: two wrk -t$half_t -c$half_c -d$DURATION at once, one per node"
  cpu_snapshot "$FIG/$name.cpu0" "$a_pid" "$b_pid"
  post_load_cmd "http://$NODE1_ADDR/api/v1/data/$PG_SLUG" "$PG_KEY" "$half_t" "$half_c"
  "${POST_LOAD[@]}" >"$FIG/$name.node1.wrk" &
  WRK_PIDS+=("$!")
  post_load_cmd "http://$NODE2_ADDR/api/v1/data/$PG_SLUG" "$PG_KEY" "$half_t" "$half_c"
  "${POST_LOAD[@]}" >"$FIG/$name.node2.wrk" &
  WRK_PIDS+=("$!")
  for pid in "${WRK_PIDS[@]}"; do wait "$pid" || rc=$?; done
  WRK_PIDS=()
  [ "$rc" = 0 ] || die "wrk failed (status $rc)"
  cpu_snapshot "$FIG/$name.cpu1" "$a_pid" "$b_pid"
  cat "$FIG/$name.node1.wrk" "$FIG/$name.node2.wrk" >&2
  stop_server "$name-node1" "$a_pid" "$a_super" 30
  stop_server "$name-node2" "$b_pid" "$b_super" 30
  { writer_line "$a_log"; writer_line "$b_log"; } >"$FIG/$name.writer"
}

# redb_run NAME: intake on redb in a fresh data dir, the wrk load; NAME.wrk, NAME.cpu0/1 and
# NAME.writer.
redb_run() {
  local name="$1" dir="$WORK/redb/data" addr pid super
  init_intake "$dir"
  addr="$HOST:$(free_port)"
  start_server "$name" "${addr##*:}" 60 "$INTAKE_BIN" serve --data-dir "$dir" --listen "$addr"
  pid="$SRV_PID" super="$SRV_SUPER"
  create_endpoint "$addr"
  probe "$name" "http://$addr/api/v1/data/$SLUG" "$SANDBOX_KEY"
  load "$name" "http://$addr/api/v1/data/$SLUG" "$SANDBOX_KEY" "$pid"
  stop_server "$name" "$pid" "$super" 30
  writer_line "$SRV_LOG" >"$FIG/$name.writer"
  rm -rf "$WORK/redb"
}

# --------------------------------------------------------------- set-up of the write runs

if wants ceiling; then
  pg_psql "CREATE DATABASE ceiling"
  PG_DB=ceiling pg_psql "CREATE EXTENSION pg_trgm"
  # The payload goes as a parameter, as intake sends it: bytea in hex, and folded, the text
  # search matches (the lower-case record: it is ASCII).
  PAYLOAD_HEX='\x'"$(printf '%s' "$BODY" | od -An -v -tx1 | tr -d ' \n')"
  FOLDED="$(printf '%s' "$BODY" | tr '[:upper:]' '[:lower:]')"
  # A fresh id per transaction, 16 bytes, time first like intake's (microseconds, then 8
  # random bytes), so that inserts land at the right edge of the key as intake's do.
  cat >"$WORK/insert.sql" <<'SQL'
\set r random(1, 9223372036854775806)
INSERT INTO records (partition, id, updated_at, payload, folded)
VALUES (1, int8send((extract(epoch FROM clock_timestamp()) * 1000000)::bigint) || int8send(:r),
        (extract(epoch FROM clock_timestamp()) * 1000000)::bigint, :payload, :folded);
SQL
fi

if wants pg1 || wants pg2; then
  # The first node creates the owner, the endpoint and the key; the second node's data dir
  # holds a copy of that master.key.
  pg_psql "CREATE DATABASE intake"
  pg_node pg-node1 intake
  NODE1_CONFIG="$NODE_CONFIG" NODE1_ADDR="$NODE_ADDR"
  init_intake "$WORK/pg-node1/data" --config "$NODE1_CONFIG"
  start_pg_node pg-setup
  create_endpoint "$NODE1_ADDR"
  probe pg-setup "http://$NODE1_ADDR/api/v1/data/$SLUG" "$SANDBOX_KEY"
  stop_server pg-setup "$SRV_PID" "$SRV_SUPER" 30
  PG_SLUG="$SLUG" PG_KEY="$SANDBOX_KEY"
  pg_node pg-node2 intake
  NODE2_CONFIG="$NODE_CONFIG" NODE2_ADDR="$NODE_ADDR"
  mkdir -p "$WORK/pg-node2/data"
  chmod 0700 "$WORK/pg-node2/data"
  cp -p "$WORK/pg-node1/data/master.key" "$WORK/pg-node2/data/master.key"
fi

# --------------------------------------------------------------- 2.-5. the write runs

# ROUNDS rounds of every write run, interleaved, so that a neighbour's burst or a slow spell of
# the disk hits one round of each rather than all of one kind. Files: KIND.ROUND.*.
for round in $(seq 1 "$ROUNDS"); do
  if wants ceiling; then
    ceiling "ceiling-plain.$round" 0
    ceiling "ceiling-trgm.$round" 1
  fi
  if wants pg1; then
    # A node started for the run and stopped after it, for its writer's account of the run.
    NODE_CONFIG="$NODE1_CONFIG" NODE_ADDR="$NODE1_ADDR"
    start_pg_node "pg1.$round"
    N_PID="$SRV_PID" N_SUPER="$SRV_SUPER" N_LOG="$SRV_LOG"
    load "pg1.$round" "http://$NODE1_ADDR/api/v1/data/$PG_SLUG" "$PG_KEY" "$N_PID"
    stop_server "pg1.$round" "$N_PID" "$N_SUPER" 30
    writer_line "$N_LOG" >"$FIG/pg1.$round.writer"
  fi
  if wants pg2; then pg_two_nodes "pg2.$round"; fi
  if wants redb; then redb_run "redb.$round"; fi
done

if wants index; then index_cost; fi
if wants ceiling; then pg_psql "DROP DATABASE ceiling"; fi
if wants pg1 || wants pg2; then
  echo "avg_row_bytes $(PG_DB=intake pg_psql "SELECT round(avg(length(payload) + octet_length(folded))) FROM records")" \
    >"$FIG/pg.rows"
  pg_psql "DROP DATABASE intake"
fi

# ---------------------------------------------------------------- 7. search

# search_side NAME ADDR: loads the data set into the intake at ADDR (an endpoint of its own),
# waits for it (process SRV_PID) to go idle, then times the queries: NAME-load.json,
# NAME-native.json (wrk), NAME-py.json (Python client), NAME.idle.
search_side() {
  local name="$1" addr="$2" pid="$SRV_PID" url code
  create_endpoint "$addr"
  url="http://$addr/api/v1/data/$SLUG"
  code="$(curl -s -o "$WORK/probe.json" -w '%{http_code}' -H "Authorization: Bearer $SANDBOX_KEY" \
    "$url/search?q=probe&limit=10&start=2000-01-01")" || code=000
  [ "$code" = 200 ] || die "$name: GET $url/search answered $code: $(cat "$WORK/probe.json" 2>/dev/null || true)"
  log "$name: loading $RECORDS records ($LOAD_CONNECTIONS connections, pipeline depth $PIPELINE)"
  run_bg python3 "$BENCH_PY" load-intake --url "$url" --key "$SANDBOX_KEY" --file "$DATA/records.jsonl" \
    --connections "$LOAD_CONNECTIONS" --pipeline "$PIPELINE" --out "$FIG/$name-load.json" \
    || die "$name: the load did not get a 202 for every record (see above)"
  if [ "$name" = search-pg ]; then
    # What autovacuum does in time (it merges the GIN index's pending list and gathers the
    # statistics the planner needs), done now: the queries then meet a settled index, as
    # they meet a settled tantivy index on redb.
    log "$name: VACUUM ANALYZE records"
    PG_DB=search pg_psql "VACUUM ANALYZE records"
  fi
  log "$name: waiting for the server to go idle"
  wait_idle "$pid" "$IDLE_TIMEOUT"
  printf "settled %s\nseconds %s\n" "$SETTLED" "$SETTLE_S" >"$FIG/$name.idle"
  log "$name: $([ "$SETTLED" = 1 ] || echo "NOT ")idle after ${SETTLE_S}s"
  log "$name: timing the queries through wrk ($NATIVE_REQUESTS requests of each, at most $NATIVE_SECONDS s each)"
  run_bg python3 "$BENCH_PY" time-native --url "$url" --key "$SANDBOX_KEY" \
    --requests "$NATIVE_REQUESTS" --seconds "$NATIVE_SECONDS" --out "$FIG/$name-native.json" || die "$name: wrk timing failed"
  log "$name: timing the queries through the Python client (warm-up + $REPS rounds)"
  run_bg python3 "$BENCH_PY" time-intake --url "$url" --key "$SANDBOX_KEY" --reps "$REPS" \
    --out "$FIG/$name-py.json" || die "$name: timing failed"
}

if wants search; then
  DATA="$WORK/gen"
  log "generating $RECORDS records (seed $SEED)"
  run_bg python3 "$ROOT/benches/search_gen.py" --records "$RECORDS" --seed "$SEED" --out "$DATA" \
    >"$WORK/gen.json" || die "search_gen.py failed"
  rm -f "$DATA/records.copy"   # PostgreSQL's COPY file: not used here
  cp "$DATA/meta.json" "$FIG/search-meta.json"

  pg_psql "CREATE DATABASE search"
  pg_node search-pg search
  init_intake "$WORK/search-pg/data" --config "$NODE_CONFIG"
  start_pg_node search-pg
  S_PID="$SRV_PID" S_SUPER="$SRV_SUPER"
  search_side search-pg "$NODE_ADDR"
  stop_server search-pg "$S_PID" "$S_SUPER" 60
  {
    echo "database_bytes $(pg_psql "SELECT pg_database_size('search')")"
    echo "records_bytes $(PG_DB=search pg_psql "SELECT pg_total_relation_size('records')")"
    echo "index_bytes $(PG_DB=search pg_psql "SELECT pg_relation_size('records_folded')")"
  } >"$FIG/search-pg.sizes"
  pg_psql "DROP DATABASE search"

  S_DATA="$WORK/search-redb/data"
  init_intake "$S_DATA"
  S_ADDR="$HOST:$(free_port)"
  start_server search-redb "${S_ADDR##*:}" 60 "$INTAKE_BIN" serve --data-dir "$S_DATA" --listen "$S_ADDR"
  S_PID="$SRV_PID" S_SUPER="$SRV_SUPER"
  search_side search-redb "$S_ADDR"
  stop_server search-redb "$S_PID" "$S_SUPER" 60
  sync
  {
    echo "database_bytes $(du -sb "$S_DATA" | awk '{ print $1 }')"
    echo "index_bytes $(du -sb "$S_DATA/search" | awk '{ print $1 }')"
  } >"$FIG/search-redb.sizes"
fi

pg_stop

# ---------------------------------------------------------------- 8. report

machine_facts
MEM_GB="$(awk '/^MemTotal/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo)"
{
  echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit $REV"
  echo "machine $NPROC CPUs (nproc), $CPU_MODEL, ${MEM_GB} GiB RAM"
  echo "nproc $NPROC"
  echo "clk_tck $CLK_TCK"
  echo "duration $DURATION"
  echo "connections $CONNECTIONS"
  echo "threads $THREADS"
  echo "body_bytes ${#BODY}"
  echo "records $RECORDS"
  echo "reps $REPS"
  echo "elapsed $(( $(date +%s) - T_START ))"
  echo "loadavg $LOADAVG_START"
} >"$FIG/meta.txt"
# Kept for `python3 benches/postgres_report.py --figures DIR --out FILE`: the report again.
rm -rf "$ROOT/benches/results/postgres-figures"
cp -r "$FIG" "$ROOT/benches/results/postgres-figures"
python3 "$ROOT/benches/postgres_report.py" --figures "$FIG" --out "$WORK/report.md" \
  ${RESULTS_JSON:+--json "$RESULTS_JSON"}
publish_report "$WORK/report.md"
