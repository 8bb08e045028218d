"""Did one server serve the whole record? A witness session that a lost sandbox cannot fake.

Most harnesses catch every exception inside a conversation and report a failed one: when their
database dies mid-record, the runner gets a well-formed "failure" that is really the sandbox's.
So the worker does not trust the harness's word: it keeps one session of its own open on the
sandbox and asks, before and after each record, which server incarnation answers and which of the
slot's databases exist. A server that died or restarted (a crashed backend resets every session)
breaks the session; a container that was paused does not answer in time; a database that was
dropped is missing. Any of these: the record's result is discarded. (A database dropped and made
again within the record is the harness's own doing, as some harnesses reset that way: it passes.)

A death does not reach every session at once: the postmaster learns that a backend died, then
signals the others one by one, in an order of its own. A harness that saw its own session
die can report a failed record before the witness's session is hit, and the witness then answers
as if nothing happened (a fresh-clone CI run recorded one such wrong "failed" under a PostgreSQL
kill). So a failed record is confirmed through the postmaster too: it handles a child's death
before it takes a new connection, and a backend it forks after a crash refuses at once ("the
database system is in recovery mode"), before any password is asked for. The witness opens a
connection without a password and stops at the server's password request (no session starts, no
SCRAM: 2.2 ms of wall time, under 0.1 ms of this process's CPU, 2.5 ms of the server's, on this
machine; a server that trusts the login lets it in, which says as much); then its own session is
asked as always (a recovery over by then killed that session). A record that succeeded needs
none of it: its answers arrived, whatever happened after.

Both go out through libpq's asynchronous calls with a deadline of our own, because a frozen
server (docker pause) keeps its socket open and a blocking read would wait forever (and libpq's
blocking PQping holds the interpreter lock while it waits).
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass

import psycopg
from psycopg import pq

from runner.resources import Resource, fd_ready

# A trivial catalog query on a healthy server answers in well under a millisecond; this long means
# frozen or dying. Generous on purpose: a false alarm costs a sandbox and a retry, never a wrong result.
ANSWER_SECONDS = 5.0

_QUERY = (
    b"SELECT pg_postmaster_start_time()::text, coalesce(string_agg(datname, ',' ORDER BY datname), '') "
    b"FROM pg_database WHERE datname = ANY($1::text[])"
)


class SandboxGone(Exception):
    """The witness session got no answer, or an answer from another server: the sandbox is lost."""


@dataclass(frozen=True)
class Incarnation:
    """Which server answered, and which of the databases asked about it held: equal before and after a
    record exactly when one live server, with the slot's databases, served it all."""

    started: str
    databases: str


# No password, from nowhere: the environment's PGPASSWORD and a ~/.pgpass would make it a whole SCRAM login.
_NO_PASSWORD = {"password": "", "passfile": "/nonexistent/pgsandbox-runner-witness"}
# Words of the server's own, before authentication, that it takes no sessions now (57P03: starting up,
# in recovery mode, shutting down). Any other word from the server (too many clients, say) means the
# postmaster took the connection in its normal state.
_REFUSED = re.compile(r"the database system is")
_SERVER_SPOKE = re.compile(r"\b(FATAL|PANIC|ERROR):")


def _array(names: list[str]) -> bytes:
    quoted = ('"' + n.replace("\\", "\\\\").replace('"', '\\"') + '"' for n in names)
    return ("{" + ",".join(quoted) + "}").encode()


class Witness(Resource):
    """The worker's own session on its sandbox (one for all its slots: a lock takes turns)."""

    def __init__(self, dsn: str, *, answer_seconds: float = ANSWER_SECONDS) -> None:
        self.dsn, self.answer_seconds = dsn, answer_seconds
        self._passwordless = psycopg.conninfo.make_conninfo(dsn, **_NO_PASSWORD).encode()
        self._conn: psycopg.Connection[object] | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        self._conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=10)

    def stop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def observe(self, databases: list[str], *, through_postmaster: bool = False) -> Incarnation:
        """The server's start time and which of these databases exist, or SandboxGone. `through_postmaster`:
        first make sure the postmaster takes new sessions (for a record that failed: see the module's doc)."""
        with self._lock:
            # its own reference: a slot that replaces the sandbox meanwhile stops the witness from its thread,
            # not waiting for this look (which may wait on a frozen server)
            conn = self._conn
            if conn is None or conn.closed:
                raise SandboxGone("the witness session is closed")
            try:
                if through_postmaster:
                    self.knock()
                return self._ask(conn.pgconn, _array(databases))
            except SandboxGone:
                conn.close()  # half a conversation with the server: never reuse it
                raise

    def knock(self) -> None:
        """A new connection as far as the server's password request; SandboxGone if it is refused or
        unanswered. Needs no session of the witness's own."""
        deadline = time.monotonic() + self.answer_seconds
        pg = pq.PGconn.connect_start(self._passwordless)
        try:
            status: int = pq.PollingStatus.WRITING  # libpq's first wait: the socket writable
            while (
                status not in (pq.PollingStatus.OK, pq.PollingStatus.FAILED)
                and pg.status != pq.ConnStatus.BAD
            ):
                self._wait(pg, deadline, write=status == pq.PollingStatus.WRITING)
                status = pg.connect_poll()
            if pg.status == pq.ConnStatus.OK or pg.needs_password:
                return
            said = pg.get_error_message()
            if _REFUSED.search(said) or not _SERVER_SPOKE.search(said):
                raise SandboxGone(f"the server takes no new session: {said.strip() or 'no answer'}")
        finally:
            pg.finish()

    def _ask(self, pg: pq.abc.PGconn, names: bytes) -> Incarnation:
        deadline = time.monotonic() + self.answer_seconds
        try:
            return self._exchange(pg, names, deadline)
        except psycopg.OperationalError as e:  # libpq's word for a session the server dropped
            raise SandboxGone(f"the witness session broke: {e}") from None

    def _exchange(self, pg: pq.abc.PGconn, names: bytes, deadline: float) -> Incarnation:
        pg.send_query_params(_QUERY, [names])
        while True:
            while pg.flush():  # 1: more to write
                self._wait(pg, deadline, write=True)
            pg.consume_input()
            if not pg.is_busy():
                break
            self._wait(pg, deadline)
        result, last = pg.get_result(), None
        while (more := pg.get_result()) is not None:  # drain to the end of this query
            last = more
        if result is None or result.status != pq.ExecStatus.TUPLES_OK or last is not None:
            raise SandboxGone(f"the witness query failed: {pg.get_error_message() or 'no answer'}")
        return Incarnation(_text(result, 0), _text(result, 1))

    @staticmethod
    def _wait(pg: pq.abc.PGconn, deadline: float, *, write: bool = False) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise SandboxGone("the server did not answer the witness in time (frozen or overloaded)")
        fd = pg.socket
        if not fd_ready(fd, left, write=write):
            raise SandboxGone("the server did not answer the witness in time (frozen or overloaded)")


def _text(result: pq.abc.PGresult, col: int) -> str:
    value = result.get_value(0, col)
    return value.decode() if value is not None else ""
