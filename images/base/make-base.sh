#!/usr/bin/env bash
# Build a Debian base image with PostgreSQL from Debian's packages alone, for machines
# that reach a package mirror but no container registry (`docker pull` fails there).
#
#   images/base/make-base.sh TAG [PG_MAJOR [SUITE]]   (bookworm packages PostgreSQL 15, trixie 17)
#
# debootstrap uses its default mirror on purpose: no mirror URL lives in this project.
set -euo pipefail
TAG=${1:?usage: make-base.sh TAG [PG_MAJOR [SUITE]]}
PG_MAJOR=${2:-15}
SUITE=${3:-bookworm}

if ! command -v debootstrap >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    else
        echo "make-base: debootstrap is missing; install it (apt-get install debootstrap) or use a registry base" >&2
        exit 1
    fi
fi

ROOT=$(mktemp -d /tmp/sandbox-rootfs.XXXXXX)
trap 'rm -rf "$ROOT"' EXIT
echo "make-base: debootstrap $SUITE with postgresql-$PG_MAJOR into $ROOT"
debootstrap --variant=minbase --include="postgresql-$PG_MAJOR" "$SUITE" "$ROOT" >"$ROOT.log" 2>&1 || {
    tail -n 30 "$ROOT.log" >&2; exit 1; }
rm -f "$ROOT.log"
# Smaller image, same behaviour: drop caches, docs and the cluster Debian's postinst created
# (the sandbox Dockerfile runs its own initdb with its own settings).
rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/* \
       "$ROOT"/usr/share/doc/* "$ROOT"/usr/share/man/* "$ROOT"/usr/share/locale/* \
       "$ROOT"/var/lib/postgresql/"$PG_MAJOR"/main "$ROOT"/etc/postgresql/"$PG_MAJOR"/main
tar -C "$ROOT" -c . | docker import - "$TAG" >/dev/null
echo "make-base: imported $TAG"
