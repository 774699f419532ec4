#!/usr/bin/env bash
# Dashboard page benchmark: the request-log and delivery-log pages with at least 10,000
# entries present (issue #7: pages render in < 50 ms server-side; they show one page of 50
# and 25 rows, never the whole log).
#
# Starts a release `intake serve` on a fresh data dir, creates an endpoint with a sandbox
# owner webhook (to a loopback URL, which the SSRF guard refuses, so every write leaves a
# delivery with its attempts), writes records with wrk (benches/post.lua) until 10,000 data
# calls are logged, logs in through the API for a session cookie, then runs wrk against the
# two pages and prints wrk's latency distribution for each.
#
# Usage (from the repo root):
#   bash benches/dashboard.sh
#
# Env:
#   ENTRIES      data calls to log first      (default 10000)
#   DURATION     wrk duration per page        (default 10s)
#   CONNECTIONS  wrk connections per page     (default 4)
#   INTAKE_BIN   use this intake binary instead of building one (optional)
#
# All traffic goes to 127.0.0.1 only.
set -euo pipefail

ENTRIES="${ENTRIES:-10000}"
DURATION="${DURATION:-10s}"
CONNECTIONS="${CONNECTIONS:-4}"
# shellcheck source=benches/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ensure_wrk
command -v curl >/dev/null || die "curl is needed"

WORK="$(mktemp -d)"
SERVER_LOG="$WORK/serve.log"
PID=""
cleanup() { [ -n "$PID" ] && stop_servers 50 "$PID"; rm -rf "$WORK"; }
trap cleanup EXIT

build_intake
INIT="$("$INTAKE_BIN" init --data-dir "$WORK/dir" --owner-email bench@example.com --json)"
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])$2)" "$1"; }
TOKEN="$(field "$INIT" "['token']")"
PASSWORD="$(field "$INIT" "['password']")"

"$INTAKE_BIN" serve --data-dir "$WORK/dir" --listen 127.0.0.1:0 2>"$SERVER_LOG" &
PID=$!
LISTENING=""
for _ in $(seq 1 100); do
  LISTENING="$(grep -o 'listening on http://[0-9.:]*' "$SERVER_LOG" || true)"
  [ -n "$LISTENING" ] && break
  sleep 0.1
done
BASE="${LISTENING#listening on }"
[ -n "$BASE" ] || die "server did not start: $(cat "$SERVER_LOG")"
log "server at $BASE"

api() { curl -sf -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' "$@"; }
EP="$(api -X POST "$BASE/api/v1/manage/endpoints" -d '{"name":"Bench"}')"
SLUG="$(field "$EP" "['slug']")"
KEY="$(field "$EP" "['sandbox_key']")"
api -X PUT "$BASE/api/v1/manage/endpoints/$SLUG/webhooks/sandbox" \
  -d '{"url":"http://127.0.0.1:9/hook"}' >/dev/null

calls() {
  field "$(api "$BASE/api/v1/manage/endpoints/$SLUG/usage")" "['months'][0]['sandbox'] if json.loads(sys.argv[1])['months'] else 0"
}
while [ "$(calls)" -lt "$ENTRIES" ]; do
  INTAKE_KEY="$KEY" wrk -t 2 -c 16 -d 3s -s benches/post.lua "$BASE/api/v1/data/$SLUG" >/dev/null
done
log "$(calls) data calls logged; waiting for the log writer"
sleep 2

SESSION="$(curl -sf -D - -o /dev/null -H 'Content-Type: application/json' \
  -d "{\"email\":\"bench@example.com\",\"password\":\"$PASSWORD\"}" "$BASE/api/v1/auth/login" |
  grep -oi 'intake_session=[^;]*')"

for page in requests deliveries; do
  echo "== /dashboard/endpoints/{slug}/$page ($DURATION, $CONNECTIONS connections)"
  wrk -t 2 -c "$CONNECTIONS" -d "$DURATION" --latency -H "Cookie: $SESSION" \
    "$BASE/dashboard/endpoints/$SLUG/$page" | sed -n '/Latency Distribution/,/Requests\/sec/p'
done
