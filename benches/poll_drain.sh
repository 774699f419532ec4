#!/usr/bin/env bash
# Poll drain benchmark: how fast a consumer can drain a backlog through intake's poll feed.
#
# 1. Builds intake, provisions a fresh data dir (`intake init --json`) and starts
#    `intake serve` with `[poll] hold_back = "0s"`, so records are visible to poll at once.
# 2. Loads the backlog: exactly RECORDS ~1 KB records (the record of benches/post.lua) POSTed
#    by wrk with benches/poll_load.lua (LOAD_THREADS threads, LOAD_CONNECTIONS connections;
#    every POST must be answered 202).
# 3. Waits until the server is idle (the search indexer consumes the change log after the
#    writes), so the drain does not share the CPU with the server's own catch-up.
# 4. Drains it: wrk -t1 -c1 with benches/poll_drain.lua, one keep-alive connection, GET
#    .../poll?since=2000-01-01&limit=100, then ?cursor=<next_cursor> until the answer carries
#    poll_cursor. Counts records and pages, checks that the record ids strictly increase and
#    that every loaded record came back, times every page.
# 5. Samples the server's memory (lib.sh's mem_watch: smaps_rollup's Rss, Anonymous and
#    file-backed) every RSS_INTERVAL from its start to its stop, and reads VmHWM before the
#    drain and after it (reset in between), for the peak of the load and that of the drain.
# 6. Stops the server and measures its data dir (du -sb of each part) against the payload.
#
# Prints a Markdown table and writes it to benches/results/poll-latest.md.
#
# Usage (from the repo root):
#   bash benches/poll_drain.sh
#   RECORDS=100000 bash benches/poll_drain.sh        # a quick run
#
# Env:
#   RECORDS           records to load and drain        (default 1000000)
#   LIMIT             poll page size, 1 to 100         (default 100)
#   LOAD_THREADS      wrk threads for the load         (default 2)
#   LOAD_CONNECTIONS  wrk connections for the load     (default 64)
#   RSS_INTERVAL      RSS sampling period in seconds   (default 0.25)
#   IDLE_TIMEOUT      most seconds to wait for the server to go idle after the load (default 900)
#   WARM              1: read the data dir into the OS page cache before the drain (default 0)
#   INTAKE_BIN        use this intake binary instead of building one (optional)
#   PROFILE_ENV       a profile file (benches/profiles/NAME.env): its INTAKE_* variables are
#                     given to `intake serve` and nothing else (optional; benches/lean.sh sets it)
#   RESULTS_FILE      where to write the report (default benches/results/poll-latest.md)
#   RESULTS_JSON      also write the key figures there as JSON (optional; benches/compare.sh
#                     and benches/lean.sh read them): records_per_s, page_p50_ms, page_p99_ms,
#                     records, check; peak_rss_mb (VmHWM, whole run), load_peak_rss_mb,
#                     drain_peak_rss_mb (VmHWM of the load, of the drain), idle_rss_mb,
#                     {run,drain}_peak_{sampled_rss,anon,file}_mb (the samples' largest),
#                     payload_bytes (records x body), datadir_bytes, datadir.PART bytes
#
# All traffic goes to 127.0.0.1 only. Everything started here is stopped, and the temporary
# directory (data dir included) removed, on any exit.
set -euo pipefail

RECORDS="${RECORDS:-1000000}"
LIMIT="${LIMIT:-100}"
LOAD_THREADS="${LOAD_THREADS:-2}"
LOAD_CONNECTIONS="${LOAD_CONNECTIONS:-64}"
RSS_INTERVAL="${RSS_INTERVAL:-0.25}"
WARM="${WARM:-0}"
IDLE_TIMEOUT="${IDLE_TIMEOUT:-900}"

# shellcheck source=benches/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
LOAD_LUA="$ROOT/benches/poll_load.lua"
DRAIN_LUA="$ROOT/benches/poll_drain.lua"
RESULTS_FILE="${RESULTS_FILE:-$ROOT/benches/results/poll-latest.md}"
MEM_INTERVAL="$RSS_INTERVAL"

