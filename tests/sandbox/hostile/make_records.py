"""The hostile suite's records: benign ones that check their own result, and attacks, each its own record.

    python tests/sandbox/hostile/make_records.py      # (re)writes records.jsonl beside it

records.jsonl interleaves them: each attack is followed by `after` benign records, so that with one
slot the records after an attack run in the same sandbox, and with several slots its neighbours run
while it does and after it. The order goes from attacks whose effect should end with the record (its
own database, which `reset: recreate` drops) to the ones that reach the whole server (the role both
the harness and the runner log in as), so that in one interleaved run the later, wider attacks do
not hide the earlier ones. tests/sandbox/test_hostile_{python,command}.py also run each attack alone (HOSTILE_EACH=1).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
LONG = 20  # seconds an attack holds on: far past conversation_timeout_seconds (3 s python, 5 s command)
LOOP = 2.0  # seconds the attacks that race the neighbours keep at it (under the 3 s limit)


def benign(n: int) -> dict[str, Any]:
    """Writes, unqualified names, a date rendered as text, a new table, a sequence, the shared ledger:
    each passes on a fresh sandbox whatever slot it runs in, and the query text carries a secret."""
    rid = f"b-{n:03d}"
    key = 100 + n
    return {
        "id": rid, "kind": "benign",
        "sql": [
            f"SELECT pg_sleep(0.05) /* SECRET-{rid}: only this record's session may read this */",
            f"INSERT INTO items (id, v) VALUES ({key}, 'benign-{n}')",
            f"UPDATE items SET v = v || '+' WHERE id = {key}",
            "CREATE TABLE scratch (k int PRIMARY KEY, note text NOT NULL)",
            f"INSERT INTO scratch VALUES ({n}, '{rid}')",
            "SELECT nextval('ticket_seq')",
            {"db": "ledger", "sql": f"INSERT INTO events (record_id) VALUES ('{rid}')"},
            f"SELECT pg_sleep(0.05) /* SECRET-{rid} */",
        ],
        "expect": [
            {"query": "SELECT string_agg(id || '=' || v || '@' || d, ',' ORDER BY id) FROM items",
             "value": f"1=alpha@2024-03-04,2=beta@2024-03-04,3=gamma@2024-03-04,{key}=benign-{n}+@2024-03-04"},
            {"query": "SELECT string_agg(k || ':' || note, ',') FROM scratch", "value": f"{n}:{rid}"},
            {"query": "SELECT last_value || ':' || is_called FROM ticket_seq", "value": "1:true"},
            {"db": "ledger", "query": f"SELECT count(*) > 0 FROM events WHERE record_id = '{rid}'", "value": "True"},
        ],
    }


ATTACKS: list[tuple[str, str, list[Any], int]] = []


def attack(name: str, what: str, steps: list[Any], after: int = 1) -> None:
    ATTACKS.append((f"h-{name}", what, steps, after))


def loop(*steps: Any, pause: float = 0.02) -> dict[str, Any]:
    return {"repeat": LOOP, "pause": pause, "sql": list(steps)}


# -- what it can see of the neighbours
attack("spy-activity", "read other sessions' query text in pg_stat_activity", [{"spy": LOOP}], after=2)
attack("read-neighbours", "connect to the neighbours' databases and the snapshot with its own credentials, and read",
       [{"connect": "neighbours", "sql": "SELECT string_agg(id || '=' || v, ',' ORDER BY id) FROM items"},
        {"connect": "templates", "sql": "SELECT string_agg(id || '=' || v, ',' ORDER BY id) FROM items"},
        {"db": "ledger", "sql": "SELECT string_agg(record_id, ',') FROM events"}])

# -- its own database (recreate should undo all of it)
attack("own-db-settings", "ALTER DATABASE <its own database> SET read-only, search_path, statement_timeout",
       [{"each": "own", "sql": ["ALTER DATABASE {db} SET default_transaction_read_only = on",
                                "ALTER DATABASE {db} SET search_path = pg_catalog",
                                "ALTER DATABASE {db} SET statement_timeout = 1"]}])
attack("own-other-schema", "a schema named after the role ($user, first on the search_path) with its own items",
       ["CREATE SCHEMA hostile",
        "CREATE TABLE hostile.items (id int PRIMARY KEY, v text, d date)",
        "CREATE TABLE hostile.scratch (k int, note text)"])
attack("own-function-trigger", "CREATE FUNCTION and a trigger that rewrites every write to items",
       ["CREATE FUNCTION public.evil() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN NEW.v := 'pwned'; RETURN NEW; END$$",
        "CREATE TRIGGER evil BEFORE INSERT OR UPDATE ON public.items FOR EACH ROW EXECUTE FUNCTION public.evil()",
        "CREATE FUNCTION public.lower(text) RETURNS text LANGUAGE sql AS $$SELECT 'pwned'$$"])
attack("own-default-privileges", "ALTER DEFAULT PRIVILEGES / REVOKE from itself, in its own database",
       ["ALTER DEFAULT PRIVILEGES REVOKE ALL ON TABLES FROM {user}",
        "ALTER DEFAULT PRIVILEGES REVOKE ALL ON SEQUENCES FROM {user}",
        "REVOKE ALL ON items, ticket_seq FROM {user}"])
attack("own-sequence", "move its database's sequence", ["SELECT setval('ticket_seq', 500)",
                                                         "ALTER SEQUENCE ticket_seq INCREMENT BY 7"])
attack("comment-databases", "COMMENT ON DATABASE, its own and every other",
       [{"each": "own", "sql": "COMMENT ON DATABASE {db} IS 'pwned'"},
        {"each": "others", "sql": "COMMENT ON DATABASE {db} IS 'pwned'"}])

# -- privileges it should not have
attack("create-role", "CREATE ROLE", ["CREATE ROLE evil LOGIN PASSWORD 'evil'", "CREATE ROLE evil_group NOLOGIN"])
attack("event-trigger", "CREATE EVENT TRIGGER",
       ["CREATE FUNCTION public.evil_ddl() RETURNS event_trigger LANGUAGE plpgsql AS "
        "$$BEGIN RAISE EXCEPTION 'no DDL'; END$$",
        "CREATE EVENT TRIGGER evil_ddl ON ddl_command_start EXECUTE FUNCTION public.evil_ddl()"])
attack("session-preload", "session_preload_libraries at role and database level, ALTER SYSTEM",
       ["ALTER ROLE CURRENT_USER SET session_preload_libraries = 'auto_explain'",
        {"each": "own", "sql": "ALTER DATABASE {db} SET session_preload_libraries = 'auto_explain'"},
        "ALTER SYSTEM SET default_transaction_read_only = on",
        "SELECT pg_reload_conf()"])
attack("role-attributes", "ALTER ROLE CURRENT_USER CONNECTION LIMIT 0 / NOLOGIN / VALID UNTIL",
       ["ALTER ROLE CURRENT_USER CONNECTION LIMIT 0", "ALTER ROLE CURRENT_USER NOLOGIN",
        "ALTER ROLE CURRENT_USER VALID UNTIL '2000-01-01'"])
attack("server-programs", "COPY TO PROGRAM, pg_read_file, untrusted languages",
       ["COPY items TO PROGRAM 'id'", "SELECT pg_read_file('/etc/passwd')", "CREATE EXTENSION plpython3u"])
attack("system-databases", "ALTER DATABASE postgres/template1 SET ..., objects in their public schemas",
       ["ALTER DATABASE postgres SET default_transaction_read_only = on",
        "ALTER DATABASE template1 SET default_transaction_read_only = on",
        {"connect": "system", "sql": "CREATE TABLE public.evil_public (x int)"}])

# -- time and resources
attack("sleep-past-limit", f"pg_sleep({LONG}) past the record's time limit", [f"SELECT pg_sleep({LONG})"])
attack("lock-past-limit", "LOCK TABLE items IN ACCESS EXCLUSIVE MODE, then sleep past the time limit",
       ["BEGIN", "LOCK TABLE items IN ACCESS EXCLUSIVE MODE", f"SELECT pg_sleep({LONG})"])
attack("lock-neighbours", "lock the neighbours' items (own credentials, their database), then sleep past the limit",
       [{"connect": "neighbours", "keep": True, "sql": ["BEGIN", "LOCK TABLE items IN ACCESS EXCLUSIVE MODE"]},
        f"SELECT pg_sleep({LONG})"], after=2)
attack("lock-table-exhaustion", "fill the server's shared lock table with session advisory locks, hold them",
       ["SELECT count(pg_advisory_lock(k)) FROM generate_series(1, 200000) k", {"sleep": LOOP}], after=2)
attack("listen-notify", "LISTEN, NOTIFY floods here and in the neighbours' databases",
       ["LISTEN evil", "SELECT count(pg_notify('evil', repeat('x', 7000))) FROM generate_series(1, 500)",
        {"connect": "neighbours", "sql": ["LISTEN evil", "NOTIFY evil, 'pwned'"]}])
attack("prepared-transaction", "PREPARE TRANSACTION holding a lock on items",
       ["BEGIN", "INSERT INTO items (id, v) VALUES (900, 'prepared')", "PREPARE TRANSACTION 'evil'"])
attack("temp-growth", "a temp table of ~1 GB (generate_series)",
       ["CREATE TEMP TABLE evil_tmp AS SELECT g, repeat(md5(g::text), 16) AS pad FROM generate_series(1, 2000000) g"])
attack("huge-sort", "a sort that spills ~1 GB of temp files and outlives the time limit",
       ["SELECT count(*) FROM (SELECT md5(g::text) AS m FROM generate_series(1, 30000000) g ORDER BY 1) s"])
attack("huge-result", "a ~700 MB result set fetched to the client",
       [{"fetch": "SELECT g, repeat('x', 200) FROM generate_series(1, 3000000) g"}])

# -- the neighbours, while they run
# (only the sessions of its own role: one superuser session in the list makes the whole statement fail)
attack("cancel-others", "pg_cancel_backend on every other session of its role, again and again",
       [loop("SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity"
             " WHERE pid <> pg_backend_pid() AND usename = current_user")], after=2)
attack("terminate-others", "pg_terminate_backend on every other session of its role, again and again",
       [loop("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
             " WHERE pid <> pg_backend_pid() AND usename = current_user")], after=2)
attack("tamper-neighbours", "connect to the neighbours' databases (own credentials) and rewrite their items",
       [loop({"connect": "neighbours", "sql": ["UPDATE items SET v = 'pwned'",
                                               "INSERT INTO items (id, v) VALUES (999, 'pwned') ON CONFLICT DO NOTHING",
                                               "SELECT setval('ticket_seq', 500)"]})], after=2)
attack("alter-db-neighbours", "ALTER DATABASE <another slot's database> SET default_transaction_read_only = on",
       [loop({"each": "neighbours", "sql": "ALTER DATABASE {db} SET default_transaction_read_only = on"},
             pause=0.005)], after=2)
attack("lockout-neighbours", "ALTER DATABASE <neighbour> CONNECTION LIMIT 0, REVOKE CONNECT on it",
       [loop({"each": "neighbours", "sql": ["ALTER DATABASE {db} CONNECTION LIMIT 0",
                                            "REVOKE CONNECT, TEMPORARY ON DATABASE {db} FROM PUBLIC, {user}"]},
             pause=0.005)], after=2)
attack("drop-neighbours", "DROP DATABASE <neighbour> WITH (FORCE)",
       [loop({"each": "neighbours", "sql": "DROP DATABASE IF EXISTS {db} WITH (FORCE)"})], after=2)

# -- the database every slot shares (shared_databases)
attack("shared-shadow", "a $user schema in the shared database whose view shadows its table; a table in its public",
       [{"db": "ledger", "sql": ["CREATE TABLE public.evil_public (x int)", "CREATE SCHEMA hostile",
                                 "CREATE VIEW hostile.events AS"
                                 " SELECT 'x'::text AS record_id, now() AS at WHERE false"]}])
attack("shared-trigger", "a trigger in the shared database that refuses every insert",
       [{"db": "ledger", "sql": [
           "CREATE FUNCTION public.evil() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'pwned'; END$$",
           "CREATE TRIGGER evil BEFORE INSERT ON public.events FOR EACH ROW EXECUTE FUNCTION public.evil()"]}])
attack("shared-lock", "LOCK the shared database's table, then sleep past the time limit",
       [{"db": "ledger", "sql": ["BEGIN", "LOCK TABLE events IN ACCESS EXCLUSIVE MODE", f"SELECT pg_sleep({LONG})"]}])
# A view reaches the tables under it as its owner, and the shared owner owns them all (found by an independent
# probe): a slot's default privileges (ALL to PUBLIC) went with its new view to the shared owner, and every
# slot could delete, change and lock the others' rows through it. Its large objects outlived the record.
def view_over_events(name: str) -> list[str]:
    return ["ALTER DEFAULT PRIVILEGES GRANT ALL ON TABLES TO PUBLIC",
            f"CREATE VIEW public.{name} AS SELECT * FROM events"]


attack("shared-view-delete", "default privileges to PUBLIC, a view over the shared table, then delete the "
       "neighbours' rows through it again and again",
       [{"db": "ledger", "sql": view_over_events("ev")},
        {"repeat": 2.5, "pause": 0.005,
         "sql": [{"db": "ledger", "sql": ["DELETE FROM ev WHERE record_id LIKE 'b-%'"]}]}],
       after=2)
attack("shared-view-lock", "the same view, LOCKed (which locks the shared table as the view's owner) and held",
       [{"db": "ledger", "sql": [*view_over_events("ev_locked"), "BEGIN",
                                 "LOCK TABLE ev_locked IN ACCESS EXCLUSIVE MODE", f"SELECT pg_sleep({LONG})"]}],
       after=2)
attack("shared-large-object", "a large object in the shared database, open to every later record",
       [{"db": "ledger", "sql": ["SELECT lo_from_bytea(424242, convert_to('planted by an attack', 'UTF8'))",
                                 "GRANT SELECT, UPDATE ON LARGE OBJECT 424242 TO PUBLIC"]}])
# A lock that a shared table's foreign key or partition asks for before its privilege or owner check, queued
# behind the record's own INSERT held open: every other slot's INSERT then waits behind it (found by a
# second probe; the lock queue guard ends such a session).
HOLD_AN_INSERT = {"connect": "shared", "keep": True, "sql": ["BEGIN", "INSERT INTO events (record_id) VALUES ('h')"]}
attack("shared-fk-queue", "hold an INSERT on the shared table open, then add a foreign key to it from a new table",
       [HOLD_AN_INSERT, {"db": "ledger", "sql": ["CREATE TABLE public.evfk (r text REFERENCES events(record_id))"]}],
       after=2)
attack("shared-partition-queue", "hold an INSERT on the shared table open, then attach a partition to it",
       [HOLD_AN_INSERT, {"db": "ledger", "sql": ["CREATE TABLE public.evp PARTITION OF events DEFAULT"]}], after=2)
# The residual the second probe left (a foreign key granted, then held): SHARE ROW EXCLUSIVE on the shared
# table in a transaction kept open, every neighbour's INSERT behind it; the guard ends the holder.
attack("shared-fk-hold", "add a foreign key to the shared table in a transaction, and keep the transaction open",
       [{"connect": "shared", "keep": True,
         "sql": ["BEGIN", "CREATE TABLE public.evh (r bigint REFERENCES events(id))"]}, {"sleep": LONG}],
       after=2)
# A shared table's sequence squatted (issue 64): rows with explicit ids ahead of the sequence, so every later
# default-keyed append of every slot meets a duplicate key; an agent "fixing" a failing insert does it without
# malice. Also through OVERRIDING SYSTEM VALUE and setval, and held in an open transaction (a neighbour's
# insert of the same key would wait on it).
SEQ = "pg_get_serial_sequence('events', 'id')"
SQUAT = ("INSERT INTO events (id, record_id) {how} SELECT g, 'squat' "
         f"FROM generate_series(nextval({SEQ}) + 1, currval({SEQ}) + 3000) g")
attack("shared-sequence-squat", "insert rows into the shared table with explicit ids ahead of its sequence",
       [{"connect": "shared", "sql": [SQUAT.format(how=""), SQUAT.format(how="OVERRIDING SYSTEM VALUE"),
                                      "SELECT setval(pg_get_serial_sequence('events', 'id'), 1)"]}],
       after=3)
attack("shared-held-rows", "insert explicit ids ahead of the shared table's sequence in a transaction kept open",
       [{"connect": "shared", "keep": True, "sql": ["BEGIN", SQUAT.format(how="")]}, {"sleep": LONG}],
       after=3)
attack("alter-db-shared", "ALTER DATABASE <the shared database> SET default_transaction_read_only = on",
       [{"each": "shared", "sql": "ALTER DATABASE {db} SET default_transaction_read_only = on"}])
attack("lockout-shared", "ALTER DATABASE <the shared database> CONNECTION LIMIT 0",
       [{"each": "shared", "sql": "ALTER DATABASE {db} CONNECTION LIMIT 0"}])

# A lock queue (found by an independent probe): a weak lock on a database held in an open transaction (any
# role may set its own settings in any database), then DROP DATABASE from a second session, which asks for
# ACCESS EXCLUSIVE before it checks ownership: every new connection to that database waits behind the drop.
attack("lock-queue-shared", "hold ALTER ROLE <self> IN DATABASE <the shared database> uncommitted, then DROP "
       "DATABASE it from a second session: new connections to it queue behind the drop",
       ["BEGIN", {"each": "shared", "sql": "ALTER ROLE {user} IN DATABASE {db} SET work_mem = '64kB'"},
        {"connect": "system", "sql": "DROP DATABASE ledger"}])
attack("lock-queue-system", "the same against postgres, which the runner's own resets connect to",
       ["BEGIN", "ALTER ROLE {user} IN DATABASE postgres SET work_mem = '64kB'",
        {"connect": "shared", "sql": "DROP DATABASE postgres"}])

# -- the reset's snapshot database
attack("tamper-template", "connect to the snapshot database (own credentials) and change its rows, privileges, objects",
       [{"connect": "templates", "sql": [
           "UPDATE items SET v = 'pwned' WHERE id = 1",
           "SELECT setval('ticket_seq', 500)",
           "ALTER DEFAULT PRIVILEGES REVOKE ALL ON TABLES FROM {user}",
           "CREATE FUNCTION public.evil() RETURNS trigger LANGUAGE plpgsql AS"
           " $$BEGIN NEW.v := 'pwned'; RETURN NEW; END$$",
           "CREATE TRIGGER evil BEFORE INSERT OR UPDATE ON public.items FOR EACH ROW EXECUTE FUNCTION public.evil()"]}])
attack("alter-db-template", "ALTER DATABASE <the snapshot> SET read-only, CONNECTION LIMIT 0, REVOKE CONNECT",
       [{"each": "templates", "sql": ["ALTER DATABASE {db} SET default_transaction_read_only = on",
                                      "ALTER DATABASE {db} CONNECTION LIMIT 0",
                                      "REVOKE CONNECT ON DATABASE {db} FROM PUBLIC, {user}"]}])
attack("hold-template", "keep a session open on the snapshot database past the time limit",
       [{"connect": "templates", "keep": True, "sql": "SELECT 1"}, f"SELECT pg_sleep({LONG})"])
attack("drop-template", "DROP DATABASE <the snapshot>",
       [{"each": "templates", "sql": "DROP DATABASE {db} WITH (FORCE)"}])

# -- the server and the role
attack("create-database-flood", "CREATE DATABASE x 50",
       [f"CREATE DATABASE evil_{i:02d}" for i in range(50)])
attack("role-statement-timeout", "ALTER ROLE CURRENT_USER SET statement_timeout = 1",
       ["ALTER ROLE CURRENT_USER SET statement_timeout = 1"])
attack("role-search-path", "ALTER ROLE CURRENT_USER SET search_path = 'pg_catalog'",
       ["ALTER ROLE CURRENT_USER SET search_path = 'pg_catalog'"])
attack("user-search-path", "ALTER USER <its name> SET search_path TO pg_catalog, pg_temp",
       ["ALTER USER {user} SET search_path TO pg_catalog, pg_temp"])
attack("role-in-database-search-path", "ALTER ROLE ... IN DATABASE <each database> SET search_path",
       [{"each": "own", "sql": "ALTER ROLE CURRENT_USER IN DATABASE {db} SET search_path = pg_catalog"},
        {"each": "others", "sql": "ALTER ROLE CURRENT_USER IN DATABASE {db} SET search_path = pg_catalog"}])
attack("role-search-path-from-current", "SET search_path, then ALTER ROLE SESSION_USER SET search_path FROM CURRENT",
       ["SET search_path = pg_catalog", "ALTER ROLE SESSION_USER SET \"search_path\" FROM CURRENT"])
attack("role-all-search-path", "ALTER ROLE ALL SET search_path (every role)",
       ["ALTER ROLE ALL SET search_path = pg_catalog",
        {"each": "own", "sql": "ALTER ROLE ALL IN DATABASE {db} SET search_path = pg_catalog"}])
attack("role-datestyle", "ALTER ROLE CURRENT_USER SET DateStyle = 'SQL, DMY'",
       ["ALTER ROLE CURRENT_USER SET DateStyle = 'SQL, DMY'"])
attack("role-idle-session-timeout", "ALTER ROLE CURRENT_USER SET idle_session_timeout = 1",
       ["ALTER ROLE CURRENT_USER SET idle_session_timeout = 1"], after=2)
attack("role-read-only", "ALTER ROLE CURRENT_USER SET default_transaction_read_only = on",
       ["ALTER ROLE CURRENT_USER SET default_transaction_read_only = on"])
attack("role-local-preload", "ALTER ROLE CURRENT_USER SET local_preload_libraries to a library that does not exist",
       ["ALTER ROLE CURRENT_USER SET local_preload_libraries = 'evil_no_such_library'"])
attack("role-password", "ALTER ROLE CURRENT_USER PASSWORD 'x'", ["ALTER ROLE CURRENT_USER PASSWORD 'x'"])


def hostile(name: str, what: str, steps: list[Any]) -> dict[str, Any]:
    return {"id": name, "kind": "hostile", "attack": what, "sql": steps}


def records() -> list[dict[str, Any]]:
    """Two benign records first (a clean start in every slot), then each attack and its followers."""
    out: list[dict[str, Any]] = []
    n = 0
    for _ in range(2):
        n += 1
        out.append(benign(n))
    for name, what, steps, after in ATTACKS:
        out.append(hostile(name, what, steps))
        for _ in range(after):
            n += 1
            out.append(benign(n))
    return out


def main() -> None:
    path = HERE / "records.jsonl"
    recs = records()
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    print(f"{path}: {sum(r['kind'] == 'benign' for r in recs)} benign, {len(ATTACKS)} hostile")


if __name__ == "__main__":
    main()
