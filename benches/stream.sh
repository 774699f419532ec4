#!/usr/bin/env bash
# Change stream benchmark: events/s fanned out to READERS concurrent Server-Sent Events readers
# of one endpoint's change stream (GET /api/v1/data/{slug}/stream), and the latency from a
# write's receipt to its event at the readers, under full-speed writes and at about 1,000
# writes/s; the same writes without any stream open give the baseline writes/s.
#
# Usage (from the repo root):
#   bash benches/stream.sh
#   READERS=10 BURST=2 PACED=5 bash benches/stream.sh     # a quick check
#
# Env: READERS (streams, default 100), BURST (full-speed phase, seconds, default 10), PACED
#      (paced phase, seconds, default 20), CONNECTIONS (burst connections, default 32),
#      PACED_CONNECTIONS (default 24), DELAY_MS (pause per paced connection before each POST,
#      default 20), DRAIN_TIMEOUT (most seconds to wait for the readers to catch up, default
#      300), INTAKE_BIN (skip the build), RESULTS_FILE, RESULTS_JSON (also write the key
#      figures there as JSON), PROFILE_ENV (a benches/profiles/NAME.env file whose INTAKE_*
#      variables go to intake serve alone).
# All traffic goes to 127.0.0.1. See benches/stream.py for what each phase does and
# benches/stream_readers.rs for the readers.
set -euo pipefail

# shellcheck source=benches/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RESULTS_FILE="${RESULTS_FILE:-$ROOT/benches/results/stream-latest.md}"
require python3
ensure_wrk
WORK="$(mktemp -d "${TMPDIR:-/tmp}/intake-stream.XXXXXX")"
cleanup_on_exit 50
build_intake
readers="$(build_bench stream_readers)"
mkdir -p "$(dirname "$RESULTS_FILE")"
export BENCH_DIR="$ROOT/benches"
run_bg python3 "$ROOT/benches/stream.py" \
  --intake "$INTAKE_BIN" --readers "$readers" --work "$WORK" --results "$RESULTS_FILE"
