#!/usr/bin/env bash
# Lean benchmark (issue #22): memory, CPU per write and disk per byte of payload, under each
# profile, with every other figure of the issue re-measured in the same run.
#
# For each profile in PROFILES (a file benches/profiles/NAME.env of INTAKE_...=value lines,
# given to the intake servers the run starts and to nothing else), in this order, each step by
# running its own script against the one binary INTAKE_BIN:
#   ingest    benches/ingest.sh: intake and the bare ceiling, 64 connections, DURATION each:
#             rps, p50, p99, peak RSS, idle RSS, startup, CPU per durable POST (all threads,
#             and per thread-name group), intake's rate as % of the ceiling's
#   poll      benches/poll_drain.sh: RECORDS records loaded and drained: records/s, peak RSS
#             of the whole run and of the drain, the data dir of identical records
#   search    benches/search.sh with ONLY=intake: RECORDS records loaded, the index rebuilt,
#             the 50 queries: p50/p99, peak RSS over the load, the rebuild and the queries
#   webhooks  benches/webhooks.sh: the webhook backlog: deliveries/s and peak RSS
#   datadir   benches/datadir.sh: RECORDS varied ~1 KB records (search_gen.py --parts 2,
#             generated once for all profiles), the server idle and stopped, du -sb of each
#             part of the data dir against the payload
# Memory everywhere: VmHWM, and lib.sh's mem_watch samples of smaps_rollup (Rss, Anonymous,
# file-backed) every 0.25 s. Then benches/lean_report.py writes one Markdown report (a goal
# table: figure, target, measured, met; a table per profile) to RESULTS_FILE, and the figures
# as JSON to RESULTS_JSON; each step's own report and log go to benches/results/lean/PROFILE/.
#
# Usage (from the repo root):
#   bash benches/lean.sh
#   PROFILES="default small" RECORDS=20000 DURATION=5s bash benches/lean.sh   # a quick check
#   PROFILES=small STEPS="ingest webhooks" DURATION=10s bash benches/lean.sh
#
# Env:
#   PROFILES      profiles to run, names of benches/profiles/*.env  (default "default small")
#   RECORDS       records of the poll, search and data dir loads    (default 1000000)
#   DURATION      wrk run of the ingest step, per server            (default 30s)
#   STEPS         which loads: ingest poll search webhooks datadir  (default all, run in
#                 that order whatever the order given)
#   INTAKE_BIN    the intake binary to measure (default: cargo build --release --bins now)
#   RESULTS_FILE  where the report goes (default benches/results/lean-latest.md)
#   RESULTS_JSON  also write every figure and the goal table there as JSON (optional)
# The steps' own knobs (REPS, BURST, IDLE_TIMEOUT, ...) pass through from the environment.
#
# How long: at full size (RECORDS=1000000, DURATION=30s) on 2 cores, about 15 to 20 minutes
# per profile (ingest 1.5, poll drain 3-4, search 6-8, webhooks 1, data dir 3-5; estimated
# from the quick check's run times and the 1M runs of the scripts' own reports) plus 2 to
# generate the data dir's records: 35 to 45 minutes for the two profiles. The quick check
# takes 5 to 8 minutes (plus the builds). It needs python3, curl and wrk (installed with apt-get when missing),
# and for the ceiling and the webhook receiver `cargo build --release --bench` builds them once; the
# 1M loads need a few GB of free disk under TMPDIR (each step removes its own data at exit).
# All traffic goes to 127.0.0.1 only; every process started is stopped on any exit.
set -euo pipefail

PROFILES="${PROFILES:-default small}"
RECORDS="${RECORDS:-1000000}"
DURATION="${DURATION:-30s}"
STEPS="${STEPS:-ingest poll search webhooks datadir}"

# shellcheck source=benches/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RESULTS_FILE="${RESULTS_FILE:-$ROOT/benches/results/lean-latest.md}"
STEP_DIR="$ROOT/benches/results/lean"
T_START="$(date +%s)"
log() { echo "lean.sh: [$(( $(date +%s) - T_START ))s] $*" >&2; }

case "$RECORDS" in ''|*[!0-9]*) die "RECORDS must be a positive integer (got '$RECORDS')" ;; esac
[ "$RECORDS" -ge 1 ] || die "RECORDS must be at least 1"
ALL_STEPS=(ingest poll search webhooks datadir)
for step in $STEPS; do
  case " ${ALL_STEPS[*]} " in *" $step "*) ;; *) die "unknown step '$step' in STEPS (known: ${ALL_STEPS[*]})" ;; esac
