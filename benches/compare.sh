#!/usr/bin/env bash
# Compares two intake builds in one run: the ingest benchmark (ONLY=intake), the search
# benchmark (ONLY=intake), the poll drain and the webhook benchmark (deliveries/s draining a
# backlog, and the latency from a POST to its delivery), each run through its own script for both
# binaries in turn (base, new, base, new, ...: ROUNDS rounds), so that both see the same
# machine. Prints one Markdown table (per metric: every run's figure for each binary, the
# median per binary, new/base, and the spread between the runs of one binary) and writes it
# to benches/results/compare-latest.md. Each run's report, figures (RESULTS_JSON) and log go
# to benches/results/compare/ (replaced by the next comparison; git ignores it).
#
# Usage (from the repo root):
#   bash benches/compare.sh BASE_BIN NEW_BIN
#   ROUNDS=3 bash benches/compare.sh /tmp/intake-main target/dist/intake
#
# Env (the defaults are sized to take about 22 minutes on an otherwise idle 2-core machine):
#   ROUNDS           runs of each benchmark per binary              (default 2)
#   INGEST_DURATION  ingest.sh's DURATION (wrk run length)          (default 20s)
#   SEARCH_RECORDS   search.sh's RECORDS                            (default 200000)
#   SEARCH_REPS      search.sh's REPS                               (default 10)
#   POLL_RECORDS     poll_drain.sh's RECORDS                        (default 400000)
#   POLL_WARM        poll_drain.sh's WARM: 1 reads the backlog into the page cache before
#                    the drain, so the kernel's evictions do not blur the comparison (default 1)
#   WEBHOOK_BURST    webhooks.sh's BURST (the backlog's write phase)  (default 5s)
#   WEBHOOK_PACED    webhooks.sh's PACED (the latency phase)          (default 10s)
#   RESULTS_FILE     where to write the table (default benches/results/compare-latest.md)
#
# Exits 1 when a run failed or its figure is not what the table says (a warning under the
# table names it). All traffic goes to 127.0.0.1 only.
set -euo pipefail

ROUNDS="${ROUNDS:-2}"
INGEST_DURATION="${INGEST_DURATION:-20s}"
SEARCH_RECORDS="${SEARCH_RECORDS:-200000}"
SEARCH_REPS="${SEARCH_REPS:-10}"
POLL_RECORDS="${POLL_RECORDS:-400000}"
POLL_WARM="${POLL_WARM:-1}"
WEBHOOK_BURST="${WEBHOOK_BURST:-5s}"
WEBHOOK_PACED="${WEBHOOK_PACED:-10s}"

# shellcheck source=benches/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RESULTS_FILE="${RESULTS_FILE:-$ROOT/benches/results/compare-latest.md}"
RUNS_DIR="$ROOT/benches/results/compare"

[ "$#" = 2 ] || { echo "usage: bash benches/compare.sh BASE_BIN NEW_BIN" >&2; exit 2; }
case "$ROUNDS" in ''|*[!0-9]*|0) die "ROUNDS must be a positive integer (got '$ROUNDS')" ;; esac
BASE_BIN="$(realpath "$1")"
NEW_BIN="$(realpath "$2")"
for bin in "$BASE_BIN" "$NEW_BIN"; do
  [ -x "$bin" ] || die "$bin is not an executable"
done

cleanup_on_exit 50
require python3

# run_benchmark BENCH SIDE ROUND: one run of the benchmark BENCH (ingest, search, poll or
# webhooks) with
# SIDE's binary and compare.sh's sizes; its report, figures and log go to
# RUNS_DIR/BENCH-SIDE-ROUND.{md,json,log}. A failed run is logged, and the comparison goes on.
run_benchmark() {
  local bench="$1" side="$2" round="$3" bin script sizes t0 rc=0
  local stem="$RUNS_DIR/$bench-$side-$round"
  bin="$BASE_BIN"
  [ "$side" = new ] && bin="$NEW_BIN"
  case "$bench" in
    ingest) script=ingest.sh; sizes=(ONLY=intake DURATION="$INGEST_DURATION") ;;
    search) script=search.sh; sizes=(ONLY=intake RECORDS="$SEARCH_RECORDS" REPS="$SEARCH_REPS") ;;
    poll) script=poll_drain.sh; sizes=(RECORDS="$POLL_RECORDS" WARM="$POLL_WARM") ;;
    webhooks) script=webhooks.sh; sizes=(BURST="$WEBHOOK_BURST" PACED="$WEBHOOK_PACED") ;;
  esac
  log "round $round/$ROUNDS: $bench, $side"
  t0="$(date +%s)"
  run_bg env "${sizes[@]}" INTAKE_BIN="$bin" RESULTS_FILE="$stem.md" RESULTS_JSON="$stem.json" \
    bash "$ROOT/benches/$script" >"$stem.log" 2>&1 || rc=$?
  if [ "$rc" = 0 ]; then
    log "  done in $(( $(date +%s) - t0 )) s"
  else
    log "  FAILED (exit status $rc) after $(( $(date +%s) - t0 )) s; the end of ${stem#"$ROOT"/}.log:"
    tail -n 15 "$stem.log" >&2
  fi
}

rm -rf "$RUNS_DIR"
mkdir -p "$RUNS_DIR"
printf '*\n' >"$RUNS_DIR/.gitignore"   # scratch: compare-latest.md is the record

T_START="$(date +%s)"
LOADAVG_START="$(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$ROUNDS"); do
  for bench in ingest search poll webhooks; do
    for side in base new; do
      run_benchmark "$bench" "$side" "$round"
    done
  done
done
ELAPSED="$(( $(date +%s) - T_START ))"

machine_facts
RC=0
python3 "$ROOT/benches/compare.py" --runs "$RUNS_DIR" --rounds "$ROUNDS" \
  --base "$BASE_BIN" --new "$NEW_BIN" \
  --header "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ), benches from commit $REV; whole comparison $(( ELAPSED / 60 )) min $(( ELAPSED % 60 )) s; load average at its start: $LOADAVG_START" \
  --header "- machine: $NPROC CPUs (nproc), $CPU_MODEL; every benchmark's client shares it with the server" \
  --header "- rounds: $ROUNDS, each: ingest base, new; search base, new; poll drain base, new; webhooks base, new" \
  --header "- sizes: ingest.sh ONLY=intake DURATION=$INGEST_DURATION; search.sh ONLY=intake RECORDS=$SEARCH_RECORDS REPS=$SEARCH_REPS (search figures through wrk, the C client); poll_drain.sh RECORDS=$POLL_RECORDS WARM=$POLL_WARM; webhooks.sh BURST=$WEBHOOK_BURST PACED=$WEBHOOK_PACED" \
  --out "$RESULTS_FILE" || RC=$?
log "written to ${RESULTS_FILE#"$ROOT"/}; each run's report and log in ${RUNS_DIR#"$ROOT"/}/"
exit "$RC"
