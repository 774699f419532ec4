#!/usr/bin/env bash
# Data dir benchmark: how many bytes intake keeps on disk per byte of payload.
#
# 1. benches/search_gen.py makes RECORDS varied records of about 1 KB each (--parts 2: two
#    generated records in one, so no two are alike), unless DATA names records made before.
# 2. intake: init, serve, one endpoint, every record POSTed with the sandbox key
#    (benches/search_bench.py load-intake: 64 keep-alive connections, 4 pipelined requests
#    each; every answer must be 202). The payload is the sum of the JSON bodies sent.
# 3. Waits until the server is idle (the search indexer caught up, tantivy's merges done),
#    then stops it with SIGTERM (it must exit 0).
# 4. du -sb of each part of the data dir (the redb store, search/, the request log, ...) and
#    of the whole, each also as a multiple of the payload bytes.
# The server's memory is sampled meanwhile (lib.sh's mem_watch) and its VmHWM read at the end.
#
# Usage (from the repo root):
#   bash benches/datadir.sh                    # 1,000,000 records: about 1 GB of payload
#   RECORDS=20000 bash benches/datadir.sh      # a quick check
#
# Env:
#   RECORDS       records to load                         (default 1000000)
#   SEED          search_gen.py's seed                    (default 20240101)
#   DATA          a folder with records.jsonl and meta.json from `search_gen.py --parts 2`
#                 to load instead of generating (optional; benches/lean.sh makes them once)
#   CONNECTIONS   keep-alive connections of the load      (default 64)
#   PIPELINE      HTTP/1.1 pipeline depth of the load     (default 4)
#   IDLE_TIMEOUT  most seconds to wait for the server to go idle after the load (default 900)
#   INTAKE_BIN    use this intake binary instead of building one (optional)
#   PROFILE_ENV   a profile file (benches/profiles/NAME.env): its INTAKE_* variables are given
#                 to `intake serve` and nothing else (optional)
#   RESULTS_FILE  where to write the report (default benches/results/datadir-latest.md)
#   KEEP_DATA     copy the stopped server's data dir to this folder, for a closer look
#                 (e.g. with `intake compact`); optional
#   RESULTS_JSON  also write the key figures there as JSON (optional; benches/lean.sh reads
#                 them): records, payload_bytes, datadir_bytes, datadir_x_payload,
#                 datadir.PART (bytes of each part), load_records_per_s, settle_s, settled,
#                 exit_status, peak_rss_mb (VmHWM), peak_sampled_rss_mb, peak_anon_mb,
#                 peak_file_mb
#
# Needs python3 and curl. All traffic goes to 127.0.0.1 only. The trap stops everything this
# script started and removes its temporary directory (data dir included) on any exit.
set -euo pipefail

RECORDS="${RECORDS:-1000000}"
SEED="${SEED:-20240101}"
CONNECTIONS="${CONNECTIONS:-64}"
PIPELINE="${PIPELINE:-4}"
IDLE_TIMEOUT="${IDLE_TIMEOUT:-900}"

# shellcheck source=benches/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RESULTS_FILE="${RESULTS_FILE:-$ROOT/benches/results/datadir-latest.md}"

case "$RECORDS" in ''|*[!0-9]*) die "RECORDS must be a positive integer (got '$RECORDS')" ;; esac
[ "$RECORDS" -ge 1 ] || die "RECORDS must be at least 1"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/intake-datadir-bench.XXXXXX")"
cleanup_on_exit 150

require python3 curl
build_intake
serve_env

# --------------------------------------------------------------- data

if [ -n "${DATA:-}" ]; then
  { [ -f "$DATA/records.jsonl" ] && [ -f "$DATA/meta.json" ]; } || die "DATA=$DATA has no records.jsonl and meta.json"
  log "using the records in $DATA"
else
  DATA="$WORK/gen"
  log "generating $RECORDS records of about 1 KB (search_gen.py --parts 2, seed $SEED)"
  run_bg python3 "$ROOT/benches/search_gen.py" --records "$RECORDS" --seed "$SEED" --parts 2 \
    --no-copy --out "$DATA" >"$WORK/gen.json" || die "search_gen.py failed"
fi
meta() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$DATA/meta.json" "$1"; }
GEN_RECORDS="$(meta records)"
PAYLOAD_BYTES="$(meta payload_bytes)"
[ "$GEN_RECORDS" = "$RECORDS" ] || die "DATA holds $GEN_RECORDS records, not RECORDS=$RECORDS"

# --------------------------------------------------------------- load

DATA_DIR="$WORK/data"
init_intake "$DATA_DIR"
PORT="$(free_port)"
ADDR="$HOST:$PORT"
start_server intake "$PORT" 60 "${SERVE_ENV[@]}" "$INTAKE_BIN" serve --data-dir "$DATA_DIR" --listen "$ADDR"
PID="$SRV_PID"; SUPER="$SRV_SUPER"
mem_watch "$PID" "$WORK/mem.samples"
SAMPLER="$MEM_WATCH_PID"
create_endpoint "$ADDR"

