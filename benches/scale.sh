#!/usr/bin/env bash
# Scale benchmark (issue #43): how intake's costs grow with its data.
#
# 1. Generates MILLIONS million varied records (benches/search_gen.py, ~497 bytes each, the
#    search benchmark's generator and seed), kept in GEN_DIR for the next run.
# 2. Starts intake (redb) on a fresh data dir and loads them into one endpoint a million at a
#    time (search_bench.py load-intake: 64 connections, 4 pipelined requests each), then waits
#    for the server to go idle (the search index caught up, its merges done). The server's
#    memory is sampled every 0.25 s throughout: each chunk's peak RSS, its anonymous part and
#    its file-backed part (mapped files, which the kernel can drop and read again), and VmHWM.
# 3. At each checkpoint (CHECKPOINTS, millions loaded): the 50 search queries by class
#    (search_bench.py time-intake, REPS rounds; `classes` sums them up), the reads of
#    benches/scale_reads.py (list, deep pages, get, poll), and the data dir against the
#    payload.
# 4. At the end: a restart (listening, ready) and an online backup's time.
# Prints a Markdown report and writes it to benches/results/scale-latest.md.
#
# Usage (from the repo root):
#   bash benches/scale.sh                         # 10M records: about 30 minutes on 2 cores
#   MILLIONS=3 CHECKPOINTS="1 3" bash benches/scale.sh
#   PROFILE_ENV=benches/profiles/small.env MILLIONS=3 bash benches/scale.sh
#
# Env: MILLIONS (default 10), CHECKPOINTS (default "1 5 MILLIONS"), REPS (search rounds at a
#      checkpoint, default 3), GEN_DIR (where the generated records are kept, default
#      /tmp/intake-scale-gen), PROFILE_ENV (a profile whose INTAKE_* variables go to intake
#      serve), INTAKE_BIN (skip the build), RESULTS_FILE (default
#      benches/results/scale-latest.md), IDLE_TIMEOUT (most seconds to wait for the server to
#      go idle after a chunk, default 900), KEEP_DIR (keep the loaded data dir there, with the
#      searches' raw timings and the endpoint's slug and sandbox key in bench-endpoint, for
#      probing afterwards; intake serve --data-dir KEEP_DIR/data).
# All traffic goes to 127.0.0.1 only.
set -euo pipefail

MILLIONS="${MILLIONS:-10}"
CHECKPOINTS="${CHECKPOINTS:-1 5 $MILLIONS}"
REPS="${REPS:-3}"
IDLE_TIMEOUT="${IDLE_TIMEOUT:-900}"
SEED=20240101

# shellcheck source=benches/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RESULTS_FILE="${RESULTS_FILE:-$ROOT/benches/results/scale-latest.md}"
GEN_DIR="${GEN_DIR:-${TMPDIR:-/tmp}/intake-scale-gen}"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/intake-scale.XXXXXX")"
cleanup_on_exit 120
require python3 curl split
build_intake
serve_env
STARTED="$(date +%s)"

if [ "$(cat "$GEN_DIR/count" 2>/dev/null)" != "$MILLIONS" ]; then
  rm -rf "$GEN_DIR"
  log "generating $MILLIONS million records into $GEN_DIR"
  python3 "$ROOT/benches/search_gen.py" --records $((MILLIONS * 1000000)) --out "$GEN_DIR" \
    --seed "$SEED" --no-copy >/dev/null || die "search_gen.py failed"
  (cd "$GEN_DIR" && split -l 1000000 -d -a 3 records.jsonl chunk.)
  echo "$MILLIONS" >"$GEN_DIR/count"
fi
PAYLOAD_BYTES="$(stat -c %s "$GEN_DIR/records.jsonl")"

init_intake "$WORK/data"
PORT="$(free_port)"
ADDR="$HOST:$PORT"
# serve NAME: starts the server on the data dir; sets PID, SUPER and READY_MS (spawn to the
# first 200 of /readyz).
serve() {
  local began ready
  began="$(date +%s%N)"
  start_server "$1" "$PORT" 60 "${SERVE_ENV[@]}" INTAKE_POLL__HOLD_BACK=0s \
    "$INTAKE_BIN" serve --data-dir "$WORK/data" --listen "$ADDR"
  PID="$SRV_PID"
  SUPER="$SRV_SUPER"
  for _ in $(seq 1 6000); do
    ready="$(curl -s -o /dev/null -w '%{http_code}' "http://$ADDR/readyz" || true)"
    [ "$ready" = 200 ] && break
    sleep 0.01
  done
  [ "$ready" = 200 ] || die "$1: /readyz never answered 200"
  READY_MS="$(( ($(date +%s%N) - began) / 1000000 ))"
}
serve intake
create_endpoint "$ADDR"
URL="http://$ADDR/api/v1/data/$SLUG"

