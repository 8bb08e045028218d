#!/bin/sh
# Set the password from the environment, then become the server (PID 1, so docker stop works).
# Single-user mode sets it before the server listens: no window where TCP accepts anything else.
set -eu
if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "sandbox: POSTGRES_PASSWORD must be set (each container gets its own)" >&2
    exit 64
fi
# With a tmpfs mounted (SANDBOX_TMPFS), the built data directory is copied there first: TRUNCATE,
# CREATE DATABASE and friends create and unlink files, ~5x faster in memory than on overlayfs.
if [ -n "${SANDBOX_TMPFS:-}" ]; then
    cp -a "$PGDATA" "$SANDBOX_TMPFS/data"
    PGDATA="$SANDBOX_TMPFS/data"
    export PGDATA
fi
escaped=$(printf "%s" "$POSTGRES_PASSWORD" | sed "s/'/''/g")
role=$(printf "%s" "${SANDBOX_USER:-sandbox}" | sed 's/"/""/g')
printf "ALTER ROLE \"%s\" PASSWORD '%s';\n" "$role" "$escaped" \
    | postgres --single -D "$PGDATA" -c log_min_messages=fatal -j postgres >/dev/null
unset POSTGRES_PASSWORD escaped
exec postgres -D "$PGDATA" "$@"
