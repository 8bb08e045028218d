"""What every sandbox is: a context manager that owns one PostgreSQL holding a DatabaseSpec's databases."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from loguru import logger
from psycopg import sql

from runner.errors import SandboxBootError
from runner.resources import Resource

LABEL = "pgsandbox-runner"


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    user: str
    password: str = field(repr=False)
    socket_dir: str | None = None  # the server's Unix socket as this machine sees it, if it has one

    def dsn(self, dbname: str = "postgres") -> str:
        """Over TCP: what users, debug prints and other machines' processes get."""
        return psycopg.conninfo.make_conninfo(
            host=self.host, port=self.port, user=self.user, password=self.password, dbname=dbname
        )

    def local_dsn(self, dbname: str = "postgres") -> str:
        """Over the Unix socket when there is one (no port proxy between, same password), else dsn()."""
        return (
            socket_dsn(self.socket_dir, self.user, self.password, dbname)
            if self.socket_dir
            else self.dsn(dbname)
        )

    def redacted(self, dbname: str = "postgres") -> str:
        """The same DSN for logs and results: the password never leaves the process."""
        if self.host.startswith("/"):  # a socket directory: libpq's URI form for it
            return f"postgresql://{self.user}:***@/{dbname}?host={self.host}"
        return f"postgresql://{self.user}:***@{self.host}:{self.port}/{dbname}"


@dataclass(frozen=True)
class Launched:
    """A container started ahead of the worker that will own it: the supervisor starts each worker's
    first sandbox while the worker's process is being made (forked once the harness's SDKs are
    imported), so the server's boot is off the way to the first result. What the worker needs to take
    it over; its password crosses to the worker with the rest of the worker's spec, never to a log."""

    id: str  # the sandbox's id: its container is named pgsr-<id>
    container_id: str
    password: str = field(repr=False)
    admin_password: str = field(repr=False)  # the runner's own superuser's (tenancy.ADMIN_ROLE)
    socket_home: str | None = None  # the host directory holding its Unix socket's, if it has one


SOCKET_PORT = 5432  # the server's own port inside its container: it names the socket file


def socket_dsn(socket_dir: str, user: str, password: str, dbname: str) -> str:
    return psycopg.conninfo.make_conninfo(
        host=socket_dir, port=SOCKET_PORT, user=user, password=password, dbname=dbname
    )


