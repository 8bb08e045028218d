"""A guard against lock queues on the server's shared objects: one record's session must not make the
slots' new connections wait.

PostgreSQL grants locks in the order they were asked for. A connection takes a weak lock on its database
as it starts (RowExclusiveLock on the database object, in InitPostgres), so a session that waits for a
strong lock on a database makes every new connection to that database wait behind it. Some commands ask
for that lock before they check the caller may do it at all: DROP DATABASE does (it locks the database,
then finds its caller is not the owner). A record can so freeze every neighbour's connections to a shared
database, or to `postgres`, which the runner's own reset uses: it holds a weak lock on the database in an
open transaction (ALTER ROLE itself IN DATABASE ... SET, which any role may do), then, from a second
session, asks to drop it; the drop waits on the first session and every new connection waits on the drop.
Found by an independent probe (3 slots: 6 of 10 neighbours' records timed out, in every run).

The same holds for the tables of a shared database (`shared_databases`), where every slot reads and
appends: adding a foreign key to one (SHARE ROW EXCLUSIVE) or a partition of it (ACCESS EXCLUSIVE) asks
for its lock before the privilege or owner check, so a record that holds a weak lock on the table (an
INSERT in an open transaction) and asks for that from a second session queues every other slot's INSERT
behind the request (found by a second probe: the neighbours that started first timed out).

No record of a tenant has a reason to wait for a strong lock on a shared object (databases, roles,
tablespaces: the `database = 0` rows of pg_locks) or on a relation of a shared database, so a session of
a non-superuser role seen waiting for one is ended, within POLL_SECONDS: the waiters behind it then get
their locks. The sessions waiting behind it ask for weak modes and are left alone.

Nor to hold one there for long: a foreign key a record makes to a shared table, in a transaction it keeps
open, is granted SHARE ROW EXCLUSIVE on that table (nobody held a conflicting lock), and every other
slot's INSERT then waits until the record ends (a second probe: its neighbours timed out). A tenant's
session that holds a strong lock on a relation of a shared database that another session waits for, in a
transaction open for more than HOLD_SECONDS, is ended. A harness's own DDL there (the built-in CRM's
telemetry makes two tables at start, one referencing the other) holds such a lock for milliseconds.

Nor any other lock for long, whatever its kind: a tenant's session that a session of another role (another
slot's, or the runner's own) has waited on for more than WAIT_SECONDS is ended (pg_blocking_pids). A row
a record inserted with a unique key and held in an open transaction made a neighbour's insert of the same key
wait 25.7 s (an independent probe); an advisory lock or a row lock held across a long statement does the
same. Waits between one slot's own sessions are its record's own business, and left alone.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import psycopg
from loguru import logger

from runner.resources import Resource
from runner.sandbox.tenancy import sever

POLL_SECONDS = 0.1  # the longest a neighbour's new connection waits behind a queued strong lock
# the modes that conflict with the RowExclusiveLock a connection takes on its database as it starts, and an
# INSERT on a table
STRONG = ("ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock")
HOLD_SECONDS = (
    0.5  # the longest a tenant's transaction may hold a strong lock on a shared table others wait for
)
WAIT_SECONDS = 1.0  # the longest another role's session may wait on a tenant's, for any lock
# Functions only, no table or view (as the steward's end of a slot's sessions): a query that names a
# relation needs a slot in the server's lock table, which a record may have filled meanwhile. One statement
# for both rules, so a sweep is one round trip: `queued` rows wait for a strong lock, `holding` rows hold
# one on a shared table that another session waits for.
_SWEEP = """
SELECT 'queued', l.pid, pg_get_userbyid(a.usesysid), l.mode, l.database = 0, pg_terminate_backend(l.pid, 1000)
  FROM pg_lock_status() l JOIN pg_stat_get_activity(NULL) a ON a.pid = l.pid
 WHERE NOT l.granted AND l.mode = ANY(%(strong)s) AND a.usesysid <> ALL(%(superusers)s::oid[])
   AND (l.database = 0 OR l.locktype = 'relation' AND l.database = ANY(%(shared)s::oid[]))
UNION ALL
SELECT 'holding', h.pid, pg_get_userbyid(a.usesysid), h.mode, false, pg_terminate_backend(h.pid, 1000)
  FROM pg_lock_status() h JOIN pg_stat_get_activity(NULL) a ON a.pid = h.pid
 WHERE h.granted AND h.mode = ANY(%(strong)s) AND a.usesysid <> ALL(%(superusers)s::oid[])
   AND h.locktype = 'relation' AND h.database = ANY(%(shared)s::oid[])
   AND a.xact_start < statement_timestamp() - make_interval(secs => %(hold)s)
   AND EXISTS (SELECT 1 FROM pg_lock_status() w
                WHERE NOT w.granted AND w.locktype = 'relation' AND w.database = h.database
                  AND w.relation = h.relation AND w.pid <> h.pid)
