#!/bin/bash
# Shell init scripts get the official image's variables (POSTGRES_DB, POSTGRES_USER) and a psql that reaches the server.
set -euo pipefail
psql -v ON_ERROR_STOP=1 -q -d "$POSTGRES_DB" -c "ALTER DATABASE \"$POSTGRES_DB\" SET timezone TO 'UTC'"
