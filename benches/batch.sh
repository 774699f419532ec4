#!/usr/bin/env bash
# Batch ingest benchmark: records/s of single POSTs against 100-record batches, in one run.
#
# The same wrk load as the ingest benchmark (benches/post.lua: the ~1 KB record, keep-alive,
# CONNECTIONS connections) runs twice against intake, each time on a fresh server and data dir:
# first one record per POST, then BATCH copies of it per request as NDJSON to the batch route.
# Prints a Markdown table (requests/s, records/s, p50, p99 of a request, the ingest writer's
# account) and writes it to benches/results/batch-latest.md.
#
# Usage (from the repo root):
#   bash benches/batch.sh
#
# Env:
#   DURATION     wrk duration of each run    (default 30s)
#   CONNECTIONS  wrk connections             (default 64)
#   THREADS      wrk threads                 (default 2)
#   BATCH        records per batch request   (default 100)
#   INTAKE_BIN   use this intake binary instead of building one (optional)
#   RESULTS_FILE where to write the report (default benches/results/batch-latest.md)
#
# All traffic goes to 127.0.0.1 only.
set -euo pipefail

DURATION="${DURATION:-30s}"
CONNECTIONS="${CONNECTIONS:-64}"
THREADS="${THREADS:-2}"
BATCH="${BATCH:-100}"

# shellcheck source=benches/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RESULTS_FILE="${RESULTS_FILE:-$ROOT/benches/results/batch-latest.md}"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/intake-batch.XXXXXX")"
cleanup_on_exit 50
require python3 curl
ensure_wrk
build_intake
serve_env

declare -A FIG=()

post_load_run single 1
post_load_run batch "$BATCH"

machine_facts
fig() { echo "${FIG[$1]:-}"; }
RATIO="$(awk -v b="$(fig batch.records_s)" -v s="$(fig single.records_s)" 'BEGIN { if (s > 0) printf "%.1f", b / s; else print "n/a" }')"
REPORT="$WORK/report.md"
{
  echo "## Batch ingest benchmark"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit: $REV"
  echo "- machine: $NPROC CPUs (nproc), $CPU_MODEL"
  echo "- load: wrk -t$THREADS -c$CONNECTIONS -d$DURATION, keep-alive, the $(fig single.body_bytes)-byte JSON record of benches/post.lua: one per POST, then $BATCH per batch request (NDJSON); a fresh server for each; client and server share the machine"
  echo
  echo "| load | requests/s | records/s | p50 | p99 | non-2xx | socket errors |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
  for name in single batch; do
    printf '| %s | %s | %s | %s ms | %s ms | %s | %s |\n' \
      "$([ "$name" = single ] && echo "single POST" || echo "batch of $BATCH")" \
      "$(fig "$name.rps")" "$(fig "$name.records_s")" "$(fig "$name.p50_ms")" \
      "$(fig "$name.p99_ms")" "$(fig "$name.non2xx")" "$(fig "$name.socket_errors")"
  done
  echo
  echo "- records/s, batches over single POSTs: ${RATIO}×"
  echo "- ingest writer, single POSTs: $(fig single.writer)"
  echo "- ingest writer, batches: $(fig batch.writer)"
} >"$REPORT"
publish_report "$REPORT"
for name in single batch; do
  [ "$(fig "$name.non2xx")" = 0 ] || log "warning: $name: $(fig "$name.non2xx") non-2xx answers"
done
