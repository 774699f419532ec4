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

# shellcheck source=benches/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

run_receiver_driver soak.py "${RESULTS_FILE:-$ROOT/benches/results/soak-latest.md}"
