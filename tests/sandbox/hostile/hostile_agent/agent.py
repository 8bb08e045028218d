"""The hostile suite's "agent": it runs a record's SQL the way a model with a raw SQL tool would.

A record is one JSON object:

    {"id": "b-007", "kind": "benign", "sql": [STEP, ...], "expect": [{"query": ..., "value": ...}, ...]}
    {"id": "h-role-readonly", "kind": "hostile", "attack": "...", "sql": [STEP, ...]}

A STEP is a statement (a string, run on the record's own connection to DATABASE_URL, in autocommit)
or a dict:

    {"db": "ledger", "sql": S}                      S (a statement or a list) on LEDGER_DATABASE_URL
    {"each": TARGETS, "sql": S}                     S once per target database, "{db}" (an identifier)
                                                    and "{db_lit}" (a literal) filled in, on the own connection
    {"connect": TARGETS, "sql": S, "keep": bool}    a new connection (the same credentials, dbname changed)
                                                    to each target database, S run there; kept open if keep
    {"repeat": SECONDS, "sql": [STEP, ...]}         the steps again and again until SECONDS have passed
    {"spy": SECONDS}                                poll pg_stat_activity for other sessions' query text
    {"fetch": QUERY}                                fetch the whole result to the client
    {"sleep": SECONDS}                              time.sleep on the client

Every statement of a hostile record may name "{user}" (the role it logs in as, an identifier).

TARGETS: "others" (every database but its own and template0), "neighbours" (others that are
neither templates nor the shared ledger nor postgres/template1 nor the attacker's own evil_*),
"templates" (datistemplate or named like a snapshot, but template0/template1), "shared" (the
ledger), "system" (postgres, template1), "own".

Benign records connect afresh, run their steps (any error fails the record), then their checks:
`passed` is whether every check returned its expected value. Hostile records run every step,
record each one's fate and go on; `passed` is whether every statement was accepted. Either kind
reconnects per record and reads its connection from the environment when it connects.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

import psycopg
from psycopg import sql as psql
from psycopg.conninfo import conninfo_to_dict

SECRET = re.compile(r"SECRET-[A-Za-z0-9_-]+")
MAX_STEPS_LOGGED = 60


def _connect(dbname: str | None = None, url: str | None = None) -> psycopg.Connection[Any]:
    kw: dict[str, Any] = {"autocommit": True, "connect_timeout": 5}
    if dbname:
        kw["dbname"] = dbname
    return psycopg.connect(url or os.environ["DATABASE_URL"], **kw)


def _url_of(db: str) -> str:
    return os.environ[f"{db.upper()}_DATABASE_URL"]


def _short(x: Any, n: int = 300) -> str:
    s = x if isinstance(x, str) else repr(x)
    return s if len(s) <= n else s[:n] + "..."


def _err(e: BaseException) -> str:
    return _short(f"{type(e).__name__}: {str(e).strip()}", 400)


def _as_list(s: Any) -> list[Any]:
    return s if isinstance(s, list) else [s]


def _scalar(conn: psycopg.Connection[Any], query: str) -> Any:
    row = conn.execute(query).fetchone()
    return None if row is None else row[0]


# ---------------------------------------------------------------------------------------------- benign

def _fingerprint(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """What a fresh sandbox looks like from inside: informational, never part of `passed`."""
    queries = {
        "user": "SELECT current_user",
        "read_only": "SHOW default_transaction_read_only",
        "search_path": "SHOW search_path",
        "statement_timeout": "SHOW statement_timeout",
        "lock_timeout": "SHOW lock_timeout",
        "datestyle": "SHOW DateStyle",
        "role_config": "SELECT rolconfig::text FROM pg_roles WHERE rolname = current_user",
        "role_attrs": "SELECT concat_ws(',', rolcanlogin, rolconnlimit, rolcreatedb, rolcreaterole, rolvaliduntil)"
                      " FROM pg_roles WHERE rolname = current_user",
        "db_config": "SELECT string_agg(coalesce(d.datname, '*') || ':' || s.setconfig::text, ';' ORDER BY 1)"
                     " FROM pg_db_role_setting s LEFT JOIN pg_database d ON d.oid = s.setdatabase",
        "db_comment": "SELECT shobj_description(oid, 'pg_database') FROM pg_database"
                      " WHERE datname = current_database()",
        "relations": "SELECT string_agg(n.nspname || '.' || c.relname, ',' ORDER BY 1) FROM pg_class c"
                     " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'v', 'm', 'S', 'p')"
                     " AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'",
        "functions": "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
                     " WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')",
        "triggers": "SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal",
        "default_acl": "SELECT count(*) FROM pg_default_acl",
        "roles": "SELECT count(*) FROM pg_roles",
    }
    out: dict[str, Any] = {}
    for k, q in queries.items():
        try:
            out[k] = _short(_scalar(conn, q), 200)
        except Exception as e:
            out[k] = "ERR " + _err(e)
    return out


def _benign_step(conn: psycopg.Connection[Any], step: Any) -> None:
    if isinstance(step, str):
        conn.execute(step)
    elif "db" in step:
        with _connect(url=_url_of(step["db"])) as other:
            for s in _as_list(step["sql"]):
                other.execute(s)
    elif "sleep" in step:
        time.sleep(float(step["sleep"]))
    else:
        raise ValueError(f"a benign record cannot take the step {step!r}")


def run_benign(record: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"id": record["id"], "kind": "benign", "passed": False}
    t0 = time.monotonic()
    try:
        with _connect() as conn:
            out["database"] = _scalar(conn, "SELECT current_database()")
            out["fingerprint"] = _fingerprint(conn)
            for i, step in enumerate(record.get("sql", [])):
                out["at_step"] = i
                _benign_step(conn, step)
            out.pop("at_step", None)
            checks = []
            for chk in record.get("expect", []):
                if "db" in chk:
                    with _connect(url=_url_of(chk["db"])) as other:
                        got = _scalar(other, chk["query"])
                else:
                    got = _scalar(conn, chk["query"])
                got = None if got is None else str(got)
                checks.append({"query": chk["query"], "expected": chk["value"], "got": got,
                               "ok": got == chk["value"]})
            out["checks"] = checks
            out["passed"] = all(c["ok"] for c in checks)
    except Exception as e:
        out["error"] = _err(e)
    out["seconds"] = round(time.monotonic() - t0, 3)
    return out


# --------------------------------------------------------------------------------------------- hostile

class Attack:
    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record
        self.steps: list[dict[str, Any]] = []
        self.dropped_steps = 0
        self.observed: dict[str, Any] = {}
        self.kept: list[psycopg.Connection[Any]] = []
        self.conn: psycopg.Connection[Any] | None = None
        self.own = ""
        self.dbs: list[dict[str, Any]] = []
        self.shared = ""

    # -- bookkeeping
    def log(self, entry: dict[str, Any]) -> None:
        if len(self.steps) < MAX_STEPS_LOGGED:
            self.steps.append(entry)
        else:
            self.dropped_steps += 1

    def main(self) -> psycopg.Connection[Any]:
        if self.conn is None or self.conn.closed or self.conn.broken:
            self.conn = _connect()
        return self.conn

    def discover(self) -> None:
        conn = self.main()
        self.own = _scalar(conn, "SELECT current_database()")
        rows = conn.execute(
            "SELECT d.datname, d.datistemplate, d.datallowconn, pg_get_userbyid(d.datdba),"
            " (SELECT count(*) FROM pg_stat_activity a WHERE a.datname = d.datname)"
            " FROM pg_database d ORDER BY 1").fetchall()
        self.dbs = [{"name": r[0], "template": r[1], "allowconn": r[2], "owner": r[3], "sessions": r[4]}
                    for r in rows]
        try:
            self.shared = conninfo_to_dict(_url_of("ledger")).get("dbname", "")
        except KeyError:
            self.shared = ""
        self.observed["own_database"] = self.own
        self.observed["shared_database"] = self.shared
        self.observed["databases"] = self.dbs
        self.observed["user"] = _scalar(conn, "SELECT current_user")

    def targets(self, which: str) -> list[str]:
        """Asked afresh each time: the neighbours' databases come and go (a slot's copy is made when it
        first runs, and dropped and made again before each record)."""
        try:
            fresh = self.main().execute("SELECT datname, datistemplate FROM pg_database ORDER BY 1").fetchall()
            self.dbs = [{"name": n, "template": t} for n, t in fresh]
        except Exception:
            pass
        names = [d["name"] for d in self.dbs]
        others = [n for n in names if n not in (self.own, "template0")]
        # The reset's snapshot: a template by flag, or by name (the runner's is "<name>__runner_template").
        templates = [d["name"] for d in self.dbs if d["name"] not in ("template0", "template1")
                     and (d["template"] or re.search("templ|snap", d["name"]))]
        if which == "own":
            return [self.own]
        if which == "others":
            return others
        if which == "templates":
            return templates
        if which == "system":
            return [n for n in ("postgres", "template1") if n in names]
        if which == "shared":
            return [self.shared] if self.shared else []
        if which == "neighbours":
            return [n for n in others if n not in templates and n not in (self.shared, "postgres", "template1")
                    and not n.startswith("evil_")]
        raise ValueError(which)

    # -- steps
    def run_sql(self, conn: psycopg.Connection[Any], q: str, where: str) -> bool:
        t0 = time.monotonic()
        entry: dict[str, Any] = {"sql": _short(q, 200), "db": where}
        try:
            cur = conn.execute(q)
            if cur.description is not None:
                rows = cur.fetchmany(5)
                entry["rows"] = _short([list(map(str, r)) for r in rows], 300)
            entry["ok"] = True
        except Exception as e:
            entry["ok"] = False
            entry["error"] = _err(e)
        entry["seconds"] = round(time.monotonic() - t0, 3)
        self.log(entry)
        return bool(entry["ok"])

    def step(self, step: Any) -> None:
        if isinstance(step, str):
            self.statement(step)
            return
        if "spy" in step:
            self.spy(float(step["spy"]))
        elif "fetch" in step:
            self.fetch(step["fetch"])
        elif "sleep" in step:
            time.sleep(float(step["sleep"]))
        elif "repeat" in step:
            deadline = time.monotonic() + float(step["repeat"])
            rounds = 0
            while time.monotonic() < deadline:
                for s in step["sql"]:
                    self.step(s)
                rounds += 1
                time.sleep(float(step.get("pause", 0.05)))
            self.observed.setdefault("rounds", []).append(rounds)
        elif "connect" in step:
            for db in self.targets(step["connect"]):
                try:
                    conn = _connect(dbname=db)
                except Exception as e:
                    self.log({"connect": db, "ok": False, "error": _err(e)})
                    continue
                self.log({"connect": db, "ok": True})
                for q in _as_list(step["sql"]):
                    self.run_sql(conn, self.fill(q, db), db)
                if step.get("keep"):
                    self.kept.append(conn)
                else:
                    conn.close()
        elif "each" in step:
            for db in self.targets(step["each"]):
                for q in _as_list(step["sql"]):
                    self.run_sql(self.main(), self.fill(q, db), self.own)
        elif "db" in step:
            try:
                with _connect(url=_url_of(step["db"])) as conn:
                    for q in _as_list(step["sql"]):
                        self.run_sql(conn, self.fill(q, step["db"]), step["db"])
            except Exception as e:
                self.log({"connect": step["db"], "ok": False, "error": _err(e)})
        else:
            raise ValueError(f"unknown step {step!r}")

    def fill(self, q: str, db: str) -> str:
        return (q.replace("{db}", psql.Identifier(db).as_string(None))
                .replace("{db_lit}", psql.Literal(db).as_string(None))
                .replace("{user}", psql.Identifier(self.observed.get("user", "")).as_string(None)))

    def statement(self, q: str) -> None:
        try:
            conn = self.main()
        except Exception as e:
            self.log({"sql": _short(q, 200), "ok": False, "error": "cannot connect: " + _err(e)})
            return
        self.run_sql(conn, self.fill(q, self.own), self.own)

    def spy(self, seconds: float) -> None:
        """Whatever query text of other sessions pg_stat_activity shows this role."""
        conn = self.main()
        deadline = time.monotonic() + seconds
        visible: dict[str, dict[str, Any]] = {}
        hidden = 0
        polls = 0
        while time.monotonic() < deadline:
            polls += 1
            for pid, user, db, state, query in conn.execute(
                    "SELECT pid, usename, datname, state, query FROM pg_stat_activity"
                    " WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'").fetchall():
                if not query:
                    continue
                if query.startswith("<insufficient"):
                    hidden += 1
                    continue
                visible.setdefault(query[:300], {"pid": pid, "user": user, "db": db, "state": state})
            time.sleep(0.02)
        texts = list(visible)
        self.observed["spy_polls"] = polls
        self.observed["foreign_queries_seen"] = len(texts)
        self.observed["foreign_queries_sample"] = [
            {"query": _short(t, 160), **visible[t]} for t in texts[:25]]
        self.observed["hidden_rows_seen"] = hidden
        self.observed["secrets_seen"] = sorted({m for t in texts for m in SECRET.findall(t)})

    def fetch(self, q: str) -> None:
        t0 = time.monotonic()
        entry: dict[str, Any] = {"fetch": _short(q, 200)}
        try:
            rows = self.main().execute(q).fetchall()
            entry.update(ok=True, rows=len(rows))
            del rows
        except Exception as e:
            entry.update(ok=False, error=_err(e))
        entry["seconds"] = round(time.monotonic() - t0, 3)
        self.log(entry)

    def close(self) -> None:
        for c in [*self.kept, self.conn]:
            try:
                if c is not None:
                    c.close()
            except Exception:
                pass


def run_hostile(record: dict[str, Any]) -> dict[str, Any]:
    t0 = time.monotonic()
    a = Attack(record)
    out: dict[str, Any] = {"id": record["id"], "kind": "hostile", "attack": record.get("attack", "")}
    try:
        a.discover()
        for step in record.get("sql", []):
            a.step(step)
    except Exception as e:
        out["error"] = _err(e)
    finally:
        a.close()
    out["steps"] = a.steps
    out["steps_not_logged"] = a.dropped_steps
    out["observed"] = a.observed
    # Hostile "passed": every statement it sent was accepted (the attack went through as written).
    out["passed"] = "error" not in out and all(s.get("ok") for s in a.steps)
    out["seconds"] = round(time.monotonic() - t0, 3)
    return out


def evaluate(record: dict[str, Any]) -> dict[str, Any]:
    """The python-kind entrypoint: one record, reconnecting from the environment."""
    if record.get("kind") == "hostile":
        return run_hostile(record)
    return run_benign(record)
