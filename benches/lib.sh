# Helpers shared by the benchmark scripts. Source it after defining log() and die().
# shellcheck shell=bash

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