case "$RECORDS" in ''|*[!0-9]*) die "RECORDS must be a positive integer (got '$RECORDS')" ;; esac
[ "$RECORDS" -ge 1 ] || die "RECORDS must be at least 1"
case "$LIMIT" in ''|*[!0-9]*) die "LIMIT must be an integer from 1 to 100 (got '$LIMIT')" ;; esac
{ [ "$LIMIT" -ge 1 ] && [ "$LIMIT" -le 100 ]; } || die "LIMIT must be from 1 to 100 (got $LIMIT)"

# ---------------------------------------------------------------- cleanup

WORK="$(mktemp -d "${TMPDIR:-/tmp}/intake-poll-bench.XXXXXX")"
WRK_PID=""       # a running wrk

stop_pid() { # PID: SIGTERM, wait up to 15 s, then SIGKILL; reaps it (our child)
  local pid="$1"
  [ -n "$pid" ] || return 0
  stop_servers 150 "$pid"
  wait "$pid" 2>/dev/null || true
}

stop_helpers() {
  stop_pid "$WRK_PID"
}
cleanup_on_exit 150 stop_helpers

# ---------------------------------------------------------------- tools

require python3 curl

ensure_wrk

# read_bytes PID -> bytes the process has caused to be read from storage (not the page cache)
read_bytes() { awk '$1 == "read_bytes:" { print $2 }' "/proc/$1/io"; }

# load_avg -> "1.23 2.34 3.45" (1, 5, 15 minutes)
load_avg() { awk '{ print $1, $2, $3 }' /proc/loadavg; }

# busy_ticks -> CPU ticks spent by the whole machine outside idle and iowait (all CPUs)
busy_ticks() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }

# now_s -> seconds since the epoch with fractions
now_s() { date +%s.%N; }

# wait_marker COUNT DIR_OR_FILE... : waits until COUNT of the given files exist, or wrk exits
wait_files() {
  local want="$1"; shift
  local have f
  while :; do
    have=0
    for f in "$@"; do
      [ -e "$f" ] && have=$((have + 1))
    done
    [ "$have" -ge "$want" ] && return 0
    kill -0 "$WRK_PID" 2>/dev/null || return 1
    sleep 0.05
  done
}

# stop_wrk: wrk's main thread sleeps out its -d even when the script has stopped every
# thread; SIGINT ends the sleep, and wrk prints its summary (done()) and exits.
stop_wrk() {
  kill -INT "$WRK_PID" 2>/dev/null || true
  wait "$WRK_PID" || true
  WRK_PID=""
}

# --------------------------------------------------------------- build

build_intake
serve_env

# --------------------------------------------------------------- server

DATA_DIR="$WORK/data"
CONFIG="$WORK/intake.toml"
printf '[poll]\nhold_back = "0s"\n' >"$CONFIG"
init_intake "$DATA_DIR"

PORT="$(free_port)"
ADDR="$HOST:$PORT"
start_server intake "$PORT" 30 "${SERVE_ENV[@]}" "$INTAKE_BIN" serve --config "$CONFIG" --data-dir "$DATA_DIR" --listen "$ADDR"
SERVER_PID="$SRV_PID"; SERVER_SUPER="$SRV_SUPER"
MEM_FILE="$WORK/mem.samples"
mem_watch "$SERVER_PID" "$MEM_FILE"
SAMPLER_PID="$MEM_WATCH_PID"
curl -sf -o /dev/null "http://$ADDR/healthz" || { cat "$SRV_LOG" >&2; die "intake serve is not answering on $ADDR"; }
log "intake: config: [poll] hold_back = \"0s\""

create_endpoint "$ADDR"
DATA_PATH="/api/v1/data/$SLUG"
POLL_ROUTE="$DATA_PATH/poll"