def logs_in(dsn: str) -> bool:
    """Whether a login with this DSN works now (one try, two seconds at most)."""
    try:
        with psycopg.connect(dsn, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.OperationalError:
        return False


def new_password() -> str:
    return secrets.token_urlsafe(24)


def socket_file(socket_dir: str, port: int = SOCKET_PORT) -> str:
    """The server's socket in its directory (libpq's name for it)."""
    return os.path.join(socket_dir, f".s.PGSQL.{port}")


DEATH_CHECK_SECONDS = 0.25  # how often a wait for a server asks whether it died (an engine call each time)
STAT_SECONDS = 0.01  # how often a wait looks for a booting server's socket file


def wait_connectable(endpoint: Endpoint, *, timeout: float, is_dead: object = None) -> float:
    """Poll until a real login succeeds; return the seconds it took.

    A login (not a port probe) is the readiness test: it proves the password is in place. Through a
    socket, a login is tried once its file exists (a stat, not a connection, while the server boots).
    `is_dead`, if given, is a callable returning an explanation when the server has exited; it is asked
    every DEATH_CHECK_SECONDS, not at every try.
    """
    start = checked = time.monotonic()
    delay = STAT_SECONDS
    last: Exception | None = None
    while time.monotonic() - start < timeout:
        if endpoint.host.startswith("/") and not os.path.exists(socket_file(endpoint.host, endpoint.port)):
            last = OSError(f"no socket in {endpoint.host} yet")
        else:
            try:
                with psycopg.connect(endpoint.dsn(), connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return time.monotonic() - start
            except psycopg.OperationalError as e:
                last = e
            delay = min(delay * 1.5, 0.1)
        if time.monotonic() - checked >= DEATH_CHECK_SECONDS:
            checked = time.monotonic()
            _unless_dead(is_dead)
        time.sleep(delay)
    _unless_dead(is_dead)
    raise SandboxBootError(f"sandbox not connectable after {timeout:.0f}s: {last}")


def _unless_dead(is_dead: object) -> None:
    if callable(is_dead) and (why := is_dead()):
        raise SandboxBootError(f"sandbox exited while starting: {why}")


TMPFS_PATH = "/run/sandbox"  # where a container's data directory lives in memory
SQUATTED_TRIES = 5  # a database name a record took first, dropped and made again: so many times at most


class Sandbox(Resource):
    """One PostgreSQL server owned by one worker. `with` starts it; leaving removes it."""

    kind: str = "abstract"

    def __init__(self) -> None:
        self.endpoint: Endpoint | None = None  # the harness's own role: what slot 0 and users log in as
        self.admin: Endpoint | None = None  # the runner's superuser (tenancy.py), where the sandbox has one
        self.id: str = ""
        self.boot_seconds: float = 0.0
        # started ahead of its worker (docker only): start() takes it over
        self.launched: Launched | None = None

    @property
    def control(self) -> Endpoint:
        """Where the runner's own sessions log in: its superuser, else (an external database) the one role."""
        e = self.admin or self.endpoint
        if e is None:
            raise SandboxBootError(f"{self.kind} sandbox is not started")
        return e

    def alive(self) -> bool:
        """Whether the server still answers (used to tell a lost sandbox from a bad query): as the runner,
        whose login no record can change."""
        return (self.admin or self.endpoint) is not None and logs_in(self.control.dsn())

    def dsn(self, dbname: str = "postgres") -> str:
        if self.endpoint is None:
            raise SandboxBootError(f"{self.kind} sandbox is not started")
        return self.endpoint.dsn(dbname)

    def describe(self) -> str:
        where = self.endpoint.redacted() if self.endpoint else "not started"
        return f"{self.kind} sandbox {self.id or '?'} at {where}"

    def data_in_memory(self) -> bool:
        """Whether the data directory is in memory, counted against a limit (raise_memory)."""
        return False

    def raise_memory(self, extra_bytes: int) -> bool:
        """Raise the server's memory limit by this much, if it has one that can be raised."""
        return False


def databases_bytes(endpoint: Endpoint, names: list[str]) -> int:
    with psycopg.connect(endpoint.dsn("postgres"), autocommit=True, connect_timeout=10) as conn:
        row = conn.execute(
            "SELECT sum(pg_database_size(d))::bigint FROM unnest(%s::text[]) AS d", (names,)
        ).fetchone()
    return int(row[0] or 0) if row else 0


def _create_from(
    conn: psycopg.Connection[Any],
    new: str,
    template: str,
    *,
    file_copy: bool = False,
    owner: str | None = None,
) -> None:
    """CREATE DATABASE new TEMPLATE template [OWNER owner], open to its owner alone (a copy does not keep its
    template's privileges: PUBLIC may connect to a new database). `file_copy` (PostgreSQL 15+) copies files
    instead of writing the copy to the WAL: much faster for many copies at once (slots at boot: 64 took
    ~50 s), at the price of a checkpoint per copy, so not for one copy per record."""
    strategy = " STRATEGY FILE_COPY" if file_copy and conn.info.server_version >= 150000 else ""
    owned = sql.SQL(" OWNER {}").format(sql.Identifier(owner)) if owner else sql.SQL("")
    create = sql.SQL("CREATE DATABASE {} TEMPLATE {}{}" + strategy).format(
        sql.Identifier(new), sql.Identifier(template), owned
    )
    for attempt in range(SQUATTED_TRIES):
        try:
            conn.execute(create)
            break
        except psycopg.errors.DuplicateDatabase:
            # A record made a database of this name first: a slot may create databases, every name is in the
            # catalog for all to read, and a reset drops the old copy before it makes the new one (an
            # independent probe won that race in a loop, and cost the worker). Never the runner's: dropped.
            if attempt == SQUATTED_TRIES - 1:
                raise
            logger.warning("database {!r} was made by a record before the runner could make it: dropped", new)
            drop_database(conn.execute, new)
    conn.execute(sql.SQL("REVOKE CONNECT, TEMPORARY ON DATABASE {} FROM PUBLIC").format(sql.Identifier(new)))


# WITH (FORCE) ends the sessions connected to a database, not one elsewhere that holds a lock on the database
# itself: any role may run ALTER ROLE CURRENT_USER IN DATABASE <another slot's> SET ... and leave it open in a
# transaction, and the drop then waited for it (found by a second independent probe: every other slot's
# reset waited until that record was cut). No session but the runner's has a reason to hold one.
_END_LOCK_HOLDERS = """
SELECT pg_terminate_backend(l.pid, 1000)
  FROM pg_lock_status() l JOIN pg_stat_get_activity(NULL) a ON a.pid = l.pid
 WHERE l.locktype = 'object' AND l.classid = 'pg_database'::regclass AND l.pid <> pg_backend_pid()
   AND l.objid = (SELECT oid FROM pg_database WHERE datname = %s)
   AND NOT (SELECT rolsuper FROM pg_roles WHERE oid = a.usesysid)
"""


def drop_database(execute: Callable[..., object], name: str) -> None:
    """Drop `name` through `execute` (a connection's, or a watched query's), its sessions ended, and a
    tenant's lock on it from elsewhere, a template or not: a database its owner marked a template cannot be
    dropped as it is, and a record may mark its own."""
    execute("UPDATE pg_database SET datistemplate = false WHERE datname = %s AND datistemplate", (name,))
    execute(_END_LOCK_HOLDERS, (name,))
    execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)), ())


