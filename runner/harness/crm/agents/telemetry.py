"""Atlas telemetry: sessions and steps in the sandbox's `atlas` database (and optionally a long-lived one).

The sandbox is disposable, so each result carries its telemetry exported back from the database:
what a reader of the result sees is what the database held.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

DDL = """
CREATE TABLE IF NOT EXISTS atlas_sessions (
    id bigserial PRIMARY KEY, run text NOT NULL, conversation_id text NOT NULL,
    student_model text NOT NULL, teacher_model text NOT NULL, reward double precision NOT NULL,
    success boolean NOT NULL, interventions integer NOT NULL, steps integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS atlas_steps (
    session_id bigint NOT NULL REFERENCES atlas_sessions (id) ON DELETE CASCADE, turn integer NOT NULL,
    step integer NOT NULL, verdict text NOT NULL, guidance text, proposed jsonb NOT NULL,
    executed jsonb NOT NULL, PRIMARY KEY (session_id, turn, step));
"""


def reward_of(scores: dict[str, Any]) -> float:
    """Outcome reward: the final state counts most; selection and arguments give partial credit."""
    return round(
        0.5 * float(scores["state_match"]) + 0.3 * scores["tool_selection"] + 0.2 * scores["args_normalized"],
        4,
    )


def ensure_schema(conn: psycopg.Connection[Any]) -> None:
    # Workers share a long-lived telemetry database: concurrent CREATE TABLE IF NOT EXISTS races
    # in PostgreSQL's catalogue, so take a lock for it.
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(7204511)")
        conn.execute(DDL)


def record(
    conn: psycopg.Connection[Any],
    *,
    run: str,
    conversation_id: str,
    student: str,
    teacher: str,
    scores: dict[str, Any],
    steps: list[dict[str, Any]],
) -> dict[str, Any]:
    """Write one session with its steps; return it as read back from the database."""
    interventions = sum(1 for s in steps if s["verdict"] == "revise")
    with conn.transaction():
        row = conn.execute(
            "INSERT INTO atlas_sessions (run, conversation_id, student_model, teacher_model, reward, success,"
            " interventions, steps) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
            (
                run,
                conversation_id,
                student,
                teacher,
                reward_of(scores),
                scores["success"],
                interventions,
                len(steps),
            ),
        ).fetchone()
        assert row is not None
        sid = row[0]
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO atlas_steps VALUES (%s, %s, %s, %s, %s, %s, %s)",
                [
                    (
                        sid,
                        s["turn"],
                        s["step"],
                        s["verdict"],
                        s.get("guidance"),
                        Jsonb(s["proposed"]),
                        Jsonb(s["executed"]),
                    )
                    for s in steps
                ],
            )
    return export(conn, sid)


def export(conn: psycopg.Connection[Any], session_id: int) -> dict[str, Any]:
    s = conn.execute(
        "SELECT run, conversation_id, student_model, teacher_model, reward, success, interventions,"
        " steps FROM atlas_sessions WHERE id = %s",
        (session_id,),
    ).fetchone()
    assert s is not None
    steps = conn.execute(
        "SELECT turn, step, verdict, guidance, proposed, executed FROM atlas_steps "
        "WHERE session_id = %s ORDER BY turn, step",
        (session_id,),
    ).fetchall()
    keys = (
        "run",
        "conversation_id",
        "student_model",
        "teacher_model",
        "reward",
        "success",
        "interventions",
        "steps",
    )
    return {
        **dict(zip(keys, s, strict=True)),
        "step_log": [
            dict(zip(("turn", "step", "verdict", "guidance", "proposed", "executed"), r, strict=True))
            for r in steps
        ],
    }


@dataclass
class Writer:
    """Where a worker's slots write Atlas's sessions: the sandbox's telemetry database and the long-lived
    sink, one connection each for all the worker's slots (a connection a slot was ~2 MiB of server memory
    for every conversation in flight), one write at a time: two threads' transactions on one connection
    would interleave."""

    atlas: psycopg.Connection[Any] | None
    sink: psycopg.Connection[Any] | None
    lock: threading.Lock
    dsn: str = ""  # the sandbox's telemetry database: what its shared connection is kept under

    def record(self, **session: Any) -> dict[str, Any] | None:
        """Write one session to both; what the sandbox's database holds of it (None without one)."""
        exported = None
        with self.lock:
            for conn in (self.atlas, self.sink):
                if conn is not None:
                    done = record(conn, **session)
                    exported = done if conn is self.atlas else exported
        return exported
