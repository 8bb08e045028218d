#!/bin/sh
# Set the password from the environment, then become the server (PID 1, so docker stop works).
# Single-user mode sets it before the server listens: no window where TCP accepts anything else.
set -eu
if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "sandbox: POSTGRES_PASSWORD must be set (each container gets its own)" >&2
    exit 64
fi
# With a tmpfs mounted (SANDBOX_TMPFS), the built data directory is copied there first: TRUNCATE,
# CREATE DATABASE and friends create and unlink files, ~5x faster in memory than on overlayfs. In
# memory it counts against the container's limit: a data directory over half of it stays on disk
# (the server killed for memory midway through a run would cost more than the speed buys).
# A read-only root (the runner's containers) names a writable disk directory instead (SANDBOX_DISK,
# an empty volume of the container's own): the data directory goes there when it stays on disk.
target=""
if [ -n "${SANDBOX_TMPFS:-}" ]; then
    data_kib=$(du -sk "$PGDATA" | cut -f1)
    limit=$(cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null \
            || echo max)
    case "$limit" in
        max|"") fits=1 ;;
        *) fits=$(( data_kib * 1024 * 2 <= limit )) ;;
    esac
    if [ "$fits" = 1 ]; then
        target="$SANDBOX_TMPFS"
    else
        echo "sandbox: data directory of $((data_kib / 1024)) MiB kept on disk (memory limit $((limit / 1048576)) MiB;" \
             "raise container_memory to have it in memory)" >&2
    fi
fi
if [ -z "$target" ] && [ -n "${SANDBOX_DISK:-}" ]; then
    target="$SANDBOX_DISK"
fi
if [ -n "$target" ]; then
    cp -a "$PGDATA" "$target/data"
    PGDATA="$target/data"
    export PGDATA
fi
# SANDBOX_SOCKET_DIR: a directory the host bind-mounts, where the server adds a Unix socket; the
# runner on the same machine connects there with no port proxy in between (~2 ms of CPU per
# conversation at 64 in flight). Not writable (an engine that made the mount point itself, e.g.
# for a runner inside a container): TCP only, rather than a server that refuses to start.
if [ -n "${SANDBOX_SOCKET_DIR:-}" ]; then
    if [ -d "$SANDBOX_SOCKET_DIR" ] && [ -w "$SANDBOX_SOCKET_DIR" ]; then
        set -- -c "unix_socket_directories=/var/run/postgresql,$SANDBOX_SOCKET_DIR" "$@"
    else
        echo "sandbox: $SANDBOX_SOCKET_DIR is not writable: TCP only" >&2
    fi
fi
escaped=$(printf "%s" "$POSTGRES_PASSWORD" | sed "s/'/''/g")
role=$(printf "%s" "${SANDBOX_USER:-sandbox}" | sed 's/"/""/g')
# SANDBOX_ADMIN_PASSWORD: the runner's own superuser (pgsr_admin), made here with it; a container started
# without it (compose, by hand) has none. Statements end with a semicolon and a blank line (-j).
admin=""
if [ -n "${SANDBOX_ADMIN_PASSWORD:-}" ]; then
    admin_escaped=$(printf "%s" "$SANDBOX_ADMIN_PASSWORD" | sed "s/'/''/g")
    admin=$(printf "DO \$\$BEGIN CREATE ROLE pgsr_admin SUPERUSER LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END\$\$;\n\nALTER ROLE pgsr_admin PASSWORD '%s';\n\n" "$admin_escaped")
fi
printf "ALTER ROLE \"%s\" PASSWORD '%s';\n\n%s" "$role" "$escaped" "$admin" \
    | postgres --single -D "$PGDATA" -c log_min_messages=fatal -j postgres >/dev/null
unset POSTGRES_PASSWORD SANDBOX_ADMIN_PASSWORD escaped admin_escaped admin

# SANDBOX_LEASE_SECONDS: the runner holds a session (as pgsr_admin) on its sandbox while it uses it. Once
# none has been there for this long, its run is gone (killed all at once, janitor and all): the server
# stops, and the container with it, instead of running on with nobody to remove it (a container never
# taken by its worker is the janitor's and the next run's sweep's). This watch ends only with exit 0: the
# server, whose child it becomes, would take any other end of an unknown child for a crash.
lease() {
    set +e
    seen=0 absent=0
    while sleep 5; do
        n=$(psql -h /var/run/postgresql -U postgres -d postgres -XAtqc \
            "SELECT count(*) FROM pg_stat_activity WHERE usename = 'pgsr_admin'" 2>/dev/null)
        case "$n" in
            ''|*[!0-9]*) continue ;;  # no answer (starting, recovering): not a sign either way
        esac
        if [ "$n" -gt 0 ]; then
            seen=1 absent=0
        elif [ "$seen" = 1 ]; then
            absent=$((absent + 5))
        fi
        if [ "$absent" -ge "$SANDBOX_LEASE_SECONDS" ]; then
            echo "sandbox: no session of the runner's for ${SANDBOX_LEASE_SECONDS}s: its run is gone; stopping" >&2
            kill -INT 1
            exit 0
        fi
    done
    exit 0
}
if [ -n "${SANDBOX_LEASE_SECONDS:-}" ] && [ "$$" = 1 ]; then
    lease &
fi
exec postgres -D "$PGDATA" "$@"
