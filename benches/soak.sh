#!/usr/bin/env bash
# Soak benchmark: mixed traffic (70 % POST, 20 % list/search/poll, 10 % PUT/DELETE) with an
# owner webhook to a local receiver, for 10 minutes by default; reports throughput, p99, RSS
# and queue depths over time, and checks that every 202 was stored and delivered.
#
# Usage (from the repo root):
#   bash benches/soak.sh
#
# Env: DURATION (seconds, default 600), CONNECTIONS (default 16), DELAY_MS (pause between
#      requests on a connection, default 6), SAMPLE (seconds between samples, default 5),
#      INTAKE_BIN (skip the build), RESULTS_FILE.
# All traffic goes to 127.0.0.1. See benches/soak.py for the checks.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
log() { echo "soak.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"

command -v python3 >/dev/null || die "python3 is required"
ensure_wrk

WORK="$(mktemp -d "${TMPDIR:-/tmp}/intake-soak.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

INTAKE_BIN="$(build_intake)"
[ -x "$INTAKE_BIN" ] || die "no intake binary at $INTAKE_BIN"
RECEIVER_BIN="$(build_receiver "$WORK")"
[ -x "$RECEIVER_BIN" ] || die "could not find the webhook_receiver executable in cargo's output"

BENCH_DIR="$ROOT/benches" python3 "$ROOT/benches/soak.py" \
  --intake "$INTAKE_BIN" --receiver "$RECEIVER_BIN" --work "$WORK" \
  --results "${RESULTS_FILE:-$ROOT/benches/results/soak-latest.md}"
