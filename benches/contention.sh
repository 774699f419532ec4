#!/usr/bin/env bash
# Contention benchmark: what background work beside a server does to the latency of its
# ingest, one kind at a time, against the same load alone in the same run. It tells how much
# CPU and disk an erasure's background work may take (docs/src/erasure.md, "Cost").
#
# A fresh server gets the paced ingest load of the erasure benchmark (benches/post_paced.lua:
# CONNECTIONS connections, each pausing DELAY_MS before every POST of the ~1 KB record) for
# DURATION, once warming up and then:
#   alone       nothing else runs
#   cpu-1       one busy thread at nice 10 (a shell loop), as a background thread of intake
#   cpu-2       two of them: both cores of a 2-core machine
#   cpu-1-idle  one busy thread in the SCHED_IDLE policy (chrt --idle) instead of nice 10
#   cpu-2-idle  two of them
#   disk        a nice-10 writer of 400 MB files through the page cache (dd), over and over
#   disk-direct the same with O_DIRECT, bypassing the page cache
#   alone-again nothing else runs, as a check that the server did not drift
# Prints a Markdown table of each phase's p50, p99, p99 against `alone`, and POST/s, and
# writes it to RESULTS_FILE.
#
# Usage (from the repo root):
#   bash benches/contention.sh
#
# Env:
#   DURATION     each phase, wrk syntax       (default 20s)
#   CONNECTIONS  paced load's connections     (default 16)
#   DELAY_MS     pause before each POST       (default 10: about 1,500 POST/s in all)
#   INTAKE_BIN   use this intake binary instead of building one (optional)
#   RESULTS_FILE where to write the report (default benches/results/contention-latest.md)
#
# All traffic goes to 127.0.0.1 only; the disk phases write under the run's temporary dir.
set -euo pipefail

DURATION="${DURATION:-20s}"
CONNECTIONS="${CONNECTIONS:-16}"
DELAY_MS="${DELAY_MS:-10}"

# shellcheck source=benches/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RESULTS_FILE="${RESULTS_FILE:-$ROOT/benches/results/contention-latest.md}"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/intake-contention.XXXXXX")"
# The background work of the phase under way: a process group of its own.
HOG=""
stop_hog() {
  [ -n "$HOG" ] || return 0
  kill -- "-$HOG" 2>/dev/null || true
  wait "$HOG" 2>/dev/null || true
  HOG=""
  rm -f "$WORK/big"
}
cleanup_on_exit 100 stop_hog
require python3 curl dd nice chrt
ensure_wrk
build_intake
serve_env

init_intake "$WORK/data"
PORT="$(free_port)"
ADDR="$HOST:$PORT"
start_server intake "$PORT" 600 "${SERVE_ENV[@]}" "$INTAKE_BIN" serve --data-dir "$WORK/data" --listen "$ADDR"
create_endpoint "$ADDR"
URL="http://$ADDR/api/v1/data/$SLUG"

# beside PHASE [CMD...]: the paced load for DURATION while CMD runs in a process group of its
# own in the server's session (nothing without CMD), stopped after. CMD says how it is
# scheduled (nice, chrt).
beside() {
  local phase="$1"
  shift
  if [ "$#" -gt 0 ]; then
    # A process group of its own (job control), so that one kill ends it, but not a session
    # of its own: with the kernel's autogroup scheduling, a session is a group that shares
    # the CPU evenly with the server's, and its nice value or policy would rank it only
    # within that group, not against the server's threads as a background thread's does.
    set -m
    "$@" &
    HOG=$!
    set +m
  fi
  log "$phase"
  paced_post_load "$phase" "$URL" "$SANDBOX_KEY"
  stop_hog
}
spin() { while :; do :; done; }
write_files() { while :; do dd if=/dev/zero of="$WORK/big" bs=1M count=400 "$@" status=none; rm -f "$WORK/big"; done; }
export -f spin write_files
export WORK

beside warm-up
beside alone
NICER=(nice -n 10)
IDLE=(chrt --idle 0)
beside cpu-1 "${NICER[@]}" bash -c spin
beside cpu-2 "${NICER[@]}" bash -c 'spin & spin; wait'
beside cpu-1-idle "${IDLE[@]}" bash -c spin
beside cpu-2-idle "${IDLE[@]}" bash -c 'spin & spin; wait'
beside disk "${NICER[@]}" bash -c write_files
beside disk-direct "${NICER[@]}" bash -c 'write_files oflag=direct'
beside alone-again
stop_server intake "$SRV_PID" "$SRV_SUPER" 30

machine_facts
REPORT="$WORK/report.md"
{
  echo "## Contention benchmark"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit: $REV"
  echo "- machine: $NPROC CPUs (nproc), $CPU_MODEL"
  echo "- load: wrk -t2 -c$CONNECTIONS -d$DURATION, each connection pausing ${DELAY_MS} ms before every POST of the ~1 KB record of benches/post.lua; client and server share the machine"
  echo
  echo "| beside the load | p50 | p99 | p99 / alone | POST/s |"
  echo "| --- | ---: | ---: | ---: | ---: |"
  for phase in alone cpu-1 cpu-2 cpu-1-idle cpu-2-idle disk disk-direct alone-again; do
    f="$WORK/$phase.wrk"
    echo "| $phase | $(kv "$f" p50_ms) ms | $(kv "$f" p99_ms) ms | $(awk -v p="$(kv "$f" p99_ms)" -v a="$(kv "$WORK/alone.wrk" p99_ms)" 'BEGIN { printf "%.2f", p / a }')× | $(kv "$f" rps) |"
  done
} >"$REPORT"
publish_report "$REPORT"
