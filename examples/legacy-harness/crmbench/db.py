"""The connection, from DB_* environment variables (the team's .env sets them for a developer's laptop)."""

from __future__ import annotations

import os
from typing import Any

import psycopg


def connect() -> psycopg.Connection[Any]:
    return psycopg.connect(host=os.environ.get("DB_HOST", "localhost"), port=int(os.environ.get("DB_PORT", "5432")),
                           user=os.environ.get("DB_USER", "postgres"), password=os.environ.get("DB_PASSWORD", ""),
                           dbname=os.environ.get("DB_NAME", "crmbench"), connect_timeout=10)


TABLES = ("accounts", "contacts", "deals", "notes")


def reset_and_seed(conn: psycopg.Connection[Any], seed: dict[str, list[dict[str, Any]]]) -> None:
    """The shared-database reset: empty every table, identities back to 1, then the conversation's rows."""
    conn.execute("TRUNCATE accounts, contacts, deals, notes RESTART IDENTITY CASCADE")
    for table in TABLES:
        for row in seed.get(table, []):
            cols = list(row)
            conn.execute(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join(['%s'] * len(cols))})",
                         [row[c] for c in cols])
        if seed.get(table):
            conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")


def state(conn: psycopg.Connection[Any]) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for table, cols in (("contacts", "id, account_id, name, email"), ("deals", "id, account_id, title, stage::text, "
                                                                          "amount::float"),
                        ("notes", "id, deal_id, body")):
        cur = conn.execute(f"SELECT {cols} FROM {table} ORDER BY id")
        names = [d.name for d in cur.description or []]
        out[table] = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    return out
