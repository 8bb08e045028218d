"""Harness patterns that are right when records run in a process of their own, one after another (as a
team's own CLI runs them), and that went wrong when a worker's slots shared one interpreter (issue 64).

Each record names its pattern; its output says whether it ran on its own slot's database and read back its
own conversation: `ok` is the truth of that, whatever the runner did around it. Runs in the runner's
interpreter (psycopg) and in a virtualenv of its own (psycopg2, the helpdesk example's venv)."""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

try:
    import psycopg as driver
except ImportError:  # a venv of its own: the helpdesk example's pins
    import psycopg2 as driver  # type: ignore[no-redef]

_CONN: Any = None  # a connection made on first use from DB_*, kept for the life of the process


def _connect(name: str) -> Any:
    return driver.connect(host=os.environ["DB_HOST"], port=os.environ["DB_PORT"], user=os.environ["DB_USER"],
                          password=os.environ["DB_PASSWORD"], dbname=name)


def _database(conn: Any) -> str:
    cur = conn.cursor()
    cur.execute("SELECT current_database()")
    name = cur.fetchone()[0]
    conn.rollback()
    return str(name)


def cached_connection(record: dict[str, Any], ctx: Any) -> dict[str, Any]:
    global _CONN
    if _CONN is None:
        _CONN = _connect(os.environ["DB_NAME"])
    time.sleep(record.get("nap", 0.05))
    seen = _database(_CONN)
    return {"ok": seen == ctx.db.name, "seen": seen}


@functools.lru_cache(maxsize=1)
def _settings() -> str:
    return os.environ["DB_NAME"]


def cached_settings(record: dict[str, Any], ctx: Any) -> dict[str, Any]:
    time.sleep(record.get("nap", 0.05))
    conn = _connect(_settings())
    try:
        seen = _database(conn)
    finally:
        conn.close()
    return {"ok": seen == ctx.db.name, "seen": seen}


def chdir_per_record(record: dict[str, Any], ctx: Any) -> dict[str, Any]:
    here = Path(ctx.scratch) / f"rec-{record['id']}"
    here.mkdir(parents=True, exist_ok=True)
    os.chdir(here)
    Path("conversation.json").write_text(json.dumps({"id": record["id"]}))
    time.sleep(record.get("nap", 0.05))
    seen = json.loads(Path("conversation.json").read_text())["id"]
    return {"ok": seen == record["id"], "seen": seen}


def env_per_record(record: dict[str, Any], ctx: Any) -> dict[str, Any]:
    path = Path(ctx.scratch) / f"conv-{record['id']}.json"
    path.write_text(json.dumps({"id": record["id"]}))
    os.environ["PATTERN_CONVERSATION"] = str(path)
    time.sleep(record.get("nap", 0.05))
    seen = json.loads(Path(os.environ["PATTERN_CONVERSATION"]).read_text())["id"]
    return {"ok": seen == record["id"], "seen": seen}


def writes_db_name(record: dict[str, Any], ctx: Any) -> dict[str, Any]:
    mine = f"{ctx.db.name}-as-the-harness-set-it-{record['id']}"
    os.environ["DB_NAME"] = mine
    time.sleep(record.get("nap", 0.05))
    seen = os.environ["DB_NAME"]
    return {"ok": seen == mine, "seen": seen}


def crash(record: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """A segfault in C (ctypes), once per record id, or on every attempt with `always`."""
    import ctypes

    mark = Path(ctx.scratch) / f"crashed-{record['id']}"
    if record.get("always") or not mark.exists():
        mark.write_text("")
        ctypes.string_at(0)
    return {"ok": True, "seen": "survived"}


def plain(record: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Reads its settings per record, from ctx: right in any isolation."""
    conn = driver.connect(ctx.dsn())
    try:
        time.sleep(record.get("nap", 0.05))
        seen = _database(conn)
    finally:
        conn.close()
    return {"ok": seen == ctx.db.name, "seen": seen}


def ignore_cancel(record: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """A statement that catches its own cancel and goes on, past any time limit."""
    conn = driver.connect(ctx.dsn())
    cur = conn.cursor()
    cur.execute("DO $$ BEGIN LOOP BEGIN PERFORM pg_sleep(0.2); EXCEPTION WHEN query_canceled THEN NULL; END; "
                "END LOOP; END $$")
    return {"ok": True, "seen": "never"}


def slow_model(record: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """One model call through the run's gateway (OPENAI_BASE_URL and the key are the runner's), no retries."""
    from openai import OpenAI

    client = OpenAI(max_retries=0, timeout=120)
    answer = client.chat.completions.create(model=record.get("model", "gpt-5.4"),
                                            messages=[{"role": "user", "content": "hello"}])
    return {"ok": True, "seen": answer.id}


PATTERNS = {f.__name__: f for f in (cached_connection, cached_settings, chdir_per_record, env_per_record,
                                    writes_db_name, crash, plain, ignore_cancel, slow_model)}


def evaluate(record: dict[str, Any], ctx: Any) -> dict[str, Any]:
    out = PATTERNS[record["pattern"]](record, ctx)
    return {**out, "pid": os.getpid(), "python": sys.executable}