# The key must open the poll (a wrong route or key would otherwise be "drained" as errors).
CODE="$(curl -s -o "$WORK/probe.json" -w '%{http_code}' "http://$ADDR$POLL_ROUTE?limit=1" \
  -H "Authorization: Bearer $SANDBOX_KEY")" || CODE=000
[ "$CODE" = 200 ] || die "intake: probe GET $POLL_ROUTE answered $CODE: $(cat "$WORK/probe.json" 2>/dev/null || true)"
IDLE_KB="$(proc_kb "$SERVER_PID" VmRSS)"

# --------------------------------------------------------------- load

UPTIME_START="$(uptime | sed "s/^ *//")"
log "uptime before loading: $UPTIME_START"
LOAD_DONE_DIR="$WORK/load-done"
mkdir -p "$LOAD_DONE_DIR"
# -d only bounds a stuck run: the load stops itself once all RECORDS are answered.
LOAD_LIMIT_S=$(( RECORDS / 500 + 120 ))
log "loading $RECORDS records: wrk -t$LOAD_THREADS -c$LOAD_CONNECTIONS -s benches/poll_load.lua (bounded; at most ${LOAD_LIMIT_S}s)"
PATH_TO_POST="$DATA_PATH" INTAKE_KEY="$SANDBOX_KEY" POLL_LOAD_TOTAL="$RECORDS" \
  POLL_LOAD_THREADS="$LOAD_THREADS" POLL_LOAD_DONE_DIR="$LOAD_DONE_DIR" \
  wrk -t"$LOAD_THREADS" -c"$LOAD_CONNECTIONS" -d"${LOAD_LIMIT_S}s" --timeout 60s -s "$LOAD_LUA" \
  "http://$ADDR$DATA_PATH" >"$WORK/load.out" 2>"$WORK/load.err" &
WRK_PID=$!
MARKERS=()
for i in $(seq 1 "$LOAD_THREADS"); do MARKERS+=("$LOAD_DONE_DIR/thread-$i"); done
LOAD_OK=1
wait_files "$LOAD_THREADS" "${MARKERS[@]}" || LOAD_OK=0
stop_wrk
cat "$WORK/load.err" >&2
grep -v '^[a-z_0-9]* [0-9.]*$' "$WORK/load.out" >&2 || true
[ "$LOAD_OK" = 1 ] || die "the load did not finish: wrk stopped before every POST was answered (socket errors: $(kv "$WORK/load.out" socket_errors))"
LOADED="$(kv "$WORK/load.out" load_accepted)"
LOAD_FAILED="$(kv "$WORK/load.out" load_failed)"
LOAD_SECONDS="$(kv "$WORK/load.out" load_seconds)"
BODY_BYTES="$(kv "$WORK/load.out" load_body_bytes)"
[ "$LOAD_FAILED" = 0 ] || die "$LOAD_FAILED POSTs were not answered 202"
[ "$LOADED" = "$RECORDS" ] || die "loaded $LOADED records, expected $RECORDS"
LOAD_RPS="$(awk -v n="$LOADED" -v s="$LOAD_SECONDS" 'BEGIN { printf "%.0f", (s > 0 ? n / s : 0) }')"
log "loaded $LOADED records in ${LOAD_SECONDS}s ($LOAD_RPS/s)"

# --------------------------------------------------------------- settle

# After the writes the search indexer works through the change log. Wait until the server
# uses under 2% of a core over 2 s running, so the drain measures poll alone.
log "waiting for the server to go idle (at most ${IDLE_TIMEOUT}s)"
wait_idle "$SERVER_PID" "$IDLE_TIMEOUT"
if [ "$SETTLED" = 1 ]; then
  log "server idle after ${SETTLE_S}s"
else
  log "warning: the server was still busy after ${SETTLE_S}s; draining anyway"
