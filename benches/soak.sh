#!/usr/bin/env bash
# Soak benchmark: an hour of mixed load on each backend, one after the other: POST, PUT,
# DELETE, list, search, poll (wrk), change-stream readers open the whole run, webhooks to a
# receiver that fails 10 % of the attempts, key rotations with a grace period, backups,
# retention purges; RSS, p99 and queue depths sampled over time and plotted; checks that RSS
# stayed flat, the queues bounded, the data's growth explained by the data kept, and that every
# 202 was stored (less deletes and purges), streamed and delivered. Exits 1 when a check fails.
#
# Usage (from the repo root):
#   bash benches/soak.sh                                  # both backends, an hour each
#   BACKEND=redb DURATION=600 bash benches/soak.sh        # ten minutes on redb
#
# Env: BACKEND ("redb postgres" by default: the runs, in order), DURATION (seconds per backend,
#      default 3600), CONNECTIONS (wrk, default 8), DELAY_MS (pause between requests on a
#      connection, default 20), READERS (change streams, default 3), FAIL_PERCENT (the
#      receiver's failed attempts, default 10), SAMPLE (seconds between samples, default
#      DURATION/120 within 1-5), WARMUP (seconds before the RSS and queue checks' first window,
#      default DURATION/6), RSS_GROWTH (default 0.10), BACKUP_EVERY (seconds, default
#      DURATION/6; 0: none), PROFILE_ENV (a benches/profiles/NAME.env file for the servers),
#      INTAKE_BIN (skip the build), BENCH_PROFILE (the receiver's and stream readers' build
#      profile, default release; CI's short run uses dev), RESULTS_FILE (default
#      benches/results/soak-latest.md), DOCS_IMG (where the SVGs are copied as well, default
#      docs/src/img; empty: nowhere).
# Installs wrk, libfaketime and (for postgres) PostgreSQL when missing. All traffic goes to
# 127.0.0.1. See benches/soak.py for what runs and the checks.
set -euo pipefail

# shellcheck source=benches/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BACKEND="${BACKEND:-redb postgres}"
RESULTS_FILE="${RESULTS_FILE:-$ROOT/benches/results/soak-latest.md}"
DOCS_IMG="${DOCS_IMG-$ROOT/docs/src/img}"
LIBFAKETIME=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
for backend in $BACKEND; do
  case "$backend" in
    redb | postgres) ;;
    *) echo "soak.sh: BACKEND must name redb and/or postgres (got '$backend')" >&2; exit 2 ;;
  esac
done

require python3
ensure_wrk
if [ ! -f "$LIBFAKETIME" ]; then
  log "libfaketime not found; installing Debian's libfaketime"
  apt_install libfaketime
fi
WORK="$(mktemp -d "${TMPDIR:-/tmp}/intake-soak.XXXXXX")"
cleanup_on_exit 50 pg_stop
build_intake
# libfaketime is preloaded, which a static binary ignores: its clock would stand still and
# retention would never purge (the run would fail its checks after an hour, not at once).
# grep reads all of ldd's output (no -q): stopping at the first match could end ldd with
# SIGPIPE, which pipefail would take for a static binary.
if ! ldd "$INTAKE_BIN" 2>/dev/null | grep '=>' >/dev/null; then
  die "$INTAKE_BIN is statically linked; the soak moves the server's clock with libfaketime (LD_PRELOAD), which needs a dynamic build such as cargo build --release's"
fi
receiver="$(build_bench webhook_receiver)"
readers="$(build_bench stream_readers)"
machine_facts

runs=()
for backend in $BACKEND; do
  pg=()
  if [ "$backend" = postgres ]; then
    pg_find
    # Durable, as intake requires; sized for a long run's WAL.
    pg_start -c fsync=on -c synchronous_commit=on -c full_page_writes=on -c max_connections=100 \
      -c shared_buffers=256MB -c max_wal_size=2GB
    pg=(--pg-bin "$PG_BIN" --pg-port "$PG_PORT" --pg-log "$PG_DIR/server.log")
  fi
  log "$backend: $DURATION s"
  run_bg env DURATION="${DURATION:-3600}" LIBFAKETIME="$LIBFAKETIME" python3 "$ROOT/benches/soak.py" run \
    --backend "$backend" --intake "$INTAKE_BIN" --receiver "$receiver" --readers "$readers" \
    --work "$WORK/$backend" --out "$WORK/$backend.json" --commit "$REV" "${pg[@]}"
  runs+=("$WORK/$backend.json")
  [ "$backend" != postgres ] || pg_stop
done

mkdir -p "$(dirname "$RESULTS_FILE")"
python3 "$ROOT/benches/soak.py" report --results "$RESULTS_FILE" \
  --svg-dir "$ROOT/benches/results" ${DOCS_IMG:+--docs-img "$DOCS_IMG"} "${runs[@]}"
log "written to ${RESULTS_FILE#"$ROOT"/}"
