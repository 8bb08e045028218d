"""Harnesses that misbehave on purpose, one record id each (tests of the python kind)."""

from __future__ import annotations

import os
import time
from typing import Any

import psycopg


def play(record: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Writes to its private database through DB_* (as a user's harness does), then misbehaves if asked."""
    with psycopg.connect(host=os.environ["DB_HOST"], port=os.environ["DB_PORT"], user=os.environ["DB_USER"],
                         password=os.environ["DB_PASSWORD"], dbname=os.environ["DB_NAME"]) as conn:
        conn.execute("INSERT INTO visits (record_id, run) VALUES (%s, %s)", [record["id"], ctx.run])
        n = conn.execute("SELECT count(*) FROM visits").fetchone()
    what = record.get("do")
    if what == "raise":
        raise ValueError(f"bad record {record['id']}")
    if what == "exit":
        os._exit(1)
    if what == "hang":
        time.sleep(600)
    if what == "not-a-dict":
        return "done"  # type: ignore[return-value]
    return {"id": record["id"], "ok": True, "visits": n[0] if n else None, "greeting": ctx.params.get("greeting"),
            "env": os.environ.get("TOY_SETTING"), "scratch": str(ctx.scratch), "worker": ctx.worker}
