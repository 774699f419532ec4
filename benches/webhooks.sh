#!/usr/bin/env bash
# Webhook benchmark: deliveries per second to a local receiver that answers 200 at once, and
# the latency from a POST to the receiver at about 1,000 writes/s, against the receiver's own
# ceiling measured in the same run.
#
# Usage (from the repo root):
#   bash benches/webhooks.sh
#
# Env: BURST (full-speed write phase, default 5s), PACED (paced phase, default 20s),
#      CONNECTIONS (paced phase connections, default 12), DELAY_MS (per-connection pause,
#      default 8), WORKERS / PER_TARGET ([webhooks] workers / per_target_concurrency,
#      default: intake's defaults), INTAKE_BIN (skip the build), RESULTS_FILE.
# All traffic goes to 127.0.0.1. See benches/webhooks.py for what each phase does.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
log() { echo "webhooks.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"

command -v python3 >/dev/null || die "python3 is required"
ensure_wrk

WORK="$(mktemp -d "${TMPDIR:-/tmp}/intake-webhooks.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

INTAKE_BIN="$(build_intake)"
[ -x "$INTAKE_BIN" ] || die "no intake binary at $INTAKE_BIN"
RECEIVER_BIN="$(build_receiver "$WORK")"
[ -x "$RECEIVER_BIN" ] || die "could not find the webhook_receiver executable in cargo's output"

BENCH_DIR="$ROOT/benches" python3 "$ROOT/benches/webhooks.py" \
  --intake "$INTAKE_BIN" --receiver "$RECEIVER_BIN" --work "$WORK" \
  --results "${RESULTS_FILE:-$ROOT/benches/results/webhooks-latest.md}"
