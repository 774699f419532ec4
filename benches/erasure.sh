#!/usr/bin/env bash
# Erasure benchmark: how long an erasure of MATCHES records out of RECORDS takes, and what it
# does to the latency of the ingest load that runs beside it, in one run.
#
# 1. RECORDS varied records (benches/search_gen.py, ~500 bytes each), every (RECORDS/MATCHES)-th
#    given a "contact" field holding one person's e-mail address, are loaded into one endpoint
#    of a fresh server (benches/search_bench.py load-intake).
# 2. Baseline: the paced ingest load (benches/post_paced.lua: CONNECTIONS connections, each
#    pausing DELAY_MS before every POST of the ~1 KB record) for DURATION; its p50 and p99.
# 3. The same load again for DURATION, and 2 s into it an erasure of that address
#    (`POST …/erasures`); the erasure's time is its `finished_at` minus its `created_at`,
#    which includes counting, erasing, merging the search index and scrubbing the store file's
#    free pages. The erasure must end within the load, or the run says so.
# Prints a Markdown table, and the erasure's steps with the server's p99 for the POSTs while each
# ran (benches/erasure_steps.py), and writes them to benches/results/erasure-latest.md.
#
# Usage (from the repo root):
#   bash benches/erasure.sh
#
# Env:
#   RECORDS      records loaded              (default 1000000)
#   MATCHES      of them, holding the address (default 10000)
#   DURATION     each load phase, wrk syntax (default 40s)
#   CONNECTIONS  paced load's connections    (default 16)
#   DELAY_MS     pause before each POST      (default 10: about 1,500 POST/s in all)
#   INTAKE_BIN   use this intake binary instead of building one (optional)
#   RESULTS_FILE where to write the report (default benches/results/erasure-latest.md)
#
# All traffic goes to 127.0.0.1 only.
set -euo pipefail

RECORDS="${RECORDS:-1000000}"
MATCHES="${MATCHES:-10000}"
DURATION="${DURATION:-40s}"
CONNECTIONS="${CONNECTIONS:-16}"
DELAY_MS="${DELAY_MS:-10}"
ADDRESS="ada.lovelace.erasure@example.com"

# shellcheck source=benches/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RESULTS_FILE="${RESULTS_FILE:-$ROOT/benches/results/erasure-latest.md}"
[ "$MATCHES" -gt 0 ] && [ "$RECORDS" -ge "$MATCHES" ] || die "need 0 < MATCHES <= RECORDS"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/intake-erasure.XXXXXX")"
cleanup_on_exit 100
require python3 curl
ensure_wrk
build_intake
serve_env

log "generating $RECORDS records, $MATCHES of them holding $ADDRESS"
run_bg python3 "$ROOT/benches/search_gen.py" --records "$RECORDS" --out "$WORK/gen" --no-copy \
  >"$WORK/gen.json" || die "search_gen.py failed"
python3 - "$WORK/gen/records.jsonl" "$WORK/records.jsonl" "$RECORDS" "$MATCHES" "$ADDRESS" <<'EOF'
import sys
src, dst, records, matches, address = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
every = records // matches
with open(src, "rb") as f, open(dst, "wb") as out:
    for n, line in enumerate(f):
        line = line.rstrip(b"\n")
        if n % every == every - 1 and n // every < matches:
            line = line[:-1] + b',"contact":"' + address.encode() + b'"}'
        out.write(line + b"\n")
EOF
rm -rf "$WORK/gen"

init_intake "$WORK/data"
PORT="$(free_port)"
ADDR="$HOST:$PORT"
start_server intake "$PORT" 600 "${SERVE_ENV[@]}" "$INTAKE_BIN" serve --data-dir "$WORK/data" --listen "$ADDR"
PID="$SRV_PID"; SUPER="$SRV_SUPER"
create_endpoint "$ADDR"
URL="http://$ADDR/api/v1/data/$SLUG"
MANAGE="http://$ADDR/api/v1/manage/endpoints/$SLUG/erasures"

log "loading"
run_bg python3 "$ROOT/benches/search_bench.py" load-intake --url "$URL" --key "$SANDBOX_KEY" \
  --file "$WORK/records.jsonl" --connections 32 --out "$WORK/load.json" || die "loading failed"
rm -f "$WORK/records.jsonl"

