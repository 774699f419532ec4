#!/usr/bin/env bash
# Payload compression benchmark (issue #22, goal 3): which codec pays for itself on stored
# payloads. Generates RECORDS varied ~1 KB records (benches/search_gen.py --parts 2, the data
# dir benchmark's records) unless DATA names them, then runs benches/payload_codec.rs over
# them: LZ4 and zstd (levels 1 and 3, without and with a dictionary trained on the first
# 5,000 records), each record compressed on its own as the store does. Prints a Markdown
# table (stored bytes per payload byte; CPU time per record to compress and to decompress,
# one thread) and writes it to RESULTS_FILE.
#
# Usage (from the repo root):
#   bash benches/payload_codec.sh
#   RECORDS=20000 bash benches/payload_codec.sh
#
# Env:
#   RECORDS       records to generate and compress           (default 50000)
#   DATA          a folder with records.jsonl from search_gen.py --parts 2 (optional)
#   REPS          passes over the records; the median counts  (default 5)
#   RESULTS_FILE  where the report goes (default benches/results/payload-codec-latest.md)
# About a minute plus the build on 2 cores. Needs python3.
set -euo pipefail

RECORDS="${RECORDS:-50000}"
REPS="${REPS:-5}"

# shellcheck source=benches/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RESULTS_FILE="${RESULTS_FILE:-$ROOT/benches/results/payload-codec-latest.md}"

case "$RECORDS" in ''|*[!0-9]*) die "RECORDS must be a positive integer (got '$RECORDS')" ;; esac
WORK="$(mktemp -d "${TMPDIR:-/tmp}/intake-payload-codec.XXXXXX")"
cleanup_on_exit 10
require python3

CODEC="$(build_bench payload_codec)"
if [ -z "${DATA:-}" ]; then
  DATA="$WORK/gen"
  log "generating $RECORDS records of about 1 KB (search_gen.py --parts 2)"
  python3 "$ROOT/benches/search_gen.py" --records "$RECORDS" --parts 2 --no-copy \
    --out "$DATA" >/dev/null || die "search_gen.py failed"
fi
[ -f "$DATA/records.jsonl" ] || die "no records.jsonl in DATA=$DATA"

machine_facts
REPORT="$WORK/report.md"
{
  echo "## Payload compression benchmark"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit: $REV"
  echo "- machine: $NPROC CPUs (nproc), $CPU_MODEL"
  echo "- run: \`RECORDS=$RECORDS REPS=$REPS bash benches/payload_codec.sh\`"
  echo
  "$CODEC" "$DATA/records.jsonl" --records "$RECORDS" --reps "$REPS"
} >"$REPORT"
publish_report "$REPORT"
