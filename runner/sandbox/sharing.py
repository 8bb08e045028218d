"""Shared databases (`database.shared_databases`): one database every slot of a sandbox reads and appends
to, that no slot may change for the others. tenancy.py's Steward hands each over at boot (`hand_over`);
docs/security.md says what a slot can and cannot do there."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql


def shared_owner(base: str) -> str:
    return f"{base}__shared"  # owns the shared databases and everything in them


def sharing_role(base: str) -> str:
    return f"{base}__sharing"  # what every slot may do in a shared database


# In a shared database, what a slot creates is everybody's at once: an event trigger (the runner's, as a
# superuser) gives each new table, view or sequence to the shared owner and grants the slots what they may
# do with the others' (read, append), so the slot that made it can no more drop or alter it than another.
# Its privileges are those and no more: whatever it was born with is revoked first. A view checks the
# tables under it as its owner, the shared owner, who may do anything to them; a slot's default privileges
# (ALTER DEFAULT PRIVILEGES ... TO PUBLIC, which a slot may set for itself) went with the view to its new
# owner, and every slot could then delete and lock the others' rows through it (an independent probe did:
# 19 of 20 neighbours' outcomes changed). A slot may not set default privileges there either, and its views
# are security_invoker (a second probe took FOR UPDATE row locks on every slot's rows through one).
# REFERENCES stays (the built-in CRM's telemetry makes its tables, one referencing the other, at start), and
# with it what docs/security.md names as remaining: a foreign key made in a transaction the record keeps
# open holds SHARE ROW EXCLUSIVE on the table it references, against every INSERT, until the record ends.
# Functions, operators, types and the like a slot may not create there: one in `public` could capture a
# call another slot's SQL makes (the search-path attack PostgreSQL 15 closed for `public` by default).
# Nor large objects (their creating functions' EXECUTE revoked): one would outlive the record,
# readable and writable by later ones.
# A slot appends, but never chooses a key its table's sequence or identity will hand out: INSERT is granted
# on every column but those (column-level grants). Granted on the whole table, one record's rows with
# explicit ids ahead of the sequence (INSERT ... SELECT g FROM generate_series(nextval(s) + 1, ...): an agent
# "fixing" a failing insert does it without malice) made every later default-keyed append of every slot of
# the worker fail on a duplicate key until the sandbox went. GENERATED ALWAYS would not hold it (OVERRIDING
# SYSTEM VALUE is accepted from whoever may insert the column); a column grant does. Nor may a slot move a
# sequence (setval needs UPDATE, never granted).
SHARED_DDL = """
CREATE SCHEMA pgsr_shared;
REVOKE ALL ON SCHEMA pgsr_shared FROM PUBLIC;
CREATE FUNCTION pgsr_shared.grant_append(rel regclass) RETURNS void LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog AS $$
DECLARE cols text;
BEGIN
  EXECUTE format('GRANT SELECT, REFERENCES ON TABLE %s TO {sharing}', rel);
  SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO cols
    FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
   WHERE a.attrelid = rel AND a.attnum > 0 AND NOT a.attisdropped
     AND a.attidentity = '' AND a.attgenerated = ''
     AND coalesce(pg_get_expr(d.adbin, d.adrelid), '') NOT LIKE '%nextval(%';
  IF cols IS NOT NULL THEN
    EXECUTE format('GRANT INSERT (%s) ON TABLE %s TO {sharing}', cols, rel);
  END IF;
END $$;
REVOKE ALL ON FUNCTION pgsr_shared.grant_append(regclass) FROM PUBLIC;
CREATE FUNCTION pgsr_shared.before_ddl() RETURNS event_trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog AS $$
BEGIN
  IF (tg_tag = 'ALTER DEFAULT PRIVILEGES'
      OR tg_tag LIKE 'CREATE %'
         AND tg_tag NOT IN ('CREATE TABLE', 'CREATE TABLE AS', 'SELECT INTO', 'CREATE SEQUENCE',
                            'CREATE INDEX', 'CREATE VIEW'))
     AND pg_has_role(session_user, {sharing_name}, 'MEMBER')
     AND NOT (SELECT rolsuper FROM pg_roles WHERE rolname = session_user) THEN
    RAISE EXCEPTION 'in a shared database a slot creates tables, views, sequences and indexes only, not %',
      tg_tag USING ERRCODE = 'insufficient_privilege';
  END IF;