def snapshot_database(endpoint: Endpoint, name: str) -> None:
    """Keep `name` as it is now as a template, for `reset: recreate` (connections to it must be closed)."""
    with psycopg.connect(endpoint.dsn("postgres"), autocommit=True, connect_timeout=10) as conn:
        drop_database(conn.execute, template_name(name))
        _create_from(conn, template_name(name), name)


def recreate_database(
    endpoint: Endpoint, name: str, template: str | None = None, *, owner: str | None = None
) -> None:
    """`name` back to the snapshot of `template` (itself by default): whatever the last record left
    behind is gone (sessions too)."""
    with psycopg.connect(endpoint.dsn("postgres"), autocommit=True, connect_timeout=10) as conn:
        drop_database(conn.execute, name)
        _create_from(conn, name, template_name(template or name), owner=owner)


def copy_databases(
    endpoint: Endpoint,
    groups: list[tuple[str | None, list[tuple[str, str]]]],
    done: Callable[[int], bool] | None = None,
    before: Callable[[int], None] | None = None,
) -> None:
    """CREATE DATABASE new TEMPLATE old OWNER owner for each (old, new) of each (owner, pairs) group (a
    slot's), on one session: a worker's slots get their own databases, as they were at boot (nobody may
    be connected to `old` meanwhile). `before(i)` comes before group i, `done(i)` after it says whether to
    go on."""
    t0 = time.monotonic()
    with psycopg.connect(endpoint.dsn("postgres"), autocommit=True, connect_timeout=10) as conn:
        for i, (owner, pairs) in enumerate(groups):
            if before is not None:
                before(i)
            for old, new in pairs:
                _create_from(conn, new, old, file_copy=True, owner=owner)
            if done is not None and not done(i):
                return
    if any(pairs for _, pairs in groups):
        logger.debug(
            "{} slot databases copied in {:.2f}s", sum(len(p) for _, p in groups), time.monotonic() - t0
        )


def cancel_queries(
    endpoint: Endpoint, databases: list[str], role: str | None = None, *, terminate: bool = False
) -> None:
    """Cancel whatever runs on these databases (a slot over its time limit), and whatever the slot's own
    `role` runs on any other (where no other slot logs in as it): a statement its harness waits on from a
    session on `postgres` holds it past its limit as surely. Sessions stay open; with `terminate`, those
    still at work are ended (a statement that catches the cancel, a plpgsql loop's EXCEPTION WHEN
    query_canceled, cannot catch that)."""
    end = "pg_terminate_backend(pid, 1000)" if terminate else "pg_cancel_backend(pid)"
    busy = " AND state IS DISTINCT FROM 'idle'" if terminate else ""
    with psycopg.connect(endpoint.dsn("postgres"), autocommit=True, connect_timeout=5) as conn:
        conn.execute(
            f"SELECT {end} FROM pg_stat_activity WHERE (datname = ANY(%s) OR usename = %s) "
            f"AND pid <> pg_backend_pid(){busy} AND backend_type = 'client backend'",
            (databases, role),
        )


def template_name(name: str) -> str:
    return f"{name}__runner_template"
