"""What every sandbox is: a context manager that owns one PostgreSQL holding a DatabaseSpec's databases."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

import psycopg
from psycopg import sql

from runner.errors import SandboxBootError
from runner.resources import Resource

LABEL = "pgsandbox-runner"


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    user: str
    password: str

    def dsn(self, dbname: str = "postgres") -> str:
        return psycopg.conninfo.make_conninfo(
            host=self.host, port=self.port, user=self.user, password=self.password, dbname=dbname
        )

    def redacted(self, dbname: str = "postgres") -> str:
        """The same DSN for logs and results: the password never leaves the process."""
        return f"postgresql://{self.user}:***@{self.host}:{self.port}/{dbname}"


def new_password() -> str:
    return secrets.token_urlsafe(24)


def wait_connectable(endpoint: Endpoint, *, timeout: float, is_dead: object = None) -> float:
    """Poll until a real login succeeds; return the seconds it took.

    A login (not a port probe) is the readiness test: it proves the password is in place.
    `is_dead`, if given, is a callable returning an explanation when the server has exited.
    """
    start = time.monotonic()
    delay = 0.02
    last: Exception | None = None
    while time.monotonic() - start < timeout:
        try:
            with psycopg.connect(endpoint.dsn(), connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return time.monotonic() - start
        except psycopg.OperationalError as e:
            last = e
        if callable(is_dead):
            why = is_dead()
            if why:
                raise SandboxBootError(f"sandbox exited while starting: {why}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.25)
    raise SandboxBootError(f"sandbox not connectable after {timeout:.0f}s: {last}")


class Sandbox(Resource):
    """One PostgreSQL server owned by one worker. `with` starts it; leaving removes it."""

    kind: str = "abstract"

    def __init__(self) -> None:
        self.endpoint: Endpoint | None = None
        self.id: str = ""
        self.boot_seconds: float = 0.0

    def alive(self) -> bool:
        """Whether the server still answers (used to tell a lost sandbox from a bad query)."""
        if self.endpoint is None:
            return False
        try:
            with psycopg.connect(self.endpoint.dsn(), connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.OperationalError:
            return False

    def dsn(self, dbname: str = "postgres") -> str:
        if self.endpoint is None:
            raise SandboxBootError(f"{self.kind} sandbox is not started")
        return self.endpoint.dsn(dbname)

    def describe(self) -> str:
        where = self.endpoint.redacted() if self.endpoint else "not started"
        return f"{self.kind} sandbox {self.id or '?'} at {where}"


def snapshot_database(endpoint: Endpoint, name: str) -> None:
    """Keep `name` as it is now as a template, for `reset: recreate` (connections to it must be closed)."""
    with psycopg.connect(endpoint.dsn("postgres"), autocommit=True, connect_timeout=10) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(_template(name))))
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(_template(name)),
                                                                      sql.Identifier(name)))


def recreate_database(endpoint: Endpoint, name: str) -> None:
    """`name` back to its snapshot: whatever the last record left behind is gone (sessions too)."""
    with psycopg.connect(endpoint.dsn("postgres"), autocommit=True, connect_timeout=10) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name),
                                                                      sql.Identifier(_template(name))))


def _template(name: str) -> str:
    return f"{name}__runner_template"