fi
DATA_MB="$(du -sm "$DATA_DIR" | awk '{ print $1 }')"
if [ "$WARM" = 1 ]; then
  # Reading the data files once puts them in the OS page cache: the drain then measures
  # intake, not how much of the backlog the kernel has evicted since it was written.
  log "WARM=1: reading the data dir once into the page cache"
  find "$DATA_DIR" -type f -exec cat {} + >/dev/null
  CACHE_NOTE="page cache warmed before the drain (WARM=1)"
else
  CACHE_NOTE="page cache as the load left it (WARM=0)"
fi

# --------------------------------------------------------------- drain

LOAD_AVG_DRAIN="$(load_avg)"
log "uptime before the drain: $(uptime)"
# VmHWM so far is the peak of the start, the load and the settling; reset, it becomes the
# drain's own peak.
LOAD_HWM_KB="$(proc_kb "$SERVER_PID" VmHWM)"
if hwm_reset "$SERVER_PID"; then HWM_RESET=1; else HWM_RESET=0; log "warning: could not reset VmHWM"; fi
DRAIN_T0="$EPOCHREALTIME"
mem_sample_once "$SERVER_PID" >>"$MEM_FILE"   # one sample at each end, however short the drain

DRAIN_DONE="$WORK/drain.done"
SERVER_TICKS_0="$(cpu_ticks "$SERVER_PID")"
SERVER_READ_0="$(read_bytes "$SERVER_PID")"
BUSY_TICKS_0="$(busy_ticks)"
DRAIN_LIMIT_S=$(( RECORDS / 1000 + 120 ))
log "draining: wrk -t1 -c1 -s benches/poll_drain.lua $POLL_ROUTE?since=2000-01-01&limit=$LIMIT"
INTAKE_KEY="$SANDBOX_KEY" POLL_PATH="$POLL_ROUTE" POLL_SINCE=2000-01-01 POLL_LIMIT="$LIMIT" \
  POLL_DONE_FILE="$DRAIN_DONE" \
  wrk -t1 -c1 -d"${DRAIN_LIMIT_S}s" --timeout 30s -s "$DRAIN_LUA" "http://$ADDR$POLL_ROUTE" \
  >"$WORK/drain.out" 2>"$WORK/drain.err" &
WRK_PID=$!
DRAIN_OK=1
wait_files 1 "$DRAIN_DONE" || DRAIN_OK=0
SERVER_TICKS_1="$(cpu_ticks "$SERVER_PID")"
SERVER_READ_1="$(read_bytes "$SERVER_PID")"
BUSY_TICKS_1="$(busy_ticks)"
WRK_TICKS="$(cpu_ticks "$WRK_PID" 2>/dev/null || echo "")"
mem_sample_once "$SERVER_PID" >>"$MEM_FILE" || true
DRAIN_T1="$EPOCHREALTIME"
stop_wrk
DRAIN_HWM_KB="$(proc_kb "$SERVER_PID" VmHWM)"
LOAD_AVG_AFTER="$(load_avg)"
log "uptime after the drain: $(uptime)"
cat "$WORK/drain.err" >&2
grep -v '^[a-z_0-9]* [0-9.]*$' "$WORK/drain.out" >&2 || true
[ "$DRAIN_OK" = 1 ] || die "the drain did not finish within ${DRAIN_LIMIT_S}s: $(cat "$WORK/drain.out")"

D() { kv "$WORK/drain.out" "$1"; }
DRAINED="$(D drain_records)"; PAGES="$(D drain_pages)"; DRAIN_S="$(D drain_seconds)"
DRAIN_RPS="$(D drain_records_per_s)"; DRAIN_MBPS="$(D drain_mb_per_s)"
P50="$(D page_p50_ms)"; P90="$(D page_p90_ms)"; P99="$(D page_p99_ms)"; PMAX="$(D page_max_ms)"
PMEAN="$(D page_mean_ms)"; ORDER="$(D order_violations)"; HTTP_ERR="$(D http_errors)"
CAUGHT_UP="$(D caught_up)"
WRK_REQS="$(D wrk_requests)"; DRAIN_SOCKERR="$(D socket_errors)"
PAGE_KB="$(awk -v b="$(D drain_bytes)" -v p="$PAGES" 'BEGIN { printf "%.1f", (p > 0 ? b / p / 1024 : 0) }')"

