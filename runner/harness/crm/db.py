"""Talking to one sandbox's CRM database: connect, reset to a seed, digest the state."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from runner.harness.crm.dataset import SEED_TABLES

SEED_TIMESTAMP = "2025-01-01T00:00:00+00:00"
# jsonb_populate_recordset fills absent keys with NULL, not the column default: fill them here.
_DEFAULTS: dict[str, dict[str, Any]] = {
    "accounts": {"type": "prospect"},
    "opportunities": {"stage": "prospecting", "probability": 10},
    "quotes": {"status": "draft", "total": 0},
    "quote_lines": {"discount_pct": 0},
    "cases": {"priority": "medium", "status": "new"},
    "activities": {"done": False},
}


def connect(dsn: str) -> psycopg.Connection[Any]:
    """Autocommit: each tool call opens its own transaction (see crm.tools.execute)."""
    return psycopg.connect(dsn, autocommit=True, connect_timeout=10)


def full_seed(seed: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for table in SEED_TABLES:
        rows = seed.get(table)
        if rows:
            base = {**_DEFAULTS.get(table, {}), "created_at": SEED_TIMESTAMP}
            out[table] = [{**base, **r} for r in rows]
    return out


def reset(conn: psycopg.Connection[Any], seed: dict[str, list[dict[str, Any]]]) -> None:
    """Back to exactly this seed, identities restarted: one statement, one round trip."""
    conn.execute("SELECT sandbox_reset(%s)", [Jsonb(full_seed(seed))])


def digest(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    row = conn.execute("SELECT sandbox_digest()").fetchone()
    assert row is not None
    return dict(row[0])
