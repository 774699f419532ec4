#!/usr/bin/env bash
# Export benchmark: records/s and memory of `GET /api/v1/data/{slug}/export` over a large
# endpoint, as NDJSON and as CSV, read by curl as fast as it can.
#
# 1. Starts intake (redb) on a fresh data dir and loads RECORDS ~1 KB records (the record of
#    benches/post.lua) through the batch route, 1,000 per request, from LOADERS parallel
#    connections (benches/benchlib.py load-batches).
# 2. Waits until the server is idle (the search index has caught up).
# 3. Exports everything ROUNDS times in each format with curl to /dev/null, the server's RSS
#    sampled every 0.25 s: records/s (RECORDS / curl's total time), MB/s, and the RSS peak
#    over the RSS before the export.
# Prints a Markdown table and writes it to benches/results/export-latest.md.
#
# Usage (from the repo root):
#   bash benches/export.sh
#   RECORDS=100000 bash benches/export.sh       # a quick run
#
# Env: RECORDS (default 1000000), LOADERS (default 4), ROUNDS (default 2), INTAKE_BIN (skip
#      the build), PROFILE_ENV (a profile file whose INTAKE_* variables go to intake serve:
#      benches/profiles/small.env's smaller page cache shows what the first export's growth
#      is), RESULTS_FILE (default benches/results/export-latest.md).
# All traffic goes to 127.0.0.1 only.
set -euo pipefail

RECORDS="${RECORDS:-1000000}"
LOADERS="${LOADERS:-4}"
ROUNDS="${ROUNDS:-2}"

# shellcheck source=benches/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RESULTS_FILE="${RESULTS_FILE:-$ROOT/benches/results/export-latest.md}"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/intake-export.XXXXXX")"
cleanup_on_exit 50
require python3 curl
build_intake
serve_env

init_intake "$WORK/data"
PORT="$(free_port)"
ADDR="$HOST:$PORT"
start_server intake "$PORT" 30 "${SERVE_ENV[@]}" "$INTAKE_BIN" serve --data-dir "$WORK/data" --listen "$ADDR"
PID="$SRV_PID"
SUPER="$SRV_SUPER"
create_endpoint "$ADDR"
URL="http://$ADDR/api/v1/data/$SLUG"

log "loading $RECORDS records through the batch route ($LOADERS connections)"
LOAD_START="$(date +%s.%N)"
python3 "$ROOT/benches/benchlib.py" load-batches "$URL/batch" "$SANDBOX_KEY" "$RECORDS" "$LOADERS" \
  "$ROOT/benches/post.lua" >"$WORK/load.out"
LOAD_S="$(awk -v a="$LOAD_START" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
log "loaded in $LOAD_S s; waiting for the server to go idle"
wait_idle "$PID" 900
log "idle after $SETTLE_S s"

declare -A FIG=()
# export_once FORMAT ROUND: one export with curl; its figures in FIG[FORMAT.ROUND.*]
export_once() {
  local format="$1" round="$2" before peak out
  before="$(proc_kb "$PID" VmRSS)"
  mem_watch "$PID" "$WORK/$format.$round.mem"
  out="$(curl -sS -o /dev/null -w '%{http_code} %{size_download} %{time_total}' \
    -H "Authorization: Bearer $SANDBOX_KEY" "$URL/export?format=$format")"
  mem_unwatch "$MEM_WATCH_PID" "$PID" "$WORK/$format.$round.mem"
  read -r code bytes secs <<<"$out"
  [ "$code" = 200 ] || die "export ($format) answered $code"
  peak="$(kv <(mem_peaks "$WORK/$format.$round.mem") rss_max_kb)"
  FIG[$format.$round.rps]="$(awk -v n="$RECORDS" -v s="$secs" 'BEGIN { printf "%.0f", n / s }')"
  FIG[$format.$round.mbs]="$(awk -v b="$bytes" -v s="$secs" 'BEGIN { printf "%.1f", b / s / 1e6 }')"
  FIG[$format.$round.secs]="$secs"
  FIG[$format.$round.mb]="$(awk -v b="$bytes" 'BEGIN { printf "%.0f", b / 1e6 }')"
  FIG[$format.$round.growth]="$(awk -v p="$peak" -v b="$before" 'BEGIN { printf "%.1f", (p - b) / 1024 }')"
  log "$format round $round: $RECORDS records, ${FIG[$format.$round.mb]} MB in $secs s: ${FIG[$format.$round.rps]} records/s, RSS +${FIG[$format.$round.growth]} MB"
}
for round in $(seq 1 "$ROUNDS"); do
  for format in ndjson csv; do
    export_once "$format" "$round"
  done
done
stop_server intake "$PID" "$SUPER" 15

machine_facts
REPORT="$WORK/report.md"
{
  echo "## Export benchmark"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit: $REV"
  echo "- machine: $NPROC CPUs (nproc), $CPU_MODEL"
  server="the default configuration"
  [ -z "${PROFILE_ENV:-}" ] || server="$PROFILE_ENV (${SERVE_ENV[*]:1})"
  echo "- server: $server; its store's page cache is \`[storage] cache_mb\` (64 MB unless set)"
  echo "- data: $RECORDS records of $(kv "$WORK/load.out" body_bytes) bytes (benches/post.lua's), loaded through the batch route in $LOAD_S s; the export read by curl to /dev/null on the same machine"
  echo
  echo "| format | round | size | time | records/s | MB/s | RSS growth |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
  for format in ndjson csv; do
    for round in $(seq 1 "$ROUNDS"); do
      printf '| %s | %s | %s MB | %s s | %s | %s | %s MB |\n' "$format" "$round" \
        "${FIG[$format.$round.mb]}" "${FIG[$format.$round.secs]}" "${FIG[$format.$round.rps]}" \
        "${FIG[$format.$round.mbs]}" "${FIG[$format.$round.growth]}"
    done
  done
  echo
  echo "RSS growth: the largest RSS sampled during the export (every ${MEM_INTERVAL} s) over the RSS just before it."
} >"$REPORT"
publish_report "$REPORT"
