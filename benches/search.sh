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
# 5. A Markdown report on stdout and in benches/results/search-latest.md, with intake's memory:
#    lib.sh's mem_watch samples every intake server from its start to its stop, and VmHWM is
#    read after the load, after the rebuild, and after the queries (reset before them).
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
#   PROFILE_ENV  a profile file (benches/profiles/NAME.env): its INTAKE_* variables are given
#                to `intake serve` and nothing else (optional; benches/lean.sh sets it)
#   RESULTS_FILE where to write the report (default benches/results/search-latest.md)
#   RESULTS_JSON also write the key figures there as JSON (optional; benches/compare.sh and
#                benches/lean.sh read them): p50 and p99 over all queries per side and
#                client; intake's memory: {load,rebuild,queries}_peak_rss_mb (VmHWM),
#                {load,queries}_peak_{sampled_rss,anon,file}_mb (the samples' largest),
#                peak_rss_mb (the largest VmHWM), index_bytes, load_records_per_s
#
# Needs python3 and curl; installs psycopg (pip), wrk and PostgreSQL (apt-get: wrk, postgresql,
# postgresql-contrib) when they are missing. All traffic goes to 127.0.0.1 only. The
# trap stops every process this script started (PostgreSQL included) and removes its
# temporary directory on any exit, Ctrl-C included.
set -euo pipefail

RECORDS="${RECORDS:-1000000}"
REPS="${REPS:-20}"
NATIVE_REQUESTS="${NATIVE_REQUESTS:-200}"
SEED="${SEED:-20240101}"
CONNECTIONS="${CONNECTIONS:-64}"
PIPELINE="${PIPELINE:-4}"
PLAN_CACHE_MODE="${PLAN_CACHE_MODE:-force_custom_plan}"

case "$RECORDS" in
  '' | *[!0-9]*) echo "search.sh: RECORDS must be a positive integer (got '$RECORDS')" >&2; exit 2 ;;
esac
[ "$RECORDS" -gt 0 ] || { echo "search.sh: RECORDS must be positive" >&2; exit 2; }

# shellcheck source=benches/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BENCH_PY="$ROOT/benches/search_bench.py"
GEN_PY="$ROOT/benches/search_gen.py"
RESULTS_DIR="$ROOT/benches/results"
RESULTS_FILE="${RESULTS_FILE:-$RESULTS_DIR/search-latest.md}"

T_START="$(date +%s)"
LOADAVG_START="$(cut -d' ' -f1-3 /proc/loadavg)"
choose_sides pg RUN_PG
log() { echo "search.sh: [$(( $(date +%s) - T_START ))s] $*" >&2; }

# ---------------------------------------------------------------- cleanup

WORK="$(mktemp -d "${TMPDIR:-/tmp}/intake-search-bench.XXXXXX")"
cleanup_on_exit 100 pg_stop

# ---------------------------------------------------------------- tools

require python3 curl

if [ "$RUN_PG" = 1 ]; then
  if ! python3 -c 'import psycopg' 2>/dev/null; then
    log "psycopg not found; pip install 'psycopg[binary]'"
    python3 -m pip install --quiet "psycopg[binary]" >&2 || die "pip install psycopg[binary] failed"
  fi
  pg_find
fi

# ---------------------------------------------------------------- data

DATA="$WORK/gen"
log "generating $RECORDS records (seed $SEED)"
run_bg python3 "$GEN_PY" --records "$RECORDS" --seed "$SEED" --out "$DATA" >"$WORK/gen.json" \
  || die "search_gen.py failed"
log "generated: $(cat "$WORK/gen.json")"

# ---------------------------------------------------------------- PostgreSQL

if [ "$RUN_PG" = 1 ]; then
  # Settings for a 2-core, 24 GiB machine doing this read benchmark: enough shared
  # buffers to hold the table and its indexes, a large maintenance_work_mem for the GIN
  # build, JIT off (it only adds compile time to these short queries).
  pg_start -c shared_buffers=2GB -c maintenance_work_mem=1GB -c work_mem=64MB \
    -c effective_cache_size=16GB -c jit=off -c max_wal_size=8GB -c checkpoint_timeout=30min
  run_bg python3 "$BENCH_PY" pg-setup --dsn "$PG_DSN" --copy "$DATA/records.copy" \
    --out "$WORK/pg_setup.json" || die "PostgreSQL setup failed"
  PG_ROWS="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["rows"])' "$WORK/pg_setup.json")"
  [ "$PG_ROWS" = "$RECORDS" ] || die "PostgreSQL holds $PG_ROWS rows, not $RECORDS"
  # The COPY file is no longer needed: free the disk.
  rm -f "$DATA/records.copy"
