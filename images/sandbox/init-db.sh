#!/bin/bash
# Create the harness's role and databases, then apply /opt/sandbox/initdb/<db>/* in name order:
# the docker-entrypoint-initdb.d convention (.sql, .sql.gz, .sh). Runs once, at image build,
# against a socket-only server; any error stops the build, and psql names the file and line.
set -euo pipefail
: "${DB_NAME:?}" "${DB_USER:?}"
EXTRA_DBS=${EXTRA_DBS:-}
INITDB=${INITDB:-/opt/sandbox/initdb}
q() { psql -v ON_ERROR_STOP=1 -X -q "$@"; }
qi() { printf '"%s"' "${1//\"/\"\"}"; }

if [ "$DB_USER" != postgres ]; then
    # CREATEDB: `reset: recreate` drops and re-creates the database from its template.
    q -d postgres -c "CREATE ROLE $(qi "$DB_USER") LOGIN CREATEDB"
fi
for db in $DB_NAME $EXTRA_DBS; do
    if [ "$db" != postgres ]; then
        q -d postgres -c "CREATE DATABASE $(qi "$db") OWNER $(qi "$DB_USER")"
    fi
done
# Objects belong to the role the harness logs in as (as they would if it had run these itself).
role_opt=""
[ "$DB_USER" != postgres ] && role_opt="-c role=$DB_USER"
for db in $DB_NAME $EXTRA_DBS; do
    dir="$INITDB/$db"
    [ -d "$dir" ] || continue
    for f in "$dir"/*; do
        case "$f" in
            *.sql.gz)
                gunzip -c "$f" > "${f%.gz}"
                PGOPTIONS="$role_opt" q -d "$db" -f "${f%.gz}"
                rm -f "${f%.gz}" ;;
            *.sql)
                PGOPTIONS="$role_opt" q -d "$db" -f "$f" ;;
            *.sh)
                echo "init-db: running $f"
                # The variables the official image's init scripts read, pointed at this database.
                POSTGRES_USER="$DB_USER" POSTGRES_DB="$db" PGDATABASE="$db" PGUSER=postgres \
                    bash -euo pipefail "$f" || { echo "init-db: $f failed" >&2; exit 1; } ;;
        esac
    done
done