declare -A FIG=()
loaded=0
for chunk in "$GEN_DIR"/chunk.*; do
  loaded=$((loaded + 1))
  mem_watch "$PID" "$WORK/mem.$loaded"
  python3 "$ROOT/benches/search_bench.py" load-intake --url "$URL" --key "$SANDBOX_KEY" \
    --file "$chunk" --connections 64 --pipeline 4 --out "$WORK/load.$loaded.json" >/dev/null \
    || die "chunk $loaded: not every record got a 202"
  wait_idle "$PID" "$IDLE_TIMEOUT"
  mem_unwatch "$MEM_WATCH_PID" "$PID" "$WORK/mem.$loaded"
  mem_peaks "$WORK/mem.$loaded" >"$WORK/mem.$loaded.peaks"
  FIG[$loaded.rate]="$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["records_per_s"]))' "$WORK/load.$loaded.json")"
  for part in rss_max anon_max file_max hwm; do
    FIG[$loaded.$part]="$(kb_to_mb "$(kv "$WORK/mem.$loaded.peaks" "${part}_kb")")"
  done
  FIG[$loaded.idle]="$SETTLE_S"
  log "${loaded}M: ${FIG[$loaded.rate]} records/s; peak RSS ${FIG[$loaded.rss_max]} MB (anonymous ${FIG[$loaded.anon_max]}, file-backed ${FIG[$loaded.file_max]}), VmHWM ${FIG[$loaded.hwm]} MB; idle after ${SETTLE_S} s"
  for checkpoint in $CHECKPOINTS; do
    [ "$checkpoint" = "$loaded" ] || continue
    python3 "$ROOT/benches/search_bench.py" time-intake --url "$URL" --key "$SANDBOX_KEY" \
      --reps "$REPS" --out "$WORK/search.$loaded.json" >/dev/null
    python3 "$ROOT/benches/search_bench.py" classes "$WORK/search.$loaded.json" >"$WORK/search.$loaded"
    python3 "$ROOT/benches/scale_reads.py" "$URL" "$SANDBOX_KEY" >"$WORK/reads.$loaded"
    FIG[$loaded.dir]="$(du -sb "$WORK/data" | cut -f1)"
    FIG[$loaded.index]="$(du -sb "$WORK/data/search" | cut -f1)"
    log "${loaded}M: search all p50/p99 $(kv "$WORK/search.$loaded" all_p50_ms) / $(kv "$WORK/search.$loaded" all_p99_ms) ms, worst $(kv "$WORK/search.$loaded" worst_query) $(kv "$WORK/search.$loaded" worst_p99_ms) ms"
  done
done
stop_server intake "$PID" "$SUPER" 120
serve restart
RESTART_MS="$SRV_STARTUP_MS"
RESTART_READY_MS="$READY_MS"
began="$(date +%s%N)"
"$INTAKE_BIN" backup --server "http://$ADDR" --token "$TOKEN" --to "$WORK/backup.tar" >/dev/null \
  || die "the backup failed"
BACKUP_S="$(awk -v ns="$(( $(date +%s%N) - began ))" 'BEGIN { printf "%.1f", ns / 1e9 }')"
BACKUP_MB="$(( $(stat -c %s "$WORK/backup.tar") / 1000000 ))"
rm -f "$WORK/backup.tar"
stop_server restart "$PID" "$SUPER" 60
if [ -n "${KEEP_DIR:-}" ]; then
  mkdir -p "$KEEP_DIR"
  rm -rf "$KEEP_DIR/data"
  mv "$WORK/data" "$KEEP_DIR/data"
  cp "$WORK"/search.*.json "$KEEP_DIR/"
  echo "$SLUG $SANDBOX_KEY" >"$KEEP_DIR/bench-endpoint"
  log "kept the data dir and the searches' timings in $KEEP_DIR"
