#!/usr/bin/env bash
# Install Debian packages, one apt at a time: `make test` sets up its prerequisites in parallel, and two
# of them may need apt (Docker's engine, Chromium); a second apt-get fails at once on dpkg's lock, so
# each waits for the other here.
#
#   scripts/apt-install.sh PACKAGE...   (as root, where apt-get exists; the callers check both)
set -euo pipefail

STATE_DIR=${RUNNER_STATE_DIR:-/tmp/pgsandbox-runner}
mkdir -p "$STATE_DIR"
exec 9>"$STATE_DIR/apt.lock"
flock 9
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