fi

# --------------------------------------------------------------- intake

if [ "$RUN_INTAKE" = 1 ]; then
  build_intake
  serve_env
  I_DATA="$WORK/intake-data"
  init_intake "$I_DATA"
  I_PORT="$(free_port)"
  I_ADDR="$HOST:$I_PORT"
  start_server intake "$I_PORT" 600 "${SERVE_ENV[@]}" "$INTAKE_BIN" serve --data-dir "$I_DATA" --listen "$I_ADDR"
  I_PID="$SRV_PID"; I_SUPER="$SRV_SUPER"; I_LOG="$SRV_LOG"
  mem_watch "$I_PID" "$WORK/load.mem"
  create_endpoint "$I_ADDR"
  I_URL="http://$I_ADDR/api/v1/data/$SLUG"

  # Search must exist before we spend minutes loading.
  CODE="$(curl -s -o "$WORK/probe.json" -w '%{http_code}' -H "Authorization: Bearer $SANDBOX_KEY" \
    "$I_URL/search?q=probe&limit=10&start=2000-01-01")" || CODE=000
  [ "$CODE" = 200 ] || die "intake: GET $I_URL/search answered $CODE: $(cat "$WORK/probe.json" 2>/dev/null || true) (no search in this build?)"

  log "intake: loading $RECORDS records ($CONNECTIONS connections, pipeline depth $PIPELINE)"
  run_bg python3 "$BENCH_PY" load-intake --url "$I_URL" --key "$SANDBOX_KEY" --file "$DATA/records.jsonl" \
    --connections "$CONNECTIONS" --pipeline "$PIPELINE" --out "$WORK/load.json" \
    || die "intake: the load did not get a 202 for every record (see above)"

  log "intake: stopping the server, deleting $I_DATA/search, starting again to rebuild the index"
  LOAD_HWM_KB="$(proc_kb "$I_PID" VmHWM)"
  mem_unwatch "$MEM_WATCH_PID" "$I_PID" "$WORK/load.mem"
  stop_server intake "$I_PID" "$I_SUPER" 120
  [ -d "$I_DATA/search" ] || log "warning: there was no $I_DATA/search to delete"
  rm -rf "$I_DATA/search"
  T0="$(date +%s.%N)"
  start_server intake-rebuild "$I_PORT" 600 "${SERVE_ENV[@]}" "$INTAKE_BIN" serve --data-dir "$I_DATA" --listen "$I_ADDR"
  I_PID="$SRV_PID"; I_SUPER="$SRV_SUPER"; I_LOG="$SRV_LOG"
  mem_watch "$I_PID" "$WORK/rebuild.mem"
  I_SAMPLER="$MEM_WATCH_PID"
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
  # VmHWM so far is the rebuild's peak; reset, it becomes the queries' own.
  REBUILD_HWM_KB="$(proc_kb "$I_PID" VmHWM)"
  if hwm_reset "$I_PID"; then HWM_RESET=1; else HWM_RESET=0; log "warning: could not reset VmHWM"; fi
  QUERIES_T0="$EPOCHREALTIME"
  log "intake: timing the queries (warm-up + $REPS rounds)"
  run_bg python3 "$BENCH_PY" time-intake --url "$I_URL" --key "$SANDBOX_KEY" --reps "$REPS" \
    --out "$WORK/intake_times.json" || die "intake: timing failed"
  ensure_wrk
  log "intake: timing the queries through wrk (the first $NATIVE_REQUESTS requests of 1 s each)"
  run_bg python3 "$BENCH_PY" time-native --url "$I_URL" --key "$SANDBOX_KEY" \
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
  QUERIES_HWM_KB="$(proc_kb "$I_PID" VmHWM)"
  mem_unwatch "$I_SAMPLER" "$I_PID" "$WORK/rebuild.mem"
  stop_server intake "$I_PID" "$I_SUPER" 120
  mem_peaks "$WORK/load.mem" >"$WORK/load.peaks"
  mem_peaks "$WORK/rebuild.mem" >"$WORK/rebuild.peaks"
  mem_peaks "$WORK/rebuild.mem" "$QUERIES_T0" "$EPOCHREALTIME" >"$WORK/queries.peaks"
  # no reset: the queries' peak is the largest sample taken during them
  [ "$HWM_RESET" = 1 ] || QUERIES_HWM_KB="$(kv "$WORK/queries.peaks" rss_max_kb)"