fi

machine_facts
REPORT="$WORK/report.md"
ms() { kv "$1" "$2"; }
{
  echo "## Scale benchmark"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit: $REV; whole run $(( $(date +%s) - STARTED )) s"
  echo "- machine: $NPROC CPUs (nproc), $CPU_MODEL"
  server="the default configuration"
  [ -z "${PROFILE_ENV:-}" ] || server="$PROFILE_ENV (${SERVE_ENV[*]:1})"
  echo "- server: intake on redb, $server"
  echo "- data: $MILLIONS million records of benches/search_gen.py (seed $SEED, $(( PAYLOAD_BYTES / MILLIONS / 1000000 )) bytes a record as JSON lines) into one endpoint, a million at a time, 64 connections with 4 pipelined requests each"
  echo
  echo "### Each million"
  echo
  echo "| loaded | records/s | peak RSS | anonymous | file-backed | VmHWM | idle after |"
  echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  for i in $(seq 1 "$loaded"); do
    echo "| ${i}M | ${FIG[$i.rate]} | ${FIG[$i.rss_max]} MB | ${FIG[$i.anon_max]} MB | ${FIG[$i.file_max]} MB | ${FIG[$i.hwm]} MB | ${FIG[$i.idle]} s |"
  done
  echo
  echo "Memory over the chunk's load and the wait for idle, sampled every ${MEM_INTERVAL} s: the peaks of RSS and of its two parts (each its own largest sample), and VmHWM, the process's peak RSS so far. File-backed pages are the mapped index and store files: the kernel drops them under memory pressure and reads them again."
  echo
  echo "### At the checkpoints"
  echo
  printf '| | %s |\n' "$(for c in $CHECKPOINTS; do printf '%sM | ' "$c"; done | sed 's/ | $//')"
  printf '| --- |%s\n' "$(for _ in $CHECKPOINTS; do printf ' ---: |'; done)"
  for cls in all selective common number trigram nomatch; do
    printf '| search, %s: p50 / p99 |' "$cls"
    for c in $CHECKPOINTS; do printf ' %s / %s ms |' "$(ms "$WORK/search.$c" "${cls}_p50_ms")" "$(ms "$WORK/search.$c" "${cls}_p99_ms")"; done
    echo
  done
  printf '| search, slowest query (p99) |'
  for c in $CHECKPOINTS; do printf ' `%s` %s ms |' "$(ms "$WORK/search.$c" worst_query)" "$(ms "$WORK/search.$c" worst_p99_ms)"; done
  echo
  printf '| search, every result exact and newest first |'
  for c in $CHECKPOINTS; do printf ' %s |' "$([ "$(ms "$WORK/search.$c" exact)" = 1 ] && echo yes || echo NO)"; done
  echo
  for read in list_first list_deep get poll_start poll_back; do
    printf '| %s: p50 / p99 |' "$read"
    for c in $CHECKPOINTS; do printf ' %s / %s ms |' "$(ms "$WORK/reads.$c" "${read}_p50_ms")" "$(ms "$WORK/reads.$c" "${read}_p99_ms")"; done
    echo
  done
  printf '| data dir / payload (search index) |'
  for c in $CHECKPOINTS; do
    printf ' %s× (%s MB) |' "$(awk -v d="${FIG[$c.dir]}" -v p="$PAYLOAD_BYTES" -v c="$c" -v m="$MILLIONS" 'BEGIN { printf "%.2f", d / (p * c / m) }')" "$(( FIG[$c.index] / 1000000 ))"
  done
  echo
  echo
  echo "Search: the 50 queries of benches/search_queries.py, $REPS rounds after a warm-up, one at a time on one keep-alive connection, each timed to its first 10 matches. list_first: the first page of 30; list_deep: 200 pages of 30 by cursor; get: one record by id; poll_start and poll_back: a poll page of 100 from the beginning and from 6,000 records back."
  echo
  echo "### With ${MILLIONS}M records"
  echo
  echo "- restart: listening after $RESTART_MS ms, ready after $RESTART_READY_MS ms"
  echo "- online backup (\`intake backup\`): $BACKUP_S s, $BACKUP_MB MB"
} >"$REPORT"
publish_report "$REPORT"