log "loading $RECORDS records ($CONNECTIONS connections, pipeline depth $PIPELINE)"
run_bg python3 "$ROOT/benches/search_bench.py" load-intake --url "http://$ADDR/api/v1/data/$SLUG" \
  --key "$SANDBOX_KEY" --file "$DATA/records.jsonl" --connections "$CONNECTIONS" \
  --pipeline "$PIPELINE" --out "$WORK/load.json" \
  || die "the load did not get a 202 for every record (see above)"
LOAD_RPS="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["records_per_s"])' "$WORK/load.json")"

log "waiting for the server to go idle (at most ${IDLE_TIMEOUT}s)"
wait_idle "$PID" "$IDLE_TIMEOUT"
log "$([ "$SETTLED" = 1 ] || echo "NOT ")idle after ${SETTLE_S}s"
HWM_KB="$(proc_kb "$PID" VmHWM)"
mem_unwatch "$SAMPLER" "$PID" "$WORK/mem.samples"
stop_server intake "$PID" "$SUPER" 120
[ "$SRV_RC" = 0 ] || log "warning: intake exited with status $SRV_RC after SIGTERM"
mem_peaks "$WORK/mem.samples" >"$WORK/peaks"

# --------------------------------------------------------------- sizes

sync
du_parts "$DATA_DIR" >"$WORK/du"
if [ -n "${KEEP_DATA:-}" ]; then
  rm -rf "$KEEP_DATA" && cp -a "$DATA_DIR" "$KEEP_DATA" || die "cannot copy the data dir to KEEP_DATA=$KEEP_DATA"
  log "data dir kept in $KEEP_DATA"
fi
DATADIR_BYTES="$(kv "$WORK/du" TOTAL)"
x_payload() { awk -v b="$1" -v p="$PAYLOAD_BYTES" 'BEGIN { printf "%.2f", b / p }'; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
pk() { kb_to_mb "$(kv "$WORK/peaks" "$1")"; }

machine_facts
REPORT="$WORK/report.md"
{
  echo "## Data dir benchmark"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit: $REV"
  echo "- machine: $NPROC CPUs (nproc), $CPU_MODEL"
  echo "- data: $RECORDS varied records from \`benches/search_gen.py --parts 2\` (seed $(meta seed)), $(meta avg_payload_bytes) bytes each on average; payload $(mib "$PAYLOAD_BYTES") MB ($PAYLOAD_BYTES bytes: the JSON bodies POSTed)"
  echo "- load: $LOAD_RPS records/s (search_bench.py load-intake, $CONNECTIONS connections, pipeline $PIPELINE); server idle $SETTLE_S s after it$([ "$SETTLED" = 1 ] || echo " (NOT idle: timed out)"); stopped with SIGTERM, exit status $SRV_RC"
  [ -z "${PROFILE_ENV:-}" ] || echo "- intake's environment: ${SERVE_ENV[*]:1} (profile $PROFILE_ENV)"
  echo
  echo "| part of the data dir | bytes (du -sb) | MB | × payload |"
  echo "| --- | ---: | ---: | ---: |"
  while read -r part bytes; do
    [ "$part" = TOTAL ] && part="**total**"
    echo "| $part | $bytes | $(mib "$bytes") | $(x_payload "$bytes") |"
  done <"$WORK/du"
  echo
  echo "- server memory during the load and the settling: peak RSS (VmHWM) $(kb_to_mb "$HWM_KB") MB; largest sample (smaps_rollup every ${MEM_INTERVAL} s) RSS / anon / file-backed $(pk rss_max_kb) / $(pk anon_max_kb) / $(pk file_max_kb) MB"
} >"$REPORT"
publish_report "$REPORT"

DU_FIGURES=()
while read -r part bytes; do
  [ "$part" = TOTAL ] || DU_FIGURES+=("datadir.$part" "$bytes")
done <"$WORK/du"
write_figures records "$RECORDS" payload_bytes "$PAYLOAD_BYTES" datadir_bytes "$DATADIR_BYTES" \
  datadir_x_payload "$(x_payload "$DATADIR_BYTES")" "${DU_FIGURES[@]}" \
  load_records_per_s "$LOAD_RPS" settle_s "$SETTLE_S" settled "$SETTLED" exit_status "$SRV_RC" \
  peak_rss_mb "$(kb_to_mb "$HWM_KB")" peak_sampled_rss_mb "$(pk rss_max_kb)" \
  peak_anon_mb "$(pk anon_max_kb)" peak_file_mb "$(pk file_max_kb)"
