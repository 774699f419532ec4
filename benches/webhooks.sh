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
#      default: intake's defaults), SUBSCRIPTIONS (subscriptions to the receiver, default 1;
#      see benches/webhooks.py), INTAKE_BIN (skip the build), RESULTS_FILE, RESULTS_JSON
#      (also write the key figures there as JSON, see benches/webhooks.py), PROFILE_ENV (a
#      benches/profiles/NAME.env file whose INTAKE_* variables go to intake serve alone).
# All traffic goes to 127.0.0.1. See benches/webhooks.py for what each phase does.
set -euo pipefail

# shellcheck source=benches/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

run_receiver_driver webhooks.py "${RESULTS_FILE:-$ROOT/benches/results/webhooks-latest.md}"