done
want() { case " $STEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
RUN_STEPS=()
for step in "${ALL_STEPS[@]}"; do
  if want "$step"; then RUN_STEPS+=("$step"); fi
done
for profile in $PROFILES; do
  [ -f "$ROOT/benches/profiles/$profile.env" ] || die "no profile file benches/profiles/$profile.env"
done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/intake-lean.XXXXXX")"
cleanup_on_exit 150

require python3 curl
ensure_wrk
build_intake
# The ceiling and the webhook receiver, built now so that no step's time includes a build (the
# steps' own build_bench is then a no-op).
if want ingest; then build_bench http_ceiling >/dev/null; fi
if want webhooks; then build_bench webhook_receiver >/dev/null; fi

# The references of goal 2 (POST p99 "no worse than today") and goal 4 (search p50/p99): the
# committed reports, read before anything runs.
mkdir -p "$WORK/ref"
for ref in ingest-latest.md search-latest.md; do
  cp "$ROOT/benches/results/$ref" "$WORK/ref/" 2>/dev/null || : >"$WORK/ref/$ref"
done

# The data dir step's records, once for every profile.
if want datadir; then
  log "generating $RECORDS varied ~1 KB records for the data dir step (search_gen.py --parts 2)"
  run_bg python3 "$ROOT/benches/search_gen.py" --records "$RECORDS" --parts 2 --no-copy \
    --out "$WORK/datadir-records" >"$WORK/datadir-records.json" || die "search_gen.py failed"
fi

FAILED=()

# run_step PROFILE STEP [NAME=VALUE...]: runs STEP's script with the profile's file as
# PROFILE_ENV, the binary, its report, figures and log in WORK/PROFILE, and the given variables.
run_step() {
  local profile="$1" step="$2" script t0 rc=0
  shift 2
  case "$step" in
    ingest) script=ingest.sh ;; poll) script=poll_drain.sh ;; search) script=search.sh ;;
    webhooks) script=webhooks.sh ;; datadir) script=datadir.sh ;;
  esac
  local dir="$WORK/$profile"
  log "[$profile] $step: benches/$script $*"
  t0="$(date +%s)"
  run_bg env "$@" PROFILE_ENV="$ROOT/benches/profiles/$profile.env" INTAKE_BIN="$INTAKE_BIN" \
    RESULTS_FILE="$dir/$step.md" RESULTS_JSON="$dir/$step.json" bash "$ROOT/benches/$script" \
    >"$dir/$step.log" 2>&1 || rc=$?
  echo "$rc" >"$dir/$step.rc"
  echo "$(( $(date +%s) - t0 ))" >"$dir/$step.seconds"
  if [ "$rc" = 0 ]; then
    log "[$profile] $step: done in $(cat "$dir/$step.seconds") s"
  else
    FAILED+=("$profile/$step")
    log "[$profile] $step: FAILED with status $rc after $(cat "$dir/$step.seconds") s; the end of its log:"
    tail -n 15 "$dir/$step.log" >&2 || true
  fi
}

for profile in $PROFILES; do
  dir="$WORK/$profile"
  mkdir -p "$dir"
  # The profile's variables, and the configuration they give (intake check refuses a variable
  # that names no config key, so a bad profile stops the run here).
  PROFILE_ENV="$ROOT/benches/profiles/$profile.env"
  serve_env
  python3 "$ROOT/benches/benchlib.py" profile-env "$PROFILE_ENV" >"$dir/profile.env"
  "${SERVE_ENV[@]}" "$INTAKE_BIN" check --data-dir "$WORK/check-data" >"$dir/config.toml" 2>"$dir/check.log" \
    || { cat "$dir/check.log" >&2; die "profile $profile: intake check refused its configuration"; }
  unset PROFILE_ENV
  log "[$profile] cache_mb = $(awk -F' = ' '$1 == "cache_mb" { print $2 }' "$dir/config.toml")"

  if want ingest; then run_step "$profile" ingest ONLY=all DURATION="$DURATION" CONNECTIONS=64; fi
  if want poll; then run_step "$profile" poll RECORDS="$RECORDS"; fi
  if want search; then run_step "$profile" search ONLY=intake RECORDS="$RECORDS" CONNECTIONS=64; fi
  if want webhooks; then run_step "$profile" webhooks; fi
  if want datadir; then run_step "$profile" datadir RECORDS="$RECORDS" DATA="$WORK/datadir-records"; fi
done

# --------------------------------------------------------------- report

machine_facts
COMMIT="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
[ -z "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ] || COMMIT="$COMMIT (with uncommitted changes)"
BINARY="$("$INTAKE_BIN" check --data-dir "$WORK/check-data" 2>/dev/null | sed -n 's/^# //p' | head -n 1)"
MEM_GB="$(awk '/^MemTotal/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo)"
REPORT="$WORK/report.md"
python3 "$ROOT/benches/lean_report.py" --work "$WORK" --profiles "$PROFILES" --steps "${RUN_STEPS[*]}" \
  --meta "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)" "commit=$COMMIT" "binary=${BINARY:-unknown} ($INTAKE_BIN)" \
  "machine=$NPROC CPUs (nproc), $CPU_MODEL, $MEM_GB GiB RAM; load average at the start $(cut -d' ' -f1-3 /proc/loadavg)" \
  "records=$RECORDS" "duration=$DURATION" "elapsed=$(( $(date +%s) - T_START ))" \
  "ingest_ref=$WORK/ref/ingest-latest.md" "search_ref=$WORK/ref/search-latest.md" \
  --out "$REPORT" ${RESULTS_JSON:+--json "$RESULTS_JSON"} || die "lean_report.py failed"

# Each step's own report and log, for reading beside the summary (replaced by the next run).
rm -rf "$STEP_DIR"
for profile in $PROFILES; do
  mkdir -p "$STEP_DIR/$profile"
  for step in "${RUN_STEPS[@]}"; do
    for ext in md log json; do
      [ ! -f "$WORK/$profile/$step.$ext" ] || cp "$WORK/$profile/$step.$ext" "$STEP_DIR/$profile/"
    done
  done
done
echo '*' >"$STEP_DIR/.gitignore"
publish_report "$REPORT"
if [ "${#FAILED[@]}" -gt 0 ]; then
  die "failed steps: ${FAILED[*]} (logs in ${STEP_DIR#"$ROOT"/})"
fi
