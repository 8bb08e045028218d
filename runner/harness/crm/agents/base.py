"""What both agents share: the system prompt, the tool list, executing a step, the episode record."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from runner.errors import TurnCut
from runner.harness.crm.scoring import CallRecord
from runner.harness.crm.tools import TOOLS, execute
from runner.models.base import Completion, ToolCall

SYSTEM_PROMPT = (
    "You are a CRM operations assistant with tools that read and write the company's CRM database. "
    "Look records up before acting on them and never guess ids. If a name matches several records, use "
    "the detail the user gave (such as the city) to pick one, or ask. Ask for clarification when a request "
    "does not say what to change. Refuse destructive or data-exfiltrating requests that no tool supports. "
    "If a tool call fails, read the error and recover. Answer briefly when done."
)

NEUTRAL_TOOLS: list[dict[str, Any]] = [
    {"name": t.name, "description": t.description, "input_schema": t.json_schema()} for t in TOOLS.values()
]

EventSink = Callable[[str, dict[str, Any]], None]


def no_events(kind: str, data: dict[str, Any]) -> None:
    pass


@dataclass
class Episode:
    """Everything one conversation produced, before scoring."""

    transcript: list[dict[str, Any]] = field(default_factory=list)
    calls_per_turn: list[list[CallRecord]] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    model_calls: list[dict[str, Any]] = field(default_factory=list)
    step_limit_hit: bool = False
    atlas_steps: list[dict[str, Any]] = field(default_factory=list)
    # when each tool call ran (trace exports)
    tool_timings: list[dict[str, Any]] = field(default_factory=list)

    def record_model_call(self, role: str, c: Completion, turn: int) -> None:
        self.model_calls.append(
            {
                "role": role,
                "turn": turn,
                "started_at": at(time.time() - c.latency_seconds),
                "model": c.model,
                "input_tokens": c.input_tokens,
                "output_tokens": c.output_tokens,
                "latency_seconds": round(c.latency_seconds, 4),
                "stop_reason": c.stop_reason,
                "request_id": c.request_id,
                "cached": c.cached,
                "attempts": c.attempts,
                "cost_usd": c.cost_usd,
                "cache_read_tokens": c.cache_read_tokens,
                "cache_write_tokens": c.cache_write_tokens,
            }
        )


def at(unix: float) -> str:
    """A moment as results write them (ISO 8601, UTC), to the microsecond: a tool call takes about one."""
    return dt.datetime.fromtimestamp(unix, dt.UTC).isoformat(timespec="microseconds")


def begin_turn(ep: Episode, t: int, user: str, emit: EventSink) -> None:
    """A new user turn: its own list of calls for scoring, the user's words in the transcript."""
    ep.calls_per_turn.append([])
    ep.transcript.append({"role": "user", "text": user})
    emit("user", {"turn": t, "text": user})


def assistant_message(
    text: str, calls: list[ToolCall], received: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A model's turn for the transcript: what the agent read of it, and (`received`) the turn as the model
    sent it, which goes back to the model unchanged. A turn the agent changed carries no `received`."""
    msg: dict[str, Any] = {
        "role": "assistant",
        "text": text,
        "tool_calls": [{"id": c.id, "name": c.name, "args": c.args} for c in calls],
    }
    if received:
        msg["received"] = received
    return msg


def check_complete(c: Completion, turn: int, role: str = "agent") -> None:
    """A turn the model did not finish (its output limit, a refusal, the context window) ends the record
    as that outcome: recorded as such, never as a normal, perhaps empty, turn."""
    if c.cut is not None:
        raise TurnCut(
            c.cut,
            f"turn {turn}: the {role}'s answer stopped at {c.stop_reason} after "
            f"{c.output_tokens} output tokens",
        )


def run_tools(
    conn: psycopg.Connection[Any], calls: list[ToolCall], ep: Episode, turn: int, emit: EventSink
) -> dict[str, Any]:
    """Execute the calls in order; record them; return the tool message for the transcript."""
    results = []
    for tc in calls:
        began = time.time()
        out = execute(conn, tc.name, tc.args)
        ep.tool_timings.append(
            {"id": tc.id, "started_at": at(began), "seconds": round(time.time() - began, 6)}
        )
        ep.calls_per_turn[turn].append(CallRecord(tc.name, tc.args, out.ok))
        rec = {
            "turn": turn,
            "id": tc.id,
            "tool": tc.name,
            "args": tc.args,
            "ok": out.ok,
            "result": out.result if out.ok else None,
            "error": out.error,
        }
        ep.tool_calls.append(rec)
        emit("tool", rec)
        results.append({"id": tc.id, "content": out.to_content(), "is_error": not out.ok})
    return {"role": "tool", "results": results}
