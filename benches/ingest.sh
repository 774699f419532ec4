#!/usr/bin/env bash
# Ingest benchmark: intake vs. a bare warp server (the HTTP ceiling).
#
# Runs the same wrk load (POST of a ~1 KB JSON record, benches/post.lua)
# against `intake serve` and against benches/http_ceiling.rs, then prints a
# Markdown table and writes it to benches/results/ingest-latest.md.
#
# Builds go through cargo with --message-format=json-render-diagnostics
# (JSON on stdout, from which the executables' paths are read; compiler
# messages rendered on stderr as usual).
#
# Usage (from the repo root):
#   bash benches/ingest.sh
#
# Env:
#   DURATION     wrk duration            (default 30s)
#   CONNECTIONS  wrk connections         (default 64)
#   THREADS      wrk threads             (default 2)
#   ONLY         all | intake | ceiling  (default all)
#   INTAKE_BIN   use this intake binary instead of building one (optional)
#   PROFILE_ENV  a profile file (benches/profiles/NAME.env): its INTAKE_* variables are given
#                to `intake serve` and nothing else (optional; benches/lean.sh sets it)
#   RESULTS_FILE where to write the report (default benches/results/ingest-latest.md)
#   RESULTS_JSON also write the key figures there as JSON (optional; benches/compare.sh and
#                benches/lean.sh read them): intake_/ceiling_ rps, p50_ms, p99_ms, non2xx,
#                requests, peak_rss_mb (VmHWM), peak_sampled_rss_mb, peak_anon_mb,
#                peak_file_mb (smaps_rollup every 0.25 s during the load), cpu_us (the
#                server's utime+stime per request over the load), cpu_cores;
#                intake_cpu_us.GROUP per thread-name group; intake_pct_of_ceiling,
#                intake_idle_rss_mb, intake_startup_ms, fsync_ms (null: skipped)
#
# All traffic goes to 127.0.0.1 only.
set -euo pipefail

DURATION="${DURATION:-30s}"
CONNECTIONS="${CONNECTIONS:-64}"
THREADS="${THREADS:-2}"

# shellcheck source=benches/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RESULTS_FILE="${RESULTS_FILE:-$ROOT/benches/results/ingest-latest.md}"

choose_sides ceiling RUN_CEILING

# ---------------------------------------------------------------- cleanup

WORK="$(mktemp -d "${TMPDIR:-/tmp}/intake-bench.XXXXXX")"
cleanup_on_exit 50

# ---------------------------------------------------------------- tools

require python3 curl
ensure_wrk

# run_wrk NAME URL KEY -> writes $WORK/NAME.wrk; prints wrk's report to stderr
run_wrk() {
  local name="$1" url="$2" key="$3"
  log "$name: wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency $url"
  post_load_cmd "$url" "$key" "$THREADS" "$CONNECTIONS"
  run_bg "${POST_LOAD[@]}" >"$WORK/$name.wrk"
  cat "$WORK/$name.wrk" >&2
}

# FIG[NAME.FIGURE]: the figures of the server NAME's run, read from post.lua's lines (requests,
# rps, p50_ms, p99_ms, non2xx, socket_errors, body_bytes) and /proc (peak_mb: VmHWM;
# peak_sampled_mb, peak_anon_mb, peak_file_mb: the memory samples; cpu_us, cpu_cores); a
# skipped server has none. CPU_GROUPS[NAME]: "GROUP US" lines, CPU µs per request by thread
# group.
declare -A FIG=() CPU_GROUPS=()

# measure NAME PID URL KEY: the wrk load against the server NAME (process PID) at URL, its
# memory sampled and its CPU counted over the load; fills its FIG figures.
measure() {
  local name="$1" pid="$2" url="$3" key="$4" figure
  mem_watch "$pid" "$WORK/$name.mem"
  cpu_watch "$pid" "$WORK/$name.threads"
  run_wrk "$name" "$url" "$key"
  cpu_unwatch "$CPU_WATCH_PID"
  mem_unwatch "$MEM_WATCH_PID" "$pid" "$WORK/$name.mem"
  FIG[$name.peak_mb]="$(kb_to_mb "$(proc_kb "$pid" VmHWM)")"
  for figure in requests rps p50_ms p99_ms non2xx socket_errors body_bytes; do
    FIG[$name.$figure]="$(kv "$WORK/$name.wrk" "$figure")"
  done
  mem_peaks "$WORK/$name.mem" >"$WORK/$name.peaks"
  FIG[$name.peak_sampled_mb]="$(kb_to_mb "$(kv "$WORK/$name.peaks" rss_max_kb)")"
  FIG[$name.peak_anon_mb]="$(kb_to_mb "$(kv "$WORK/$name.peaks" anon_max_kb)")"
  FIG[$name.peak_file_mb]="$(kb_to_mb "$(kv "$WORK/$name.peaks" file_max_kb)")"
  cpu_per_request "$WORK/$name.threads" "${FIG[$name.requests]}" >"$WORK/$name.cpu"
  FIG[$name.cpu_us]="$(kv "$WORK/$name.cpu" cpu_us)"
  FIG[$name.cpu_cores]="$(kv "$WORK/$name.cpu" cpu_cores)"
  CPU_GROUPS[$name]="$(sed -n 's/^cpu_us\.//p' "$WORK/$name.cpu")"
}