# CPU shares during the drain, in % of one core
SERVER_CPU="$(awk -v t="$(( SERVER_TICKS_1 - SERVER_TICKS_0 ))" -v hz="$CLK_TCK" -v s="$DRAIN_S" \
  'BEGIN { printf "%.0f", (s > 0 ? 100 * t / hz / s : 0) }')"
CLIENT_CPU="n/a"
OTHER_CPU="n/a"
MACHINE_CPU="$(awk -v t="$(( BUSY_TICKS_1 - BUSY_TICKS_0 ))" -v hz="$CLK_TCK" -v s="$DRAIN_S" \
  'BEGIN { printf "%.0f", (s > 0 ? 100 * t / hz / s : 0) }')"
if [ -n "$WRK_TICKS" ]; then
  CLIENT_CPU="$(awk -v t="$WRK_TICKS" -v hz="$CLK_TCK" -v s="$DRAIN_S" \
    'BEGIN { printf "%.0f", (s > 0 ? 100 * t / hz / s : 0) }')"
  # everything else on the machine: the other benchmark, builds, the kernel's own work
  OTHER_CPU="$(awk -v b="$(( BUSY_TICKS_1 - BUSY_TICKS_0 ))" -v sv="$(( SERVER_TICKS_1 - SERVER_TICKS_0 ))" \
    -v c="$WRK_TICKS" -v hz="$CLK_TCK" -v s="$DRAIN_S" \
    'BEGIN { o = b - sv - c; if (o < 0) o = 0; printf "%.0f", (s > 0 ? 100 * o / hz / s : 0) }')"
fi

# The drain's samples (a flat line is the point), then the server's stop and the whole run's.
mem_peaks "$MEM_FILE" "$DRAIN_T0" "$DRAIN_T1" >"$WORK/drain.peaks"
P() { kv "$WORK/drain.peaks" "$1"; }
RSS_N="$(P samples)"; RSS_MIN="$(P rss_min_kb)"; RSS_MAX="$(P rss_max_kb)"
RSS_FIRST="$(P rss_first_kb)"; RSS_LAST="$(P rss_last_kb)"
RSS_SERIES="$(P series_mb | tr ',' ' ')"
[ "$HWM_RESET" = 1 ] || DRAIN_HWM_KB="$RSS_MAX"   # no reset: the sampled peak
HWM_KB="$(( LOAD_HWM_KB > DRAIN_HWM_KB ? LOAD_HWM_KB : DRAIN_HWM_KB ))"

# --------------------------------------------------------------- stop

mem_unwatch "$SAMPLER_PID" "$SERVER_PID" "$MEM_FILE"
stop_server intake "$SERVER_PID" "$SERVER_SUPER" 15
mem_peaks "$MEM_FILE" >"$WORK/run.peaks"
# The data dir as the server left it (its parts against the payload it was sent).
sync
du_parts "$DATA_DIR" >"$WORK/du"
PAYLOAD_BYTES="$(( LOADED * BODY_BYTES ))"
DATADIR_BYTES="$(kv "$WORK/du" TOTAL)"

# --------------------------------------------------------------- report

VERDICT="ok"
PROBLEMS=()
[ "$DRAINED" = "$LOADED" ] || PROBLEMS+=("drained $DRAINED records but $LOADED were loaded")
[ "$ORDER" = 0 ] || PROBLEMS+=("$ORDER record ids out of order")
[ "$HTTP_ERR" = 0 ] || PROBLEMS+=("$HTTP_ERR bad answers (last status $(D last_status))")
[ "$CAUGHT_UP" = 1 ] || PROBLEMS+=("the drain never reached poll_cursor")
[ "$DRAIN_SOCKERR" = 0 ] || PROBLEMS+=("$DRAIN_SOCKERR socket errors during the drain")
[ "$WRK_REQS" = "$PAGES" ] || PROBLEMS+=("wrk completed $WRK_REQS requests but $PAGES pages were counted")
[ "${#PROBLEMS[@]}" = 0 ] || VERDICT="FAILED: $(IFS=';'; echo "${PROBLEMS[*]}")"

