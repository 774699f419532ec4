#!/usr/bin/env bash
# Dashboard page benchmark (issue #24): each main page, the record browser (its table newest and
# oldest first, within a date range, and the record editor) and the request log
# of an endpoint holding RECORDS records (1,000,000 by default), with wrk; prints p50, p90 and
# p99 per page. Target: p99 <= 20 ms per page on the 2-core development machine.
#
# Starts a release `intake serve` on a fresh data dir (with `[webhooks]
# allow_private_targets = true`, so an owner webhook to a closed loopback port can be saved and
# every delivery of it fails and retries), writes RECORDS records with wrk (benches/post.lua)
# with no webhook, then adds the webhook, writes ENTRIES more (so the delivery log and the
# request log hold failing deliveries and fresh calls), invites a collaborator, logs in
# through the API for a session cookie, and runs wrk against every page for DURATION.
#
# wrk runs on the same two cores as the server, so its latencies include HTTP on loopback, the
# session lookup, the page's reads and the rendering: what a browser would wait for.
#
# Usage (from the repo root):
#   bash benches/dashboard.sh
#
# Env:
#   RECORDS      records to hold before measuring     (default 1000000)
#   ENTRIES      calls (and deliveries) made after the webhook is added (default 10000)
#   DURATION     wrk duration per page                (default 5s)
#   CONNECTIONS  wrk connections per page             (default 4)
#   INTAKE_BIN   use this intake binary instead of building one (optional)
#
# All traffic goes to 127.0.0.1 only.
set -euo pipefail

RECORDS="${RECORDS:-1000000}"
ENTRIES="${ENTRIES:-10000}"
DURATION="${DURATION:-5s}"
CONNECTIONS="${CONNECTIONS:-4}"
BENCH_NAME=dashboard
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
printf '[webhooks]\nallow_private_targets = true\n' >"$WORK/intake.toml"

"$INTAKE_BIN" serve --config "$WORK/intake.toml" --data-dir "$WORK/dir" --listen 127.0.0.1:0 \
  2>"$SERVER_LOG" &
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

# write N: at least N more data calls (wrk in rounds of 10 s, at most 16 connections).
calls() {
  field "$(api "$BASE/api/v1/manage/endpoints/$SLUG/usage")" \
    "['months'][0]['sandbox'] if json.loads(sys.argv[1])['months'] else 0"
}
write() {
  local target=$(($(calls) + $1))
  while [ "$(calls)" -lt "$target" ]; do
    INTAKE_KEY="$KEY" wrk -t 2 -c 16 -d 10s -s benches/post.lua "$BASE/api/v1/data/$SLUG" >/dev/null
  done
}
log "writing $RECORDS records"
write "$RECORDS"
api -X PUT "$BASE/api/v1/manage/endpoints/$SLUG/webhooks/sandbox" \
  -d '{"url":"http://127.0.0.1:9/hook"}' >/dev/null
log "writing $ENTRIES more with a failing owner webhook"
write "$ENTRIES"
api -X POST "$BASE/api/v1/manage/endpoints/$SLUG/invitations" \
  -d '{"email":"collab@example.com","permissions":["read"]}' >/dev/null
LAST="$(curl -sf -H "Authorization: Bearer $KEY" "$BASE/api/v1/data/$SLUG?limit=1")"
RECORD="$(field "$LAST" "['data'][0]['id']")"
# The newest record is stored once it reads back; then the request log's writer and the first
# attempts get a moment to settle before measuring.
sleep 3
DELIVERY="$(field "$(api "$BASE/api/v1/manage/endpoints/$SLUG/deliveries?limit=1")" "['data'][0]['id']")"
REQUEST="$(field "$(api "$BASE/api/v1/manage/endpoints/$SLUG/requests?limit=1")" "['data'][0]['request_id']")"
log "$(calls) data calls; newest record $RECORD, delivery $DELIVERY, request $REQUEST"

SESSION="$(curl -sf -D - -o /dev/null -H 'Content-Type: application/json' \
  -d "{\"email\":\"bench@example.com\",\"password\":\"$PASSWORD\"}" "$BASE/api/v1/auth/login" |
  grep -oi 'intake_session=[^;]*')"

E="/dashboard/endpoints/$SLUG"
# The records table within a date range: the day the records were written (UTC), so the
# range holds them all and the page reads as far as a range can make it.
TODAY="$(date -u +%F)"
PAGES=(
  "/dashboard/endpoints"
  "$E"
  "$E/production"
  "$E/records"
  "$E/records?q=Kowalska"
  "$E/records?order=oldest"
  "$E/records?from=$TODAY&to=$TODAY&order=oldest"
  "$E/records?from=$TODAY&to=$TODAY&q=Kowalska"
  "$E/records/$RECORD?environment=sandbox"
  "$E/records/new?environment=sandbox"
  "$E/records/$RECORD/edit?environment=sandbox"
  "$E/requests"
  "$E/requests?status=2xx&method=POST"
  "$E/requests/$REQUEST"
  "$E/deliveries"
  "$E/deliveries?state=failing"
  "$E/deliveries/$DELIVERY"
  "$E/webhooks"
  "$E/webhooks/sandbox/subscriptions/sub_1"
  "$E/collaborators"
  "$E/usage"
  "$E/test"
  "/dashboard/notifications"
)
# The page as the report names it: the ids of this run replaced by what they stand for.
label() {
  local page="$1" slug='{slug}' record='{record_id}' delivery='{id}' request='{request_id}'
  local today='{today}'
  page="${page//$SLUG/$slug}"
  page="${page//$TODAY/$today}"
  page="${page//$RECORD/$record}"
  page="${page//deliveries\/$DELIVERY/deliveries/$delivery}"
  echo "${page//$REQUEST/$request}"
}
printf '%-74s %9s %9s %9s %9s\n' "page ($RECORDS records, $DURATION, $CONNECTIONS conn.)" p50 p90 p99 pages/s
for page in "${PAGES[@]}"; do
  status="$(curl -s -o /dev/null -w '%{http_code}' -H "Cookie: $SESSION" "$BASE$page")"
  [ "$status" = 200 ] || die "$page answered $status"
  wrk -t 2 -c "$CONNECTIONS" -d "$DURATION" --latency -H "Cookie: $SESSION" "$BASE$page" |
    awk -v page="$(label "$page")" '
      $1 == "50%" { p50 = $2 } $1 == "90%" { p90 = $2 } $1 == "99%" { p99 = $2 }
      $1 == "Requests/sec:" { rps = $2 }
      END { printf "%-74s %9s %9s %9s %9s\n", page, p50, p90, p99, rps }'
done
