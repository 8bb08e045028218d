#!/usr/bin/env bash
# Make sure a Docker engine answers, starting one only where that is safe.
#
#   scripts/docker-engine.sh up     engine answers -> touch nothing; else on Debian as root
#                                   install docker.io, start dockerd, wait (bounded)
#   scripts/docker-engine.sh down   stop the engine only if `up` started it
#
# Why a marker file: an engine we did not start belongs to the user and is never
# restarted, reconfigured or stopped by us.
set -euo pipefail

STATE_DIR=${RUNNER_STATE_DIR:-/tmp/pgsandbox-runner}
MARKER="$STATE_DIR/dockerd.pid"
LOG="$STATE_DIR/dockerd.log"
WAIT_SECONDS=${DOCKER_WAIT_SECONDS:-60}

answers() { docker info >/dev/null 2>&1; }

up() {
    if answers; then
        echo "docker-engine: engine already answers; leaving it alone"
        return 0
    fi
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        cat >&2 <<MSG
docker-engine: no Docker engine answers and this is not Debian as root, so I will not install one.
  Install Docker (https://docs.docker.com/engine/install/) and start it, or run with
  --sandbox local (PostgreSQL binaries) / --sandbox external --dsn ... instead.
MSG
        return 1
    fi
    if ! command -v dockerd >/dev/null 2>&1; then
        echo "docker-engine: installing docker.io from Debian's packages"
        "$(dirname "$0")/apt-install.sh" docker.io
    fi
    mkdir -p "$STATE_DIR"
    echo "docker-engine: starting dockerd (log: $LOG)"
    # setsid: the engine must outlive the make process that started it.
    setsid dockerd >"$LOG" 2>&1 < /dev/null &
    echo $! > "$MARKER"
    for _ in $(seq 1 "$WAIT_SECONDS"); do
        if answers; then
            echo "docker-engine: engine is up"
            return 0
        fi
        sleep 1
    done
    echo "docker-engine: dockerd did not answer within ${WAIT_SECONDS}s; last log lines:" >&2
    tail -n 20 "$LOG" >&2 || true
    return 1
}

down() {
    [ -f "$MARKER" ] || { echo "docker-engine: not started by us; leaving it running"; return 0; }
    pid=$(cat "$MARKER")
    rm -f "$MARKER"
    if kill -0 "$pid" 2>/dev/null; then
        echo "docker-engine: stopping the dockerd we started (pid $pid)"
        kill "$pid"
        for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || return 0; sleep 1; done
        kill -9 "$pid" 2>/dev/null || true
    fi
}

case "${1:-up}" in
    up) up ;;
    down) down ;;
    *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
