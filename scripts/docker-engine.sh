#!/usr/bin/env bash
# Make sure a Docker engine answers on this machine, without systemd and without a registry.
#
#   bash scripts/docker-engine.sh ensure   # engine answers? nothing to do. Else (root): install
#                                          # docker.io if dockerd is missing, start dockerd, wait
#   bash scripts/docker-engine.sh start    # same as ensure
#   bash scripts/docker-engine.sh stop     # stop the engine THIS script started (pid file), if any
#   bash scripts/docker-engine.sh status   # does an engine answer, and who started it
#
# The engine is machine-wide, so its pid file and log are too (not per clone):
#   SWARMLAB_DOCKERD_PIDFILE (default /tmp/swarmlab-dockerd.pid)
#   SWARMLAB_DOCKERD_LOG     (default /tmp/swarmlab-dockerd.log)
#   SWARMLAB_DOCKERD_WAIT    seconds to wait for the engine to answer (default 60)
set -euo pipefail

pid_file=${SWARMLAB_DOCKERD_PIDFILE:-/tmp/swarmlab-dockerd.pid}
log_file=${SWARMLAB_DOCKERD_LOG:-/tmp/swarmlab-dockerd.log}
wait_s=${SWARMLAB_DOCKERD_WAIT:-60}
me="docker-engine.sh"

answers() { docker info >/dev/null 2>&1; }

# The pid in our pid file, if that process is still a dockerd (guards against a reused pid).
our_pid() {
  [ -r "$pid_file" ] || return 1
  local pid
  pid=$(cat "$pid_file")
  [[ "$pid" =~ ^[0-9]+$ ]] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ] || return 1
  echo "$pid"
}

wait_until_answers() {
  local pid=$1 deadline=$((SECONDS + wait_s))
  until answers; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "$me: dockerd (pid $pid) exited before answering; last lines of $log_file:" >&2
      tail -n 20 "$log_file" >&2 || true
      return 1
    fi
    if ((SECONDS >= deadline)); then
      echo "$me: dockerd (pid $pid) still not answering after ${wait_s}s; see $log_file" >&2
      return 1
    fi
    sleep 0.5
  done
}

ensure() {
  if answers; then
    return 0
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "$me: no Docker engine answers and only root can start one here: run 'sudo bash scripts/docker-engine.sh ensure', start your own engine, or get access to its socket (docker group)" >&2
    exit 2
  fi
  if ! command -v dockerd >/dev/null 2>&1; then
    echo "$me: dockerd missing: installing docker.io with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    if ! { apt-get update -qq && apt-get install -y -qq docker.io; } </dev/null >/tmp/swarmlab-apt.log 2>&1; then
      echo "$me: installing docker.io failed; see /tmp/swarmlab-apt.log" >&2
      tail -n 20 /tmp/swarmlab-apt.log >&2 || true
      exit 1
    fi
  fi
  if ! command -v docker >/dev/null 2>&1; then
    echo "$me: dockerd is here but the docker client is not: install docker.io (or docker-ce-cli)" >&2
    exit 1
  fi
  # A dockerd that is running but not answering yet (just started by someone else): wait for it.
  local pid
  pid=$(cat /var/run/docker.pid 2>/dev/null || true)
  if [[ "$pid" =~ ^[0-9]+$ ]] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]; then
    echo "$me: dockerd (pid $pid, not started by this script) is running; waiting for it to answer"
    wait_until_answers "$pid" || exit 1
    return 0
  fi
  echo "$me: starting dockerd (log: $log_file)"
  # From /, so that the engine holds no clone's folder; setsid: its own session, so that the
  # caller's terminal or process group going away does not take it down.
  (cd / && exec setsid dockerd </dev/null >"$log_file" 2>&1) &
  pid=$!
  echo "$pid" >"$pid_file"
  wait_until_answers "$pid" || exit 1
  echo "$me: engine answers (dockerd pid $pid, pid file $pid_file)"
}

stop() {
  local pid
  if ! pid=$(our_pid); then
    if [ -e "$pid_file" ]; then
      echo "$me: $pid_file names no running dockerd; removing it"
      rm -f "$pid_file"
    else
      echo "$me: no engine started by this script (no $pid_file); leaving any other engine alone"
    fi
    return 0
  fi
  echo "$me: stopping dockerd (pid $pid)"
  kill -TERM "$pid"
  local deadline=$((SECONDS + wait_s))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      echo "$me: dockerd (pid $pid) still running ${wait_s}s after SIGTERM; see $log_file" >&2
      exit 1
    fi
    sleep 0.5
  done
  rm -f "$pid_file"
  echo "$me: dockerd stopped"
}

status() {
  local pid who="not started by this script"
  if pid=$(our_pid); then who="started by this script, pid $pid"; fi
  if answers; then
    echo "engine answers (server $(docker version --format '{{.Server.Version}}' 2>/dev/null), $who)"
  else
    echo "no engine answers ($who)"
    return 1
  fi
}

case "${1:-}" in
  ensure | start) ensure ;;
  stop) stop ;;
  status) status ;;
  *)
    echo "usage: bash scripts/docker-engine.sh ensure|start|stop|status" >&2
    exit 64
    ;;
esac