mb() { kb_to_mb "$1"; }
# times_payload BYTES -> BYTES as a multiple of the payload
times_payload() { awk -v b="$1" -v p="$PAYLOAD_BYTES" 'BEGIN { printf "%.2f", (p > 0 ? b / p : 0) }'; }
DU_LINE="$(awk -v p="$PAYLOAD_BYTES" '$1 != "TOTAL" { printf "%s%s %.1f MB (%.2f×)", (n++ ? ", " : ""), $1, $2 / 1048576, (p > 0 ? $2 / p : 0) }' "$WORK/du")"
machine_facts
fmt_int() { LC_ALL=C awk -v n="$1" 'BEGIN { s = sprintf("%d", n); r = ""
  while (length(s) > 3) { r = "," substr(s, length(s) - 2) r; s = substr(s, 1, length(s) - 3) }
  print s r }'; }

REPORT="$WORK/report.md"
{
  echo "## Poll drain benchmark"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit: $REV"
  echo "- machine: $NPROC CPUs (nproc), $CPU_MODEL; client (wrk) and server share it"
  echo "- machine load: \`uptime\` before loading: $UPTIME_START; load average (1/5/15 min) before the drain $LOAD_AVG_DRAIN, after it $LOAD_AVG_AFTER (these include this benchmark's own load phase)"
  echo "- backlog: $(fmt_int "$LOADED") records of the ~1 KB benches/post.lua record, loaded by wrk -t$LOAD_THREADS -c$LOAD_CONNECTIONS (benches/poll_load.lua) in ${LOAD_SECONDS} s ($(fmt_int "$LOAD_RPS")/s); data dir ${DATA_MB} MB; server idle ${SETTLE_S} s after the load$([ "$SETTLED" = 1 ] || echo " (NOT idle: timed out)")"
  echo "- drain: wrk -t1 -c1 (benches/poll_drain.lua), one keep-alive connection, sequential: GET /api/v1/data/SLUG/poll?since=2000-01-01&limit=$LIMIT, then ?cursor=next_cursor until poll_cursor; intake with [poll] hold_back = \"0s\""
  echo
  echo "| records drained | duration | records/s | pages | page p50 | page p99 | RSS during the drain (first / min / max / last) |"
  echo "| ---: | ---: | ---: | ---: | ---: | ---: | --- |"
  printf '| %s | %s s | %s | %s | %s ms | %s ms | %s / %s / %s / %s MB |\n' \
    "$(fmt_int "$DRAINED")" "$DRAIN_S" "$(fmt_int "$DRAIN_RPS")" "$(fmt_int "$PAGES")" "$P50" "$P99" \
    "$(mb "$RSS_FIRST")" "$(mb "$RSS_MIN")" "$(mb "$RSS_MAX")" "$(mb "$RSS_LAST")"
  echo
  echo "- check: $VERDICT (drained = loaded, ids strictly increasing, every page 200, ended on poll_cursor)"
  echo "- pages: mean ${PAGE_KB} KB; latency mean $PMEAN ms, p90 $P90 ms, max $PMAX ms; $DRAIN_MBPS MB/s of response bodies"
  echo "- wrk completed $WRK_REQS requests (= pages); its own latency summary is not used: wrk adds synthetic samples for coordinated omission, which a dependent one-connection chain does not have"
  echo "- CPU during the drain (% of one core; the machine has $(( NPROC * 100 )) %): server $SERVER_CPU %, client (wrk) $CLIENT_CPU %, everything else $OTHER_CPU % (whole machine busy $MACHINE_CPU %)"
  echo "- $CACHE_NOTE"
  echo "- storage reads by the server during the drain (/proc/PID/io read_bytes, i.e. not served from the page cache): $(awk -v b="$(( SERVER_READ_1 - SERVER_READ_0 ))" 'BEGIN { printf "%.0f", b / 1048576 }') MB"
  echo "- client cost: $(D lua_ms_per_page) ms per page in poll_drain.lua's response() (counting and order check), the rest of the client is wrk's HTTP reading"
  echo "- RSS: $RSS_N samples every ${RSS_INTERVAL} s, from just before the first page to just after the last (MB): $RSS_SERIES"
  echo "- RSS idle before the load $(mb "$IDLE_KB") MB; peak over the whole run, load included (VmHWM) $(mb "$HWM_KB") MB: $(mb "$LOAD_HWM_KB") MB up to the drain, $(mb "$DRAIN_HWM_KB") MB during the drain ($([ "$HWM_RESET" = 1 ] && echo "VmHWM reset through /proc/PID/clear_refs before it" || echo "the largest sample: VmHWM could not be reset"))"
  echo "- memory samples (smaps_rollup every ${RSS_INTERVAL} s), largest Rss / Anonymous / file-backed (Rss - Anonymous): whole run $(mb "$(kv "$WORK/run.peaks" rss_max_kb)") / $(mb "$(kv "$WORK/run.peaks" anon_max_kb)") / $(mb "$(kv "$WORK/run.peaks" file_max_kb)") MB, drain $(mb "$RSS_MAX") / $(mb "$(P anon_max_kb)") / $(mb "$(P file_max_kb)") MB"
  echo "- data dir after the stop (du -sb), as a multiple of the payload ($(fmt_int "$LOADED") × $BODY_BYTES bytes = $(awk -v b="$PAYLOAD_BYTES" 'BEGIN { printf "%.1f", b / 1048576 }') MB): total $(awk -v b="$DATADIR_BYTES" 'BEGIN { printf "%.1f", b / 1048576 }') MB ($(times_payload "$DATADIR_BYTES")×): $DU_LINE"
  [ -z "${PROFILE_ENV:-}" ] || echo "- intake's environment: ${SERVE_ENV[*]:1} (profile $PROFILE_ENV)"
  echo "- intake exit status after SIGTERM: $SRV_RC"
} >"$REPORT"