# --------------------------------------------------------------- builds

if [ "$RUN_INTAKE" = 1 ]; then build_intake; serve_env; fi
if [ "$RUN_CEILING" = 1 ]; then CEILING_BIN="$(build_bench http_ceiling)"; fi

# --------------------------------------------------------------- intake

I_IDLE_MB="" I_STARTUP_MS="" I_WRITER=""
if [ "$RUN_INTAKE" = 1 ]; then
  DATA_DIR="$WORK/data"
  init_intake "$DATA_DIR"
  PORT="$(free_port)"
  ADDR="$HOST:$PORT"
  start_server intake "$PORT" 30 "${SERVE_ENV[@]}" "$INTAKE_BIN" serve --data-dir "$DATA_DIR" --listen "$ADDR"
  I_PID="$SRV_PID"; I_SUPER="$SRV_SUPER"; I_STARTUP_MS="$SRV_STARTUP_MS"; I_LOG="$SRV_LOG"
  for _ in $(seq 1 50); do
    grep -q "listening on http://$ADDR" "$I_LOG" && break
    sleep 0.1
  done
  grep -q "listening on http://$ADDR" "$I_LOG" \
    || log "intake: warning: no 'listening on http://$ADDR' line in its log"

  create_endpoint "$ADDR"
  URL="http://$ADDR/api/v1/data/$SLUG"
  probe intake "$URL" "$SANDBOX_KEY"

  sleep 2
  I_IDLE_MB="$(kb_to_mb "$(proc_kb "$I_PID" VmRSS)")"
  log "intake: idle RSS $I_IDLE_MB MB"

  measure intake "$I_PID" "$URL" "$SANDBOX_KEY"
  stop_server intake "$I_PID" "$I_SUPER" 15
  # The writer's own account of the run: writes, commits, average batch, commit time.
  I_WRITER="$(grep -o 'ingest writer stopped: .*' "$I_LOG" | sed 's/^ingest writer stopped: //' | tail -n 1 || true)"
fi

# --------------------------------------------------------------- ceiling

C_STARTUP_MS=""
if [ "$RUN_CEILING" = 1 ]; then
  PORT="$(free_port)"
  ADDR="$HOST:$PORT"
  start_server ceiling "$PORT" 30 "$CEILING_BIN" --listen "$ADDR"
  C_PID="$SRV_PID"; C_SUPER="$SRV_SUPER"; C_STARTUP_MS="$SRV_STARTUP_MS"
  URL="http://$ADDR/api/v1/data/bench"
  probe ceiling "$URL" ""
  sleep 1
  measure ceiling "$C_PID" "$URL" "bench-key"
  stop_server ceiling "$C_PID" "$C_SUPER" 15
fi

# --------------------------------------------------------------- report

# fig NAME.FIGURE -> that figure, empty when the server was skipped
fig() { echo "${FIG[$1]:-}"; }
or_skip() { if [ -n "$1" ]; then echo "$1$2"; else echo "skipped"; fi; }
row() { # NAME LABEL: the table row of the server NAME
  if [ -n "$(fig "$1.rps")" ]; then
    printf '| %s | %s | %s ms | %s ms | %s | %s | %s / %s / %s | %s µs | %s |\n' "$2" "$(fig "$1.rps")" \
      "$(fig "$1.p50_ms")" "$(fig "$1.p99_ms")" "$(fig "$1.non2xx")" "$(fig "$1.peak_mb")" \
      "$(fig "$1.peak_sampled_mb")" "$(fig "$1.peak_anon_mb")" "$(fig "$1.peak_file_mb")" \
      "$(fig "$1.cpu_us")" "$(fig "$1.cpu_cores")"
  else
    printf '| %s | skipped | | | | | | | |\n' "$2"
  fi
}
# groups NAME -> "group 12.3 µs, ..." of the server NAME's CPU per request by thread group
groups() { awk 'NF == 2 { printf "%s%s %s µs", (n++ ? ", " : ""), $1, $2 }' <<<"${CPU_GROUPS[$1]:-}"; }

