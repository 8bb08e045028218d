"""One conversation in one sandbox: reset, run the agent, digest, score, build the result record."""

from __future__ import annotations

import datetime as dt
import hashlib
import time
from pathlib import Path
from typing import Any, Protocol

import psycopg

from runner.config import RunSpec
from runner.harness.crm import db
from runner.harness.crm.agents import telemetry
from runner.harness.crm.agents.atlas import run_atlas
from runner.harness.crm.agents.base import Episode, EventSink, no_events
from runner.harness.crm.agents.baseline import run_baseline
from runner.harness.crm.anatomy import anatomy
from runner.harness.crm.dataset import Conversation
from runner.harness.crm.scoring import CallRecord, expected_state, made_gold_writes, score
from runner.models.client import ModelClient
from runner.models.usage import Counts
from runner.results.result import Usage

SCHEMA_PATH = Path(__file__).resolve().parent / "schema.sql"
_SCHEMA_DIGEST = hashlib.sha256(SCHEMA_PATH.read_bytes()).hexdigest()


class StateStore(Protocol):
    """Where expected states outlive a worker: the response cache (runner/cache.py)."""

    def get_state(self, key: str) -> dict[str, Any] | None: ...

    def put_state(self, key: str, value: dict[str, Any]) -> None: ...


class Expectations:
    """Expected final states, once per conversation and schema: kept in memory and, when a response
    cache is in use, in it (so other workers and reruns skip the work).

    Reached after the agent has run, without a replay when the agent's writes were the gold's: the
    same writes with the same arguments and outcomes, in the same order, from the same seed leave
    the state the gold replay would (the replay rests on that determinism too). Otherwise the gold
    calls are replayed inside a transaction that is rolled back, so the agent's state stays for the
    failure's anatomy."""

    def __init__(self, store: StateStore | None = None) -> None:
        self._memo: dict[str, dict[str, Any]] = {}
        self._store = store

    def known(self, conv: Conversation) -> dict[str, Any] | None:
        """Without touching the database: from the record itself, memory or the shared store."""
        if conv.expected_state is not None:
            return conv.expected_state
        state = self._memo.get(conv.id)  # by id in memory (one dataset per worker) ...
        if state is None and self._store is not None:  # ... by content hash in the shared store
            state = self._store.get_state(self._key(conv))
            if state is not None:
                self._memo[conv.id] = state
        return state

    def after(
        self,
        conn: psycopg.Connection[Any],
        conv: Conversation,
        calls_per_turn: list[list[CallRecord]],
        final: dict[str, Any],
    ) -> dict[str, Any]:
        """The expected state once the agent has run in `conn` and left `final` (its digest)."""
        if made_gold_writes(conv, calls_per_turn):
            state = final
        else:
            with conn.transaction(force_rollback=True):
                state = expected_state(conn, conv)
        self._memo[conv.id] = state
        if self._store is not None:
            self._store.put_state(self._key(conv), state)
        return state

    @staticmethod
    def _key(conv: Conversation) -> str:
        return hashlib.sha256((_SCHEMA_DIGEST + conv.model_dump_json()).encode()).hexdigest()


def stats_delta(clients: list[ModelClient], before: list[Counts]) -> Counts:
    total = Counts()
    for c, b in zip(clients, before, strict=True):
        total.add(c.stats.since(b))
    return total


def _telemetry(
    conv: Conversation, spec: RunSpec, ep: Episode, scores: dict[str, Any], writer: telemetry.Writer | None
) -> Any:
    """Atlas's steps and scores into the sandbox's telemetry database (and the long-lived copy, which
    outlives the disposable sandbox); what the record's output carries of it."""
    if spec.agent != "atlas" or writer is None or spec.teacher is None:
        return None
    return writer.record(
        run=spec.name,
        conversation_id=conv.id,
        student=spec.model or "",
        teacher=spec.teacher.model,
        scores=scores,
        steps=ep.atlas_steps,
    )


def run_episode(
    conv: Conversation,
    spec: RunSpec,
    *,
    crm: psycopg.Connection[Any],
    telemetry_out: telemetry.Writer | None,
    agent: ModelClient,
    teacher: ModelClient | None,
    expectations: Expectations,
    emit: EventSink = no_events,
) -> tuple[dict[str, Any], Usage]:
    """Run and score one conversation: its output record and the model usage it caused.

    Raises only for errors that are not the agent's (sandbox, provider)."""
    started = dt.datetime.now(dt.UTC)
    t0 = time.monotonic()
    clients = [agent] + ([teacher] if teacher else [])
    before = [c.stats.snapshot() for c in clients]
    t_reset = time.monotonic()
    db.reset(crm, conv.seed)
    reset_ms = (time.monotonic() - t_reset) * 1000
    t_agent = time.monotonic()
    if spec.agent == "atlas":
        assert teacher is not None
        ep: Episode = run_atlas(conv, crm, agent, teacher, spec, emit)
    else:
        ep = run_baseline(conv, crm, agent, spec, emit)
    agent_s = time.monotonic() - t_agent
    final = db.digest(crm)
    t_expected = time.monotonic()
    expected = expectations.known(conv)
    if expected is None:
        expected = expectations.after(crm, conv, ep.calls_per_turn, final)
    expected_ms = (time.monotonic() - t_expected) * 1000
    scores = score(conv, ep.calls_per_turn, final, expected, completed=not ep.step_limit_hit).to_dict()
    why = None if scores["success"] else anatomy(crm, conv, ep.calls_per_turn, scores["state_match"])
    atlas_export = _telemetry(conv, spec, ep, scores, telemetry_out)
    stats = stats_delta(clients, before)
    emit("scores", scores)
    output = {
        "agent": spec.agent,
        "provider": spec.provider,
        "model": spec.model,
        "teacher_model": spec.teacher.model if spec.teacher else None,
        "difficulty": conv.difficulty,
        "tags": conv.tags,
        "turns": len(conv.turns),
        "success": scores["success"],
        "scores": scores,
        "step_limit_hit": ep.step_limit_hit,
        "tool_calls": ep.tool_calls,
        "transcript": ep.transcript,
        "model_calls": ep.model_calls,
        "anatomy": why,  # failures only: expected vs made calls per turn, row-level state diff
        "steps": ep.atlas_steps or None,  # Atlas: per step the student's proposal, the verdict, what ran
        "atlas": atlas_export,
        "started_at": started.isoformat(timespec="milliseconds"),
        "timings": {
            "reset_ms": round(reset_ms, 3),
            "expected_state_ms": round(expected_ms, 3),
            "agent_seconds": round(agent_s, 4),
            "wall_seconds": round(time.monotonic() - t0, 4),
            "tool_calls": ep.tool_timings,
        },
    }
    return output, usage_of(stats, ep.model_calls)


def usage_of(stats: Counts, model_calls: list[dict[str, Any]]) -> Usage:
    return stats.usage(latency_seconds=sum(m["latency_seconds"] for m in model_calls))
