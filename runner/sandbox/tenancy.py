"""Slots as tenants of their worker's sandbox: what one record's SQL can do is bounded by its slot's role.

A worker runs K slots on one PostgreSQL server. Each slot logs in as a role of its own that owns only
that slot's databases; the runner works as a superuser of its own (ADMIN_ROLE, with a password no harness
sees). So a record's SQL, whatever it says, can:
  - not connect to another slot's databases, nor to the reset's snapshots: CONNECT is revoked from PUBLIC
    on every database but `postgres` and `template1` (in which no slot can create anything);
  - not read another slot's query text in pg_stat_activity, nor cancel or terminate its sessions (both
    take membership in the session's role);
  - not alter another slot's role or databases (both take ownership);
  - in a shared database (`shared_databases`), only read, append and create tables: its objects belong to
    a role no slot logs in as, new ones too (sharing.py), and the slots get CONNECT, USAGE, CREATE, SELECT,
    INSERT and REFERENCES (no UPDATE, DELETE or TRUNCATE: no lock that blocks another slot's reads or
    appends);
  - hold at most its share of the server's connections (its role's CONNECTION LIMIT);
  - not make other slots' new connections wait behind a strong lock it queues for on a database (the
    worker's LockQueueGuard ends such a session: lock_queue.py).
What a record can change is its own slot: its role's settings and password, its databases' settings,
owner and privileges, databases it creates. After every chunk the runner puts all of that back as it
was when the slot was made (`tidy`), ends the slot's sessions that are still busy or hold advisory locks,
and drops databases the slot created: the next record starts as on a fresh sandbox. docs/security.md.

A slot's databases are copies of snapshots (templates) whose objects belong to OBJECTS_ROLE, owning no
database; a copy is adopted by its slot (REASSIGN OWNED) as it is made, so the slot's role owns every
object in it, as the harness's own role does in the original.

What a record can still do to its neighbours is exhaust what the server shares (its lock table, memory,
disk) while it runs. Those errors carry SQLSTATE class 53 and the server logs them (jsonlog, read back
through SQL: server_log.py): a record that failed while its own sessions met one is not trusted, as a record
whose server crashed is not (runner/worker/slot.py runs it again, alone).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from loguru import logger
from psycopg import sql

from runner.resources import Resource
from runner.sandbox.base import drop_database
from runner.sandbox.server_log import ServerLog
from runner.sandbox.sharing import NO_LARGE_OBJECTS, hand_over, shared_owner, sharing_role

ADMIN_ROLE = "pgsr_admin"  # the runner's superuser in every sandbox it starts (never a harness's)
SYSTEM_DATABASES = ("postgres", "template0", "template1")
RESERVED_CONNECTIONS = 20  # the runner's own sessions and headroom, out of max_connections
# The longest one of the runner's own statements may wait for its answer. A frozen server (`docker pause`)
# keeps accepting bytes and never answers, and no server-side timeout fires in a frozen server: past this,
# the runner cuts its own socket (the statement fails as a lost connection, which costs the sandbox).
ANSWER_SECONDS = 10.0


def sever(conn: psycopg.Connection[Any]) -> None:
    """Cut a session's socket under a statement that waits on a frozen server: the wait ends in an error."""
    try:
        fd = os.dup(conn.pgconn.socket)
    except (OSError, psycopg.Error):
        return  # closed meanwhile
    with socket.socket(fileno=fd) as s, contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)


def slot_role(base: str, slot: int) -> str:
    """The role slot `slot` logs in as: the harness's own role for slot 0, a role of its own for the
    others."""
    return base if slot == 0 else f"{base}__s{slot}"


def objects_role(base: str) -> str:
    return f"{base}__objects"  # owns the snapshots' objects, and no database


@dataclass(frozen=True)
class Login:
    user: str
    password: str = field(repr=False)


@dataclass
class _Tenant:
    login: Login
    databases: list[str]  # its own, by name (a recreated one keeps its name, not its oid)
    baseline: tuple[str, ...] = ()  # its state at the end of its provisioning (`_state`)
    oids: dict[int, str] = field(
        default_factory=dict
    )  # its own by oid, and their names: a record may rename one
    # ... its settings rows
    settings: list[tuple[str | None, str | None, list[str]]] = field(default_factory=list)


