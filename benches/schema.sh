#!/usr/bin/env bash
# JSON Schema benchmark: POST/s of the ingest load with and without a schema, in one run.
#
# The ingest benchmark's load (benches/post.lua: the ~1 KB order record, keep-alive,
# CONNECTIONS connections) runs twice against intake, each time on a fresh server and data dir:
# first on an endpoint without a schema, then on one whose schema is benches/order_schema.json
# (20 properties: types, formats, patterns, an enum, nested objects and an array of objects),
# which the record matches. Prints a Markdown table (requests/s, p50, p99, the ratio) and writes
# it to benches/results/schema-latest.md.
#
# Usage (from the repo root):
#   bash benches/schema.sh
#
# Env:
#   DURATION     wrk duration of each run    (default 30s)
#   CONNECTIONS  wrk connections             (default 64)
#   THREADS      wrk threads                 (default 2)
#   INTAKE_BIN   use this intake binary instead of building one (optional)
#   RESULTS_FILE where to write the report (default benches/results/schema-latest.md)
#
# All traffic goes to 127.0.0.1 only.
set -euo pipefail

DURATION="${DURATION:-30s}"
CONNECTIONS="${CONNECTIONS:-64}"
THREADS="${THREADS:-2}"

# shellcheck source=benches/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RESULTS_FILE="${RESULTS_FILE:-$ROOT/benches/results/schema-latest.md}"
SCHEMA_FILE="$ROOT/benches/order_schema.json"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/intake-schema.XXXXXX")"
cleanup_on_exit 50
require python3 curl
ensure_wrk
build_intake
serve_env

# set_schema ADDR: gives the endpoint just made the schema, and checks that post.lua's record
# matches it (a load of 400s would measure the refusal path)
set_schema() {
  local addr="$1" code
  code="$(python3 -c 'import json,sys; print(json.dumps({"schema": json.load(open(sys.argv[1]))}))' "$SCHEMA_FILE" |
    curl -s -o "$WORK/patch.json" -w '%{http_code}' -X PATCH "http://$addr/api/v1/manage/endpoints/$SLUG" \
      -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' --data-binary @-)" || code=000
  [ "$code" = 200 ] || die "setting the schema answered $code: $(cat "$WORK/patch.json" 2>/dev/null || true)"
  code="$(lua_record | curl -s -o "$WORK/post.json" -w '%{http_code}' -X POST "http://$addr/api/v1/data/$SLUG" \
    -H "Authorization: Bearer $SANDBOX_KEY" -H 'Content-Type: application/json' --data-binary @-)" || code=000
  [ "$code" = 202 ] || die "the load's record does not match the schema ($code): $(cat "$WORK/post.json" 2>/dev/null || true)"
}

# lua_record: the record benches/post.lua sends
lua_record() {
  awk '/^local body = \[\[/ { on = 1; next } on && /^\]\]/ { exit } on { print }' "$ROOT/benches/post.lua"
}

declare -A FIG=()
post_load_run plain 1
post_load_run schema 1 set_schema

machine_facts
fig() { echo "${FIG[$1]:-}"; }
RATIO="$(awk -v s="$(fig schema.rps)" -v p="$(fig plain.rps)" 'BEGIN { if (p > 0) printf "%.1f", 100 * s / p; else print "n/a" }')"
REPORT="$WORK/report.md"
{
  echo "## JSON Schema benchmark"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit: $REV"
  echo "- machine: $NPROC CPUs (nproc), $CPU_MODEL"
  echo "- load: wrk -t$THREADS -c$CONNECTIONS -d$DURATION, keep-alive, the $(fig plain.body_bytes)-byte JSON record of benches/post.lua, one per POST; a fresh server for each; client and server share the machine"
  echo "- schema: benches/order_schema.json (20 properties: types, formats, patterns, an enum, nested objects, an array of objects)"
  echo
  echo "| endpoint | POST/s | p50 | p99 | non-2xx | socket errors |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: |"
  for name in plain schema; do
    printf '| %s | %s | %s ms | %s ms | %s | %s |\n' \
      "$([ "$name" = plain ] && echo "without a schema" || echo "with the schema")" \
      "$(fig "$name.rps")" "$(fig "$name.p50_ms")" "$(fig "$name.p99_ms")" \
      "$(fig "$name.non2xx")" "$(fig "$name.socket_errors")"
  done
  echo
  echo "- POST/s with the schema: ${RATIO} % of without (goal ≥ 85 %)"
  echo "- ingest writer, without: $(fig plain.writer)"
  echo "- ingest writer, with: $(fig schema.writer)"
} >"$REPORT"
publish_report "$REPORT"
for name in plain schema; do
  [ "$(fig "$name.non2xx")" = 0 ] || log "warning: $name: $(fig "$name.non2xx") non-2xx answers"
done