publish_report "$REPORT"
DU_FIGURES=()
while read -r part bytes; do
  [ "$part" = TOTAL ] || DU_FIGURES+=("datadir.$part" "$bytes")
done <"$WORK/du"
write_figures records_per_s "$DRAIN_RPS" page_p50_ms "$P50" page_p99_ms "$P99" \
  records "$DRAINED" check "$VERDICT" \
  peak_rss_mb "$(mb "$HWM_KB")" load_peak_rss_mb "$(mb "$LOAD_HWM_KB")" \
  drain_peak_rss_mb "$(mb "$DRAIN_HWM_KB")" idle_rss_mb "$(mb "$IDLE_KB")" \
  run_peak_sampled_rss_mb "$(mb "$(kv "$WORK/run.peaks" rss_max_kb)")" \
  run_peak_anon_mb "$(mb "$(kv "$WORK/run.peaks" anon_max_kb)")" \
  run_peak_file_mb "$(mb "$(kv "$WORK/run.peaks" file_max_kb)")" \
  drain_peak_sampled_rss_mb "$(mb "$RSS_MAX")" drain_peak_anon_mb "$(mb "$(P anon_max_kb)")" \
  drain_peak_file_mb "$(mb "$(P file_max_kb)")" \
  payload_bytes "$PAYLOAD_BYTES" datadir_bytes "$DATADIR_BYTES" "${DU_FIGURES[@]}"
[ "$VERDICT" = ok ] || { log "error: $VERDICT"; exit 1; }
