"""Atlas telemetry from a worker's slots: one connection to the sandbox's telemetry database for all of
them, writes one at a time."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from runner.harness.crm import db
from runner.harness.crm.harness import _Shared
from runner.sandbox.base import Sandbox

SCORES = {"success": True, "state_match": 1.0, "tool_selection": 1.0, "args_normalized": 1.0}


def _steps(n: int) -> list[dict[str, Any]]:
    return [{"turn": 0, "step": k, "verdict": "approve", "guidance": None, "proposed": {"k": k},
             "executed": {"k": k}} for k in range(n)]


def test_slots_share_one_telemetry_connection_and_their_sessions_do_not_interleave(local_sandbox: Sandbox) -> None:
    shared = object.__new__(_Shared)  # only its telemetry part: no SDK clients, no cache
    shared.telemetry_sink, shared.telemetry_lock, shared.atlas = None, threading.Lock(), {}
    dsn = local_sandbox.dsn("atlas")
    writers = [shared.telemetry_writer(dsn) for _ in range(8)]
    assert len({id(w.atlas) for w in writers}) == 1  # one server session for all the slots
    with ThreadPoolExecutor(8) as pool:
        exported = list(pool.map(lambda i: writers[i % 8].record(
            run="atlas", conversation_id=f"c{i}", student="s", teacher="t", scores=SCORES, steps=_steps(i % 5 + 1)),
            range(40)))
    assert [(e["conversation_id"], e["steps"], len(e["step_log"])) for e in exported if e] == \
        [(f"c{i}", i % 5 + 1, i % 5 + 1) for i in range(40)]  # each slot reads back its own session
    with db.connect(dsn) as check:
        rows = check.execute("SELECT s.conversation_id, s.steps, count(t.*) FROM atlas_sessions s "
                             "JOIN atlas_steps t ON t.session_id = s.id GROUP BY s.id").fetchall()
    assert len(rows) == 40 and all(steps == n for _, steps, n in rows)
    conn = writers[0].atlas
    assert conn is not None
    for w in writers[:-1]:
        shared.release(w)
    assert not conn.closed  # a slot still uses it
    shared.release(writers[-1])
    assert conn.closed and shared.atlas == {}
    again = shared.telemetry_writer(dsn)  # a slot attaching later gets a new one
    assert again.atlas is not None and again.atlas is not conn and not again.atlas.closed
    shared.release(again)