# One slot's state as far as its own SQL can change it, beyond its databases' contents: its role's
# attributes, settings and memberships, its databases' settings, owner, limits and privileges, the
# databases it owns. (The password hash is compared on its own: a restored password hashes anew.)
_STATE = """
SELECT
  (SELECT row(rolcanlogin, rolconnlimit, rolvaliduntil, rolcreatedb, rolinherit)::text
     FROM pg_authid WHERE rolname = %(role)s),
  (SELECT rolpassword FROM pg_authid WHERE rolname = %(role)s),
  (SELECT coalesce(string_agg(row(coalesce(d.datname, ''), coalesce(r.rolname, ''), s.setconfig)::text, ';'
                              ORDER BY 1), '')
     FROM pg_db_role_setting s LEFT JOIN pg_database d ON d.oid = s.setdatabase
     LEFT JOIN pg_roles r ON r.oid = s.setrole
    WHERE r.rolname = %(role)s OR d.datname = ANY(%(dbs)s)),
  (SELECT coalesce(string_agg(row(d.datname, pg_get_userbyid(d.datdba), d.datconnlimit, d.datallowconn,
                                  d.datistemplate, d.datacl)::text, ';' ORDER BY d.datname), '')
     FROM pg_database d WHERE d.datname = ANY(%(dbs)s) OR d.datdba = (SELECT oid FROM pg_roles
                                                                        WHERE rolname = %(role)s)),
  (SELECT coalesce(string_agg(row(pg_get_userbyid(m.roleid), pg_get_userbyid(m.member))::text, ';'
                              ORDER BY 1), '')
     FROM pg_auth_members m JOIN pg_roles r ON r.oid IN (m.roleid, m.member) WHERE r.rolname = %(role)s)
"""
# The slot's sessions still at work, idle in a transaction or holding advisory locks, ended. Functions only,
# no table or view: a query that names a relation needs a slot in the server's lock table, which the session
# to end may have filled (a flood of advisory locks), and the runner must still be able to end it. Each end is
# waited for (up to 2 s): the queries after this one name relations, and a session told to end still holds
# its locks until it has.
_END_SESSIONS = """
SELECT count(pg_terminate_backend(a.pid, 2000)) FROM pg_stat_get_activity(NULL) a
 WHERE a.usesysid = to_regrole(%s)::oid
   AND (a.state IS DISTINCT FROM 'idle' OR a.pid IN (SELECT l.pid FROM pg_lock_status() l
                                                     WHERE l.locktype = 'advisory'))
"""
_STATE_NAMES = ("role attributes", "password", "role and database settings", "databases", "role memberships")


