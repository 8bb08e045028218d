"""The baseline agent: the model alone, tools executed in the sandbox, until it answers."""

from __future__ import annotations

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
from runner.models.base import Request
from runner.models.client import ModelClient


def run_baseline(
    conv: Conversation,
    conn: psycopg.Connection[Any],
    model: ModelClient,
    spec: RunSpec,
    emit: EventSink = no_events,
) -> Episode:
    name = spec.model_ref().model
    ep = Episode()
    msgs = ep.transcript
    for t, turn in enumerate(conv.turns):
        begin_turn(ep, t, turn.user, emit)
        for _ in range(spec.step_limit):
            c = model.complete(
                Request(
                    name, SYSTEM_PROMPT, list(msgs), NEUTRAL_TOOLS, spec.temperature, spec.max_output_tokens
                )
            )
            ep.record_model_call("agent", c, t)
            check_complete(c, t)
            msgs.append(assistant_message(c.text, c.tool_calls, c.received))
            emit(
                "model",
                {
                    "turn": t,
                    "text": c.text,
                    "tool_calls": [(x.name, x.args) for x in c.tool_calls],
                    "cached": c.cached,
                    "tokens": (c.input_tokens, c.output_tokens),
                },
            )
            if not c.tool_calls:
                break
            msgs.append(run_tools(conn, c.tool_calls, ep, t, emit))
        else:
            ep.step_limit_hit = True
            emit("step_limit", {"turn": t, "limit": spec.step_limit})
    return ep
