"""A harness with the traits of real ones that matter for speed: a heavy library imported at module level
(heavystack: seconds of CPU, threads started by the import), a database connection per conversation, and a
model call per turn (a stand-in: HEAVY_LATENCY_MS of waiting, default 100), in its own virtualenv.

    evaluate(record) -> {"id", "passed", "turns", "notes"}    one conversation: per turn, a "model call" and SQL
"""

from __future__ import annotations

import os
import time
from typing import Any

import heavystack

try:  # the team's virtualenv has psycopg2; the runner's has psycopg 3: either works
    import psycopg2 as pg
except ImportError:  # pragma: no cover - the runner's interpreter
    import psycopg as pg  # type: ignore[no-redef]

LATENCY = float(os.environ.get("HEAVY_LATENCY_MS", "100")) / 1000


def connect() -> Any:
    return pg.connect(host=os.environ["DB_HOST"], port=os.environ["DB_PORT"], user=os.environ["DB_USER"],
                      password=os.environ["DB_PASSWORD"], dbname=os.environ["DB_NAME"])


def evaluate(record: dict[str, Any]) -> dict[str, Any]:
    conn = connect()
    try:
        cur = conn.cursor()
        cur.execute("DELETE FROM notes")  # the team's own reset, per conversation
        for n, text in enumerate(record["turns"]):
            time.sleep(LATENCY)  # the model's answer to this turn
            cur.execute("INSERT INTO notes (ticket, turn, text, weight) VALUES (%s, %s, %s, %s)",
                        (record["id"], n, text, heavystack.lookup(text)))
        cur.execute("SELECT count(*) FROM notes WHERE ticket = %s", (record["id"],))
        notes = cur.fetchone()[0]
        conn.commit()
    finally:
        conn.close()
    return {"id": record["id"], "passed": notes == len(record["turns"]), "turns": len(record["turns"]),
            "notes": notes}