# manage_post BODY OUT: POSTs BODY to the erasures route; prints the status
manage_post() {
  curl -s -o "$2" -w '%{http_code}' -X POST "$MANAGE" -H "Authorization: Bearer $TOKEN" \
    -H 'Content-Type: application/json' -d "$1" || echo 000
}
json_field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

code="$(manage_post "{\"environment\":\"sandbox\",\"q\":\"$ADDRESS\",\"dry_run\":true}" "$WORK/dry.json")"
[ "$code" = 200 ] || die "the dry run answered $code: $(cat "$WORK/dry.json")"
MATCHED="$(json_field "$WORK/dry.json" matched)"
[ "$MATCHED" = "$MATCHES" ] || die "the dry run counted $MATCHED matches, not $MATCHES"
wait_idle "$PID" 600

log "baseline: the paced load alone for $DURATION"
BASE_FROM="$(date +%s)"
paced_post_load baseline "$URL" "$SANDBOX_KEY"
BASE_TO="$(date +%s)"

log "the paced load for $DURATION, with the erasure 2 s into it"
paced_post_load erasing "$URL" "$SANDBOX_KEY" &
LOAD=$!
sleep 2
code="$(manage_post "{\"environment\":\"sandbox\",\"q\":\"$ADDRESS\"}" "$WORK/started.json")"
[ "$code" = 202 ] || die "the erasure answered $code: $(cat "$WORK/started.json")"
ERASURE="$(json_field "$WORK/started.json" id)"
STATE=running
while [ "$STATE" = running ]; do
  sleep 0.5
  curl -s -o "$WORK/erasure.json" -H "Authorization: Bearer $TOKEN" "$MANAGE/$ERASURE" || true
  STATE="$(json_field "$WORK/erasure.json" state 2>/dev/null || echo running)"
done
LOAD_RUNNING=0
kill -0 "$LOAD" 2>/dev/null && LOAD_RUNNING=1
wait "$LOAD" || die "the paced load failed"
[ "$STATE" = finished ] || die "the erasure ended $STATE: $(cat "$WORK/erasure.json")"
stop_server intake "$PID" "$SUPER" 30

read -r ERASED TOOK < <(python3 - "$WORK/erasure.json" <<'EOF'
import datetime, json, sys
e = json.load(open(sys.argv[1]))
t = lambda s: datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))
print(e["erased"], f'{(t(e["finished_at"]) - t(e["created_at"])).total_seconds():.1f}')
EOF
)
fig() { kv "$WORK/$1.wrk" "$2"; }
RATIO="$(awk -v e="$(fig erasing p99_ms)" -v b="$(fig baseline p99_ms)" 'BEGIN { printf "%.2f", e / b }')"

machine_facts
REPORT="$WORK/report.md"
{
  echo "## Erasure benchmark"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit: $REV"
  echo "- machine: $NPROC CPUs (nproc), $CPU_MODEL"
  echo "- data: $RECORDS records of benches/search_gen.py (~500 bytes), loaded in $(json_field "$WORK/load.json" seconds) s; $MATCHES of them, spread evenly, hold the address erased"
  echo "- load: wrk -t2 -c$CONNECTIONS -d$DURATION, each connection pausing ${DELAY_MS} ms before every POST of the ~1 KB record of benches/post.lua; client and server share the machine"
  echo
  echo "| | value |"
  echo "| --- | ---: |"
  echo "| records erased | $ERASED |"
  echo "| erasure, created to finished | $TOOK s |"
  echo "| ingest p50 / p99 alone | $(fig baseline p50_ms) / $(fig baseline p99_ms) ms |"
  echo "| ingest p50 / p99 while erasing | $(fig erasing p50_ms) / $(fig erasing p99_ms) ms |"
  echo "| p99 while erasing / alone | $RATIO |"
  echo "| POST/s alone / while erasing | $(fig baseline rps) / $(fig erasing rps) |"
  [ "$LOAD_RUNNING" = 1 ] || echo "| note | the erasure outlasted the load: raise DURATION |"
  echo
  echo "Its steps, as the server logged them, with the server's own time for the POSTs while"
  echo "each ran (its request log, whole seconds):"
  echo
  python3 "$ROOT/benches/erasure_steps.py" "$SRV_LOG" "$ERASURE" "$BASE_FROM" "$BASE_TO"
} >"$REPORT"
publish_report "$REPORT"