END $$;
CREATE FUNCTION pgsr_shared.after_ddl() RETURNS event_trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog AS $$
DECLARE obj record; kind text; grantee text;
BEGIN
  IF NOT pg_has_role(session_user, {sharing_name}, 'MEMBER')
     OR (SELECT rolsuper FROM pg_roles WHERE rolname = session_user) THEN
    RETURN;
  END IF;
  FOR obj IN SELECT * FROM pg_event_trigger_ddl_commands() WHERE command_tag LIKE 'CREATE %' LOOP
    CONTINUE WHEN obj.object_type NOT IN ('table', 'view', 'sequence');
    kind := CASE obj.object_type WHEN 'sequence' THEN 'SEQUENCE' ELSE 'TABLE' END;
    BEGIN  -- a serial column's sequence goes with its table
      EXECUTE format('ALTER %s %s OWNER TO {owner}', kind, obj.object_identity);
    EXCEPTION WHEN feature_not_supported OR object_not_in_prerequisite_state THEN NULL;
    END;
    IF obj.object_type = 'view' THEN  -- its readers' rights, not its owner's, reach the tables under it
      EXECUTE format('ALTER VIEW %s SET (security_invoker = true)', obj.object_identity);
    END IF;
    -- what it was born with beyond its owner's own (a slot's default privileges): revoked
    FOR grantee IN SELECT DISTINCT
                     CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END
                   FROM pg_class c, aclexplode(c.relacl) a
                   WHERE c.oid = obj.objid AND a.grantee <> c.relowner LOOP
      EXECUTE format('REVOKE ALL ON %s %s FROM %s CASCADE', kind, obj.object_identity, grantee);
    END LOOP;
    IF kind = 'SEQUENCE' THEN
      EXECUTE format('GRANT USAGE, SELECT ON SEQUENCE %s TO {sharing}', obj.object_identity);
    ELSE
      PERFORM pgsr_shared.grant_append(obj.objid::regclass);
    END IF;
  END LOOP;
END $$;
CREATE EVENT TRIGGER pgsr_shared_before ON ddl_command_start EXECUTE FUNCTION pgsr_shared.before_ddl();
CREATE EVENT TRIGGER pgsr_shared_after ON ddl_command_end EXECUTE FUNCTION pgsr_shared.after_ddl();
"""
# No large objects where every slot connects: one outlives its record and tidy, readable and writable by later
# records of any slot (found in the shared databases, then in `postgres` and `template1`).
NO_LARGE_OBJECTS = """
REVOKE EXECUTE ON FUNCTION pg_catalog.lo_creat(integer), pg_catalog.lo_create(oid),
  pg_catalog.lo_from_bytea(oid, bytea), pg_catalog.lo_import(text), pg_catalog.lo_import(text, oid)
  FROM PUBLIC;
"""


def hand_over(conn: psycopg.Connection[Any], base: str) -> None:
    """Inside one shared database (`conn`, the runner's session in it): every schema and what is in it to
    the shared owner, the slots granted USAGE and CREATE, SELECT and REFERENCES on its tables and INSERT on
    their columns but the keys a sequence hands out, and the event triggers that do the same for whatever a
    slot creates later (SHARED_DDL)."""
    owner, sharing = sql.Identifier(shared_owner(base)), sql.Identifier(sharing_role(base))
    schemas = [
        r[0]
        for r in conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' "
            "AND nspname <> 'information_schema'"
        ).fetchall()
    ]
    for s in schemas:
        schema = sql.Identifier(s)
        conn.execute(sql.SQL("ALTER SCHEMA {} OWNER TO {}").format(schema, owner))
        conn.execute(sql.SQL("GRANT USAGE, CREATE ON SCHEMA {} TO {}").format(schema, sharing))
        conn.execute(
            sql.SQL("GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {} TO {}").format(schema, sharing)
        )
    conn.execute(
        sql.SQL(SHARED_DDL).format(owner=owner, sharing=sharing, sharing_name=sql.Literal(sharing_role(base)))
    )
    conn.execute(NO_LARGE_OBJECTS)
    conn.execute(
        "SELECT pgsr_shared.grant_append(c.oid) "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND n.nspname NOT LIKE 'pg\\_%' "
        "AND n.nspname NOT IN ('information_schema', 'pgsr_shared')"
    )
