# Helpers shared by the benchmark scripts. Source it after defining log() and die().
# shellcheck shell=bash

# INTAKE_BIN picks the binary to measure; it must not reach the server's environment, where
# intake refuses INTAKE_* variables that name no config key.
export -n INTAKE_BIN 2>/dev/null || true

# Installs Debian's wrk when it is missing (through sudo when not root).
ensure_wrk() {
  command -v wrk >/dev/null && return 0
  log "wrk not found; installing Debian's wrk"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || die "wrk is missing and we are not root (no sudo either)"
    sudo="sudo"
  fi
  $sudo apt-get update >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y wrk >&2
  command -v wrk >/dev/null || die "wrk install failed"
}

# stop_servers TENTHS PID...: SIGTERM every PID, give each up to TENTHS tenths of a second to
# exit, then SIGKILL what is left.
stop_servers() {
  local tenths="$1" pid
  shift
  for pid in "$@"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "$@"; do
    for _ in $(seq 1 "$tenths"); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  done
}

# build_receiver WORK: builds benches/webhook_receiver.rs (release) and prints its path.
build_receiver() {
  local work="$1"
  log "building the receiver (cargo bench --bench webhook_receiver --no-run)"
  cargo bench --bench webhook_receiver --no-run --message-format=json-render-diagnostics \
    >"$work/build.json"
  python3 - "$work/build.json" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        msg = json.loads(line)
        if msg.get("target", {}).get("name") == "webhook_receiver" and msg.get("executable"):
            print(msg["executable"])
PY
}

# build_intake: builds the release binary unless INTAKE_BIN is set; prints its path.
build_intake() {
  if [ -n "${INTAKE_BIN:-}" ]; then
    echo "$INTAKE_BIN"
    return 0
  fi
  log "building intake (cargo build --release --bins)"
  cargo build --release --bins >&2
  echo "$ROOT/target/release/intake"
}

# cpu_ticks PID -> user + system CPU ticks the process has used
cpu_ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
CLK_TCK="$(getconf CLK_TCK)"

# wait_idle PID TIMEOUT_S: waits until the process uses under 2 % of a core over 2 s (the
# search indexer and tantivy's merges done). Sets SETTLED (1 or 0) and SETTLE_S (seconds).
wait_idle() {
  local pid="$1" timeout="$2" t0 prev cur deadline
  t0="$(date +%s)"
  SETTLED=0
  prev="$(cpu_ticks "$pid")"
  deadline=$(( t0 + timeout ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    sleep 2
    cur="$(cpu_ticks "$pid")"
    if [ $(( (cur - prev) * 100 )) -le $(( 2 * 2 * CLK_TCK )) ]; then SETTLED=1; break; fi
    prev="$cur"
  done
  SETTLE_S=$(( $(date +%s) - t0 ))
}
