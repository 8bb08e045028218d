"""Harnesses that misbehave on purpose, one record id each (tests of the python kind)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

import psycopg


def play(record: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Writes to its private database through DB_* (as a user's harness does), then misbehaves if asked."""
    with psycopg.connect(host=os.environ["DB_HOST"], port=os.environ["DB_PORT"], user=os.environ["DB_USER"],
                         password=os.environ["DB_PASSWORD"], dbname=os.environ["DB_NAME"]) as conn:
        conn.execute("INSERT INTO visits (record_id, run) VALUES (%s, %s)", [record["id"], ctx.run])
        conn.commit()
        if record.get("spawn"):  # a child of its own: it must end with the harness's process
            subprocess.Popen([sys.executable, "-c", f"import time; time.sleep(300)  # toy-spawn-{record['id']}"])
        time.sleep(record.get("nap", 0))  # long enough for records in other slots to write meanwhile
        n = conn.execute("SELECT count(*) FROM visits").fetchone()
    journal = None
    if "journal" in ctx.databases:  # a database every slot shares: the records of all slots meet there
        with psycopg.connect(ctx.dsn("journal")) as jc:
            # two sessions' CREATE TABLE IF NOT EXISTS at once: one fails on pg_type's unique index
            jc.execute("SELECT pg_advisory_xact_lock(42)")
            jc.execute("CREATE TABLE IF NOT EXISTS seen (record_id text PRIMARY KEY)")
            jc.execute("INSERT INTO seen VALUES (%s) ON CONFLICT DO NOTHING", [record["id"]])
            jc.commit()
            journal = (ctx.databases["journal"].name, jc.execute("SELECT count(*) FROM seen").fetchone()[0])
    what = record.get("do")
    if what == "raise":
        raise ValueError(f"bad record {record['id']}")
    if what == "exit":
        os._exit(1)
    if what == "hang" and not os.environ.get("TOY_NO_HANG"):
        time.sleep(600)
    if what == "freeze":  # the whole process stops, heartbeat thread included (a swapped-out or frozen VM)
        os.kill(os.getpid(), signal.SIGSTOP)
    if what == "deaf":  # stuck where the time limit cannot reach (a C call that ignores signals)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(600)
    if what == "spin":  # busy past the time limit, in Python: a cut reaches it between two of its sleeps
        while True:
            time.sleep(0.05)
    if what == "kill":  # the whole interpreter, as kill -9 would
        os.kill(os.getpid(), signal.SIGKILL)
    if what == "not-a-dict":
        return "done"  # type: ignore[return-value]
    ok = ctx.run not in record.get("fail_in", [])  # an outcome of the "agent": a failure, not an error
    return {"id": record["id"], "ok": ok, "visits": n[0] if n else None, "greeting": ctx.params.get("greeting"),
            "env": os.environ.get("TOY_SETTING"), "scratch": str(ctx.scratch), "worker": ctx.worker,
            "db": os.environ["DB_NAME"], "ctx_db": ctx.db.name, "journal": journal, "pid": os.getpid(),
            "api_key": os.environ.get("OPENAI_API_KEY")}


def ask(record: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Calls Claude through the official SDK as a user's harness does: ANTHROPIC_BASE_URL (the runner's
    gateway) and the key from the environment; retries generous enough to outlast a gateway restart."""
    import anthropic

    client = anthropic.Anthropic(max_retries=6)
    reply = client.messages.create(model=ctx.params["model"], max_tokens=50,
                                   messages=[{"role": "user", "content": f"Say hello to {record['id']}"}])
    return {"id": record["id"], "ok": True, "stop": reply.stop_reason, "tokens": reply.usage.output_tokens}


def ask_times(record: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """A harness that calls a model as a user's does: the Anthropic SDK, through the run's gateway (its base URL
    and token from the environment), `record["asks"]` times with `record["text"]`."""
    import anthropic

    client = anthropic.Anthropic(max_retries=0)
    for _ in range(int(record.get("asks", 1))):
        client.messages.create(model="claude-sonnet-5-5", max_tokens=64,
                               messages=[{"role": "user", "content": record["text"]}])
    return {"ok": True}