class Steward(Resource):
    """The runner's own session on one sandbox, as its superuser: makes the slots' roles, adopts their
    databases, and tidies each slot after its records. Slots' threads share it (a lock takes turns).

    `enabled` False (an external database, or a harness that logs in as a superuser): every slot logs in
    as the sandbox's one role and nothing here changes the server."""

    def __init__(
        self,
        admin_dsn: str,
        base: str,
        base_password: str,
        *,
        shared: Iterable[str] = (),
        connections: int = 100,
        slots: int = 1,
        enabled: bool = True,
    ) -> None:
        self.admin_dsn, self.base = admin_dsn, base
        self.shared = list(shared)
        self.enabled = enabled
        self.limit = max(2, (connections - RESERVED_CONNECTIONS) // max(1, slots))
        self.tenants: dict[int, _Tenant] = {0: _Tenant(Login(base, base_password), [])}
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.RLock()
        self._server_log = ServerLog()

    # ------------------------------------------------------------------ the session
    def start(self) -> None:
        self._conn = psycopg.connect(self.admin_dsn, autocommit=True, connect_timeout=10)
        if self.enabled and self._q("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (self.base,)) != [
            (False,)
        ]:
            logger.warning(
                "the harness logs in as {!r}, a superuser: its slots cannot be kept apart (every record "
                "can change every other's databases); use a role of its own (database.user)",
                self.base,
            )
            self.enabled = False

    def stop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _q(self, query: Any, params: Any = None) -> list[tuple[Any, ...]]:
        conn = self._conn
        assert conn is not None, "the steward is not started"
        watchdog = threading.Timer(ANSWER_SECONDS, sever, (conn,))
        watchdog.daemon = True
        watchdog.start()
        try:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []
        finally:
            watchdog.cancel()

    def _in(self, database: str) -> psycopg.Connection[Any]:
        """A session of the runner's own in one database (REASSIGN OWNED works on the current one only)."""
        return psycopg.connect(
            psycopg.conninfo.make_conninfo(self.admin_dsn, dbname=database),
            autocommit=True,
            connect_timeout=10,
        )

    def login(self, slot: int) -> Login:
        return self.tenants[slot].login if self.enabled else self.tenants[0].login

    def own_role(self, slot: int) -> str | None:
        """The role `slot`'s records log in as when it is theirs alone (tenants on); None: the sandbox's user,
        which every slot shares."""
        tenant = self.tenants.get(slot) if self.enabled else None
        return tenant.login.user if tenant is not None else None

    # ------------------------------------------------------------------ at boot
    def lock_down(self, own: list[str]) -> None:
        """Once per sandbox, before any snapshot or copy: no database open to PUBLIC but the system ones;
        the shared databases handed to their owner role, with what sharing needs granted; slot 0's role
        bounded like the others. `own`: slot 0's own databases."""
        if not self.enabled:
            return
        with self._lock:
            for name in ("postgres", "template1"):  # open to every slot: nothing of a record may stay there
                with self._in(name) as conn:
                    conn.execute(NO_LARGE_OBJECTS)
            for (name,) in self._q(
                "SELECT datname FROM pg_database WHERE datname <> ALL(%s)", (list(SYSTEM_DATABASES),)
            ):
                self._q(
                    sql.SQL("REVOKE CONNECT, TEMPORARY ON DATABASE {} FROM PUBLIC").format(
                        sql.Identifier(name)
                    )
                )
            for role in (objects_role(self.base), shared_owner(self.base), sharing_role(self.base)):
                # pgsr_admin made none
                self._q(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
                self._q(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(role)))
            self._q(
                sql.SQL("ALTER ROLE {} VALID UNTIL 'infinity' CONNECTION LIMIT {}").format(
                    sql.Identifier(self.base), sql.Literal(self.limit)
                )
            )
            self._q(
                sql.SQL("GRANT {} TO {}").format(
                    sql.Identifier(sharing_role(self.base)), sql.Identifier(self.base)
                )
            )
            for name in self.shared:
                self._share(name)
            self.tenants[0].databases = list(own)
        self.settle(0)

    def _share(self, name: str) -> None:
        """A shared database: owned, with everything in it, by a role nobody logs in as; the slots may
        connect, read and append, and create tables (a harness's `CREATE TABLE IF NOT EXISTS` at start),
        which then belong to that role too (sharing.py)."""
        self._reassign(name, self.base, shared_owner(self.base), fix_databases=True)
        db = sql.Identifier(name)
        self._q(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(db, sql.Identifier(shared_owner(self.base))))
        self._q(
            sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(db, sql.Identifier(sharing_role(self.base)))
        )
        with self._in(name) as conn:
            hand_over(conn, self.base)

    def _reassign(self, database: str, old: str, new: str, *, fix_databases: bool = False) -> None:
        """Every object of `old` in `database` to `new`. REASSIGN OWNED moves `old`'s databases too: with
        `fix_databases` they are given back in the same transaction (only `old` = the harness's role
        owns any; OBJECTS_ROLE owns none, so a slot's adoption touches no other database)."""
        with self._in(database) as conn, conn.transaction():
            owned = (
                [
                    r[0]
                    for r in conn.execute(
                        "SELECT datname FROM pg_database WHERE datdba = (SELECT oid FROM pg_roles WHERE "
                        "rolname = %s)",
                        (old,),
                    ).fetchall()
                ]
                if fix_databases
                else []
            )
            conn.execute(
                sql.SQL("REASSIGN OWNED BY {} TO {}").format(sql.Identifier(old), sql.Identifier(new))
            )
            for d in owned:
                conn.execute(
                    sql.SQL("ALTER DATABASE {} OWNER TO {}").format(sql.Identifier(d), sql.Identifier(old))
                )

    def neutralize(self, template: str) -> None:
        """A snapshot just taken of one of slot 0's databases: its objects to OBJECTS_ROLE, so copies of it
        are adopted without touching any database but theirs."""
        if self.enabled:
            with self._lock:
                self._reassign(template, self.base, objects_role(self.base), fix_databases=True)

    def provision(self, slot: int, databases: list[str], password: str) -> None:
        """Slot `slot`'s role (slot 0 has the harness's own): made before its databases are copied."""
        if not self.enabled or slot == 0:
            return
        role = slot_role(self.base, slot)
        with self._lock:
            self._q(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
            self._q(
                sql.SQL(
                    "CREATE ROLE {} LOGIN CREATEDB PASSWORD {} VALID UNTIL 'infinity' CONNECTION LIMIT {} "
                    "IN ROLE {}"
                ).format(
                    sql.Identifier(role),
                    sql.Literal(password),
                    sql.Literal(self.limit),
                    sql.Identifier(sharing_role(self.base)),
                )
            )
            self.tenants[slot] = _Tenant(Login(role, password), list(databases))

    def owner(self, slot: int) -> str | None:
        """Who a copy made for this slot is to belong to (None: whoever makes it)."""
        return slot_role(self.base, slot) if self.enabled else None

    def adopt(self, slot: int, database: str) -> None:
        """A database just copied for this slot from a snapshot: its objects are the slot's."""
        if self.enabled:
            with self._lock:
                self._reassign(database, objects_role(self.base), slot_role(self.base, slot))
                t = self.tenants[slot]
                t.oids = {o: n for o, n in t.oids.items() if n != database} | dict(
                    self._q("SELECT oid, datname FROM pg_database WHERE datname = %s", (database,))
                )

    def settle(self, slot: int) -> None:
        """The slot is provisioned: what `tidy` puts back from now on."""
        if self.enabled:
            with self._lock:
                t = self.tenants[slot]
                t.oids = dict(
                    self._q("SELECT oid, datname FROM pg_database WHERE datname = ANY(%s)", (t.databases,))
                )
                t.baseline = self._state(slot)
                t.settings = [
                    (d, r, list(c))
                    for d, r, c in self._q(
                        "SELECT d.datname, r.rolname, s.setconfig FROM pg_db_role_setting s "
                        "LEFT JOIN pg_database d ON d.oid = s.setdatabase LEFT JOIN pg_roles r ON r.oid = "
                        "s.setrole "
                        "WHERE r.rolname = %(role)s OR d.datname = ANY(%(dbs)s)",
                        {"role": t.login.user, "dbs": t.databases},
                    )
                ]

    # ------------------------------------------------------------------ between records
    def _state(self, slot: int) -> tuple[str, ...]:
        t = self.tenants[slot]
        row = self._q(_STATE, {"role": t.login.user, "dbs": t.databases})[0]
        return tuple("" if v is None else str(v) for v in row)

    def tidy(self, slot: int) -> list[str]:
        """After a slot's records: its sessions still at work ended, the databases it made dropped, and what
        it changed of its role and databases put back. What was undone, in words (empty: nothing)."""
        if not self.enabled or slot not in self.tenants:
            return []
        t = self.tenants[slot]
        role = t.login.user
        undone: list[str] = []
        with self._lock:
            ended = self._q(_END_SESSIONS, (role,))[0][0]
            if ended:
                undone.append(f"{ended} session(s) still at work or holding advisory locks ended")
            undone += _own_databases_back(self._q, t, sharing_role(self.base))
            now = self._state(slot)
            if now == t.baseline:
                return undone
            changed = [what for what, a, b in zip(_STATE_NAMES, now, t.baseline, strict=True) if a != b]
            self._restore(slot)
            after = self._state(slot)
            t.baseline = (*t.baseline[:1], after[1], *t.baseline[2:])  # a password set again hashes anew
            if after != t.baseline:
                left = [what for what, a, b in zip(_STATE_NAMES, after, t.baseline, strict=True) if a != b]
                raise TenantStuck(f"slot {slot}: {', '.join(left)} could not be put back")
            undone.append(f"{', '.join(changed)} put back")
        return undone

    def _restore(self, slot: int) -> None:
        """The slot's role and databases as its baseline has them. Settings go straight to their catalog: the
        only exact way back to a baseline that may itself hold settings (a value as stored, lists and all)."""
        t = self.tenants[slot]
        role, dbs = sql.Identifier(t.login.user), t.databases
        owner = sql.Identifier(t.login.user)
        self._q(
            sql.SQL(
                "ALTER ROLE {} LOGIN CREATEDB INHERIT VALID UNTIL 'infinity' CONNECTION LIMIT {} PASSWORD {}"
            ).format(role, sql.Literal(self.limit), sql.Literal(t.login.password))
        )
        self._q(
            "DELETE FROM pg_db_role_setting s USING pg_database d WHERE s.setdatabase = d.oid "
            "AND d.datname = ANY(%s)",
            (dbs,),
        )
        self._q(
            "DELETE FROM pg_db_role_setting WHERE setrole = (SELECT oid FROM pg_roles WHERE rolname = %s)",
            (t.login.user,),
        )
        for database, who, config in t.settings:
            self._q(
                "INSERT INTO pg_db_role_setting SELECT coalesce((SELECT oid FROM pg_database WHERE datname = "
                "%s),"
                " 0), coalesce((SELECT oid FROM pg_roles WHERE rolname = %s), 0), %s::text[]",
                (database, who, config),
            )
        for name in dbs:
            db = sql.Identifier(name)
            self._q(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(db, owner))
            # no ALTER DATABASE puts back a NULL acl, nor limits the owner may have set: the catalog does
            self._q(
                "UPDATE pg_database SET datconnlimit = -1, datallowconn = true, datistemplate = false, "
                "datacl = NULL WHERE datname = %s",
                (name,),
            )
            self._q(sql.SQL("REVOKE CONNECT, TEMPORARY ON DATABASE {} FROM PUBLIC").format(db))
        for granted, member in self._q(
            "SELECT pg_get_userbyid(roleid), pg_get_userbyid(member) FROM pg_auth_members "
            "WHERE roleid = (SELECT oid FROM pg_roles WHERE rolname = %s)",
            (t.login.user,),
        ):
            self._q(sql.SQL("REVOKE {} FROM {}").format(sql.Identifier(granted), sql.Identifier(member)))

    # ------------------------------------------------------------------ shared resources
    def starved(self, slot: int, since: float, until: float) -> str | None:
        """What the server ran out of (a class-53 error: lock table, memory, disk, connections) for one of
        this slot's sessions between `since` and `until` (Unix times), in words; None if it did not."""
        if not self.enabled:
            return None
        role = self.login(slot).user
        with self._lock:
            return self._server_log.starved(role, since, until, self._q)


def _own_databases_back(q: Callable[..., list[tuple[Any, ...]]], t: _Tenant, sharing: str) -> list[str]:
    """The databases of a slot's role as it was given them, through `q` (the steward's watched query): the
    ones its records made dropped, their own and those handed to the role every slot is a member of (OWNER
    TO <user>__sharing, which membership allows: nobody else's, and never the runner's, so left they would
    outlive every reset). Its own are known by oid: one a record renamed is named back, never dropped as one
    it made (under reset: none that lost the slot its data), and one that took its name is dropped. What was
    done, in words."""
    done: list[str] = []
    owned = q(
        "SELECT oid, datname FROM pg_database WHERE datdba IN (SELECT oid FROM pg_roles "
        "WHERE rolname IN (%s, %s))",
        (t.login.user, sharing),
    )
    renamed = {oid: name for oid, name in owned if oid in t.oids and t.oids[oid] != name}
    for oid, name in owned:
        if oid in t.oids or (name in t.databases and name not in (t.oids[o] for o in renamed)):
            continue  # its own (one recreated under its name), unless it took a renamed one's name
        drop_database(q, name)
        done.append(f"database {name!r} it made dropped")
    for oid, name in renamed.items():
        q("SELECT count(pg_terminate_backend(pid, 2000)) FROM pg_stat_activity WHERE datname = %s", (name,))
        q(sql.SQL("ALTER DATABASE {} RENAME TO {}").format(sql.Identifier(name), sql.Identifier(t.oids[oid])))
        done.append(f"database {t.oids[oid]!r}, renamed {name!r} by a record, named back")
    return done


class TenantStuck(Exception):
    """A slot's role or databases could not be put back: its sandbox is replaced."""
