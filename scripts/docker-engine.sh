#!/usr/bin/env bash
# Make sure a Docker engine answers on this machine: install Debian's docker.io when it is missing,
# start dockerd when no daemon answers. Idempotent: safe to run twice, and after a killed daemon
# left a stale pid file or socket behind. Used by the README, .ci/run and the tests.
set -euo pipefail

LOG=${DOCKERD_LOG:-/var/log/cookbook-dockerd.log}
WAIT=${DOCKERD_WAIT_S:-60}
# Debian's own client (20.10) builds with BuildKit; a newer client without buildx may come first on PATH.
DOCKER=/usr/bin/docker
[ -x "$DOCKER" ] || DOCKER=$(command -v docker || echo /usr/bin/docker)

say() { printf 'docker-engine: %s\n' "$*" >&2; }
answers() { "$DOCKER" info >/dev/null 2>&1; }

if [ -x "$DOCKER" ] && answers; then
  say "daemon answers ($("$DOCKER" version --format '{{.Server.Version}}'))"
  exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] || { say "docker.io is missing and installing it needs root"; exit 1; }
  say "installing Debian's docker.io"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq docker.io >/dev/null
  DOCKER=/usr/bin/docker
fi

# No daemon answers: clear what a killed one may have left, but never a live daemon's.
# A killed daemon can linger as a zombie, which `kill -0` still finds: look at its state and name.
alive_dockerd() {
  local pid=$1
  [ -n "$pid" ] && [ -r "/proc/$pid/status" ] || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ] || return 1
  ! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status"
}
live_dockerd() {
  local pid
  for pid in $(pgrep -x dockerd 2>/dev/null); do alive_dockerd "$pid" && return 0; done
  return 1
}

pidfile=/var/run/docker.pid
if [ -f "$pidfile" ]; then
  pid=$(cat "$pidfile" 2>/dev/null || true)
  if alive_dockerd "$pid"; then
    say "dockerd (pid $pid) is running but not answering yet; waiting"
  else
    say "removing stale $pidfile"
    rm -f "$pidfile" /var/run/docker.sock
  fi
fi
if ! live_dockerd; then
  rm -f /var/run/docker.sock
  # containerd state from a killed daemon can hold the old socket too.
  rm -f /var/run/docker/containerd/containerd.pid 2>/dev/null || true
  say "starting dockerd (log: $LOG)"
  # A session of its own: a kill of the process group that started it (a CI job, a signalled task) spares it.
  setsid nohup "$(command -v dockerd)" --storage-driver=overlay2 >>"$LOG" 2>&1 &
fi

for _ in $(seq 1 "$WAIT"); do
  if answers; then
    say "daemon answers ($("$DOCKER" version --format '{{.Server.Version}}'))"
    exit 0
  fi
  sleep 1
done
say "dockerd did not answer within ${WAIT}s; the end of $LOG:"
tail -n 20 "$LOG" >&2 || true
exit 1
