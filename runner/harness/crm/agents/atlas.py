"""The Atlas agent (student attempts, teacher reviews and intervenes, outcome and reward).

Every step the student proposes is shown to the teacher before it runs; the teacher approves it
or replaces it with a corrected step and guidance. Steps, interventions and the conversation's
reward are recorded; telemetry.py stores them in the sandbox's `atlas` database.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg

from runner.config import RunSpec
from runner.harness.crm.agents.base import (
    NEUTRAL_TOOLS,
    SYSTEM_PROMPT,
    Episode,
    EventSink,
    assistant_message,
    begin_turn,
    check_complete,
    no_events,
    run_tools,
)
from runner.harness.crm.dataset import Conversation
from runner.models.base import Completion, Request, ToolCall
from runner.models.client import ModelClient
from runner.models.sim.policy import PROPOSAL_MARKER

TEACHER_PROMPT = (
    "You are the teacher supervising a student CRM agent. You see the conversation and the step the "
    'student proposes. Reply with JSON only: {"verdict": "approve"} if the step is right, or '
    '{"verdict": "revise", "guidance": "...", "calls": [{"name": ..., "args": {...}}]} '
    '(or "text" instead of calls when the student should answer the user) if it is not.'
)


def _proposal(c: Completion) -> str:
    body = {"text": c.text, "calls": [{"name": x.name, "args": x.args} for x in c.tool_calls]}
    return f"{PROPOSAL_MARKER}\n{json.dumps(body, sort_keys=True)}"


def _verdict(review: Completion) -> dict[str, Any]:
    if review.tool_calls:  # a teacher that answers with tool calls is proposing those calls
        return {
            "verdict": "revise",
            "guidance": review.text or "use these calls",
            "calls": [{"name": c.name, "args": c.args} for c in review.tool_calls],
        }
    text = review.text.strip()
    start, end = text.find("{"), text.rfind("}")
    try:
        v = json.loads(text[start : end + 1]) if start >= 0 else {}
    except json.JSONDecodeError:
        v = {}
    return v if v.get("verdict") in ("approve", "revise") else {"verdict": "approve", "unparsed": text[:500]}


def run_atlas(
    conv: Conversation,
    conn: psycopg.Connection[Any],
    student: ModelClient,
    teacher: ModelClient,
    spec: RunSpec,
    emit: EventSink = no_events,
) -> Episode:
    assert spec.teacher is not None
    name = spec.model_ref().model
    ep = Episode()
    msgs = ep.transcript
    for t, turn in enumerate(conv.turns):
        begin_turn(ep, t, turn.user, emit)
        for step in range(spec.step_limit):
            proposed = student.complete(
                Request(
                    name, SYSTEM_PROMPT, list(msgs), NEUTRAL_TOOLS, spec.temperature, spec.max_output_tokens
                )
            )
            ep.record_model_call("student", proposed, t)
            check_complete(proposed, t, "student")
            review = teacher.complete(
                Request(
                    spec.teacher.model,
                    TEACHER_PROMPT,
                    [*msgs, {"role": "user", "text": _proposal(proposed)}],
                    NEUTRAL_TOOLS,
                    0.0,
                    spec.max_output_tokens,
                )
            )
            ep.record_model_call("teacher", review, t)
            check_complete(review, t, "teacher")
            verdict = _verdict(review)
            text, calls = proposed.text, proposed.tool_calls
            if verdict["verdict"] == "revise":
                if verdict.get("calls"):
                    calls = [
                        ToolCall(f"teacher-{t}-{step}-{i}", c.get("name", ""), c.get("args", {}))
                        for i, c in enumerate(verdict["calls"])
                    ]
                    text = ""
                else:
                    text, calls = str(verdict.get("text", proposed.text)), []
            ep.atlas_steps.append(
                {
                    "turn": t,
                    "step": step,
                    "verdict": verdict["verdict"],
                    "guidance": verdict.get("guidance"),
                    "proposed": {
                        "text": proposed.text,
                        "calls": [{"name": c.name, "args": c.args} for c in proposed.tool_calls],
                    },
                    "executed": {"text": text, "calls": [{"name": c.name, "args": c.args} for c in calls]},
                }
            )
            emit("atlas", ep.atlas_steps[-1])
            # the student's turn goes back as it sent it when the teacher let it stand; a revised one is the
            # teacher's words and calls, with none of the student's blocks (the API refuses a changed turn)
            msgs.append(
                assistant_message(text, calls, proposed.received if verdict["verdict"] == "approve" else None)
            )
            if not calls:
                break
            msgs.append(run_tools(conn, calls, ep, t, emit))
        else:
            ep.step_limit_hit = True
            emit("step_limit", {"turn": t, "limit": spec.step_limit})
    return ep