machine_facts
I_RPS="$(fig intake.rps)" C_RPS="$(fig ceiling.rps)"
PCT=""
if [ -n "$I_RPS" ] && [ -n "$C_RPS" ]; then
  PCT="$(awk -v i="$I_RPS" -v c="$C_RPS" 'BEGIN { if (c > 0) printf "%.1f", 100 * i / c; else print "n/a" }')"
fi
BODY_BYTES="$(fig intake.body_bytes)"
[ -n "$BODY_BYTES" ] || BODY_BYTES="$(fig ceiling.body_bytes)"

# The disk's raw fdatasync latency right now (see fsync_ms).
FSYNC_MS="$(fsync_ms "$WORK")"

REPORT="$WORK/report.md"
{
  echo "## Ingest benchmark"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit: $REV"
  echo "- machine: $NPROC CPUs (nproc), $CPU_MODEL"
  echo "- load: wrk -t$THREADS -c$CONNECTIONS -d$DURATION, keep-alive, POST of a ${BODY_BYTES:-~1000}-byte JSON record (benches/post.lua) to 127.0.0.1; client and server share the machine"
  [ -z "${PROFILE_ENV:-}" ] || echo "- intake's environment: ${SERVE_ENV[*]:1} (profile $PROFILE_ENV)"
  echo
  echo "| server | requests/s | p50 | p99 | non-2xx | peak RSS MB | sampled peak RSS / anon / file MB | CPU per request | cores busy |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  row intake "intake"
  row ceiling "bare warp ceiling"
  echo
  echo "- intake idle RSS: $(or_skip "$I_IDLE_MB" " MB")"
  echo "- intake startup to listening: $(or_skip "$I_STARTUP_MS" " ms")"
  echo "- intake writer: $(or_skip "$I_WRITER" "")"
  echo "- disk: 4 KiB pwrite + fdatasync takes $(or_skip "$FSYNC_MS" " ms") on this file system"
  echo "- intake requests/s as % of ceiling: $(or_skip "$PCT" " %")"
  echo "- intake CPU per request by thread group: $(or_skip "$(groups intake)" "")"
  echo "- requests completed: intake $(or_skip "$(fig intake.requests)" ""), ceiling $(or_skip "$(fig ceiling.requests)" "")"
  echo "- wrk socket errors (connect/read/write/timeout): intake $(or_skip "$(fig intake.socket_errors)" ""), ceiling $(or_skip "$(fig ceiling.socket_errors)" "")"
  echo "- ceiling startup to listening: $(or_skip "$C_STARTUP_MS" " ms")"
  echo
  echo "Peak RSS MB is VmHWM (/proc/PID/status) after the load, startup included; the sampled"
  echo "peaks are the largest of smaps_rollup's Rss, Anonymous and Rss - Anonymous (file-backed:"
  echo "mapped files, which the kernel can reclaim) read every ${MEM_INTERVAL} s during the load."
  echo "CPU per request: the server's utime + stime (/proc/PID/stat, all threads) over the load"
  echo "divided by the requests answered; by group: per thread name (/proc/PID/task/*/stat, read"
  echo "every 0.2 s so that threads which end during the load keep theirs), the trailing number"
  echo "dropped; (exited): what threads used between their last reading and their end."
} >"$REPORT"

publish_report "$REPORT"

FIGURES=()
for name in intake ceiling; do
  for figure in rps p50_ms p99_ms non2xx requests; do
    FIGURES+=("${name}_$figure" "$(fig "$name.$figure")")
  done
  FIGURES+=("${name}_peak_rss_mb" "$(fig "$name.peak_mb")"
    "${name}_peak_sampled_rss_mb" "$(fig "$name.peak_sampled_mb")"
    "${name}_peak_anon_mb" "$(fig "$name.peak_anon_mb")" "${name}_peak_file_mb" "$(fig "$name.peak_file_mb")"
    "${name}_cpu_us" "$(fig "$name.cpu_us")" "${name}_cpu_cores" "$(fig "$name.cpu_cores")")
done
while read -r group us; do
  [ -z "$group" ] || FIGURES+=("intake_cpu_us.$group" "$us")
done <<<"${CPU_GROUPS[intake]:-}"
write_figures "${FIGURES[@]}" intake_pct_of_ceiling "$PCT" intake_idle_rss_mb "$I_IDLE_MB" \
  intake_startup_ms "$I_STARTUP_MS" fsync_ms "$FSYNC_MS"

I_NON2XX="$(fig intake.non2xx)"
if [ -n "$I_NON2XX" ] && [ "$I_NON2XX" != 0 ]; then
  log "warning: intake answered $I_NON2XX of $(fig intake.requests) requests with a non-2xx status"
fi