UNION ALL
SELECT DISTINCT 'blocking', b.pid, pg_get_userbyid(ba.usesysid), w.mode, false,
       pg_terminate_backend(b.pid, 1000)
  FROM pg_lock_status() w JOIN pg_stat_get_activity(NULL) wa ON wa.pid = w.pid
 CROSS JOIN LATERAL unnest(pg_blocking_pids(w.pid)) AS b(pid)
  JOIN pg_stat_get_activity(NULL) ba ON ba.pid = b.pid
 WHERE NOT w.granted AND w.waitstart < statement_timestamp() - make_interval(secs => %(wait)s)
   AND ba.usesysid <> ALL(%(superusers)s::oid[]) AND ba.usesysid IS DISTINCT FROM wa.usesysid
"""


class LockQueueGuard(Resource):
    """Its own session of the runner's superuser on one sandbox, and a thread that ends, every POLL_SECONDS,
    the tenants' sessions that wait for a strong lock on a shared object or on a table of a shared database
    (`shared`: their names). `ended`: how many it ended."""

    def __init__(self, admin_dsn: str, name: str = "lock-queue-guard", *, shared: Sequence[str] = ()) -> None:
        self.admin_dsn, self.name, self.shared = admin_dsn, name, list(shared)
        self.ended = 0
        self._conn: psycopg.Connection[Any] | None = None
        self._superusers: list[int] = []
        self._shared_oids: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._conn = psycopg.connect(
            self.admin_dsn, autocommit=True, connect_timeout=10, application_name="pgsr_lock_guard"
        )
        # the superusers (the runner's own role, the image's postgres): a tenant never becomes one
        self._superusers = [r[0] for r in self._conn.execute("SELECT oid FROM pg_roles WHERE rolsuper")]
        self._shared_oids = [
            r[0]
            for r in self._conn.execute("SELECT oid FROM pg_database WHERE datname = ANY(%s)", (self.shared,))
        ]
        self._thread = threading.Thread(target=self._watch, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(1)
            # its look waits on a frozen server: cut it short
            if thread.is_alive() and self._conn is not None:
                sever(self._conn)
                thread.join(5)
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def sweep(self) -> int:
        """End the sessions waiting now, and those holding a shared table others wait for; how many."""
        conn = self._conn
        if conn is None:
            return 0
        args = {
            "strong": list(STRONG),
            "superusers": self._superusers,
            "shared": self._shared_oids,
            "hold": HOLD_SECONDS,
            "wait": WAIT_SECONDS,
        }
        rows = conn.execute(_SWEEP, args).fetchall()
        queued = [row for row in rows if row[0] == "queued"]
        # a session holding several tables is one session ended
        held = {row[1]: row for row in rows if row[0] == "holding"}
        blocking = {row[1]: row for row in rows if row[0] == "blocking" and row[1] not in held}
        for _, pid, role, mode, on_server, _ in queued:
            what = (
                "a database or role, which makes every new connection to it wait behind it"
                if on_server
                else "a table of a shared database, which makes every slot's use of it wait behind it"
            )
            logger.warning("ended session {} of {}: it waited for {} on {}", pid, role, mode, what)
        for _, pid, role, mode, _, _ in held.values():
            logger.warning(
                "ended session {} of {}: its transaction held {} on a table of a shared database for over "
                "{} s while other slots waited for it",
                pid,
                role,
                mode,
                HOLD_SECONDS,
            )
        for _, pid, role, mode, _, _ in blocking.values():
            logger.warning(
                "ended session {} of {}: another slot's or the runner's session waited on it (for {}) "
                "for over {} s",
                pid,
                role,
                mode,
                WAIT_SECONDS,
            )
        n = len(queued) + len(held) + len(blocking)
        self.ended += n
        return n

    def _watch(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            try:
                self.sweep()
            except psycopg.Error as e:
                conn = self._conn
                # the server died or was replaced: the keeper's witness finds out
                if conn is None or conn.closed or conn.broken:
                    logger.debug("lock queue guard stopped: {}", e)
                    return
                # a look refused (the server out of a shared resource a record used up): the next one
                logger.debug("lock queue guard: {}", e)