fi
pg_stop

# --------------------------------------------------------------- report

machine_facts
MEM_GB="$(awk '/^MemTotal/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo)"
ELAPSED="$(( $(date +%s) - T_START ))"
mkdir -p "$(dirname "$RESULTS_FILE")"
python3 "$BENCH_PY" report --meta "$DATA/meta.json" --load "$WORK/load.json" \
  --intake "$WORK/intake_times.json" --intake-build "$WORK/intake_build.json" \
  --pg-setup "$WORK/pg_setup.json" --pg-times "$WORK/pg_times.json" \
  --intake-native "$WORK/intake_native.json" --pg-native "$WORK/pg_native.json" \
  --date "$(date -u +%Y-%m-%dT%H:%M:%SZ)" --commit "$REV" \
  --machine "$NPROC CPUs (nproc), $CPU_MODEL, ${MEM_GB} GiB RAM (RECORDS=$RECORDS, REPS=$REPS, ONLY=$ONLY)" \
  --elapsed "$ELAPSED" --loadavg "$LOADAVG_START" \
  --out "$RESULTS_FILE" ${RESULTS_JSON:+--json "$RESULTS_JSON"}

if [ "$RUN_INTAKE" = 1 ]; then
  # pk NAME KEY -> the peak KEY (kB) of $WORK/NAME.peaks in MB
  pk() { kb_to_mb "$(kv "$WORK/$1.peaks" "$2")"; }
  PEAK_KB="$(printf '%s\n' "$LOAD_HWM_KB" "$REBUILD_HWM_KB" "$QUERIES_HWM_KB" | sort -n | tail -n 1)"
  {
    echo
    echo "### intake's memory"
    echo
    echo "| phase | peak RSS (VmHWM) | largest sample: RSS / anon / file-backed |"
    echo "| --- | ---: | ---: |"
    echo "| load ($RECORDS POSTs, indexing as they come) | $(kb_to_mb "$LOAD_HWM_KB") MB | $(pk load rss_max_kb) / $(pk load anon_max_kb) / $(pk load file_max_kb) MB |"
    echo "| restart, index rebuild, settling | $(kb_to_mb "$REBUILD_HWM_KB") MB | $(pk rebuild rss_max_kb) / $(pk rebuild anon_max_kb) / $(pk rebuild file_max_kb) MB (rebuild and queries) |"
    echo "| queries (Python and wrk clients) | $(kb_to_mb "$QUERIES_HWM_KB") MB | $(pk queries rss_max_kb) / $(pk queries anon_max_kb) / $(pk queries file_max_kb) MB |"
    echo
    echo "VmHWM from /proc/PID/status ($([ "$HWM_RESET" = 1 ] && echo "reset through /proc/PID/clear_refs before the queries" || echo "not resettable here: the queries' figure is the largest sample")); samples of smaps_rollup every ${MEM_INTERVAL} s, file-backed = Rss - Anonymous (tantivy's mapped segments, which the kernel can reclaim)."
    [ -z "${PROFILE_ENV:-}" ] || echo "intake's environment: ${SERVE_ENV[*]:1} (profile $PROFILE_ENV)."
  } | tee -a "$RESULTS_FILE"
  add_figures peak_rss_mb "$(kb_to_mb "$PEAK_KB")" load_peak_rss_mb "$(kb_to_mb "$LOAD_HWM_KB")" \
    rebuild_peak_rss_mb "$(kb_to_mb "$REBUILD_HWM_KB")" queries_peak_rss_mb "$(kb_to_mb "$QUERIES_HWM_KB")" \
    load_peak_sampled_rss_mb "$(pk load rss_max_kb)" load_peak_anon_mb "$(pk load anon_max_kb)" \
    load_peak_file_mb "$(pk load file_max_kb)" queries_peak_sampled_rss_mb "$(pk queries rss_max_kb)" \
    queries_peak_anon_mb "$(pk queries anon_max_kb)" queries_peak_file_mb "$(pk queries file_max_kb)" \
    index_bytes "$I_INDEX_BYTES" \
    load_records_per_s "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["records_per_s"])' "$WORK/load.json")"
fi
log "written to ${RESULTS_FILE#"$ROOT"/}"
