#!/usr/bin/env bash
# Run compose on compose/docker-compose.yml with whichever compose this machine has;
# on Debian as root, install Debian's docker-compose if there is none.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
file="$here/compose/docker-compose.yml"
# A project of this checkout's own: compose names one after the file's directory ("compose"), so two
# checkouts shared one, and `down -v` in one removed the other's sandbox and its data.
export COMPOSE_PROJECT_NAME="${COMPOSE_PROJECT_NAME:-pgsr-$(printf %s "$here" | sha256sum | cut -c1-10)}"
if [ "${1:-}" = up ]; then
    # The sandbox image is built by the runner (it stages the config's schema files), then tagged :compose.
    runner="$here/.venv/bin/runner"
    [ -x "$runner" ] || runner="python3 -m runner"
    $runner image build ${SANDBOX_CONFIG:+"$SANDBOX_CONFIG"} --also-tag pgsandbox-runner/sandbox:compose >/dev/null
fi
case "${1:-}" in
    up|run|create|start|restart) ;;  # these start the sandbox: its password must be the user's own
    # The rest (down, ps, logs, stop, config) never use the password, but compose interpolates the
    # whole file for every command: a fresh shell would fail on `down -v` asking for it.
    *) export SANDBOX_PASSWORD="${SANDBOX_PASSWORD:-unused-by-$1}" ;;
esac
if docker compose version >/dev/null 2>&1; then
    exec docker compose -f "$file" "$@"
fi
if ! command -v docker-compose >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        "$here/scripts/apt-install.sh" docker-compose
    else
        echo "compose.sh: neither 'docker compose' nor 'docker-compose' is installed" >&2
        exit 1
    fi
fi
exec docker-compose -f "$file" "$@"
