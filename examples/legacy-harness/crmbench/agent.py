"""The agent: a real model through the official SDKs, or the stand-in the team uses for smoke runs.

The SDKs read their keys and base URLs from the environment (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL,
OPENAI_API_KEY, OPENAI_BASE_URL), as the team's CI sets them. The stand-in replays the conversation's
expected calls after a fixed think time (STANDIN_LATENCY_MS, default 100); its `sloppy` and
`forgetful` models get a deterministic third of the turns wrong, so runs differ as real models do.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from typing import Any

from crmbench.tools import TOOLS

SYSTEM = "You operate a CRM through tools. Look accounts up before acting; never guess ids."
MAX_STEPS = 6
Execute = Callable[[str, dict[str, Any]], dict[str, Any]]


def standin(conversation_id: str, turn_no: int, turn: dict[str, Any], model: str, execute: Execute) -> list[str]:
    time.sleep(float(os.environ.get("STANDIN_LATENCY_MS", "100")) / 1000)
    calls = [dict(c) for c in turn["expected_calls"]]
    wrong = int(hashlib.sha256(f"{conversation_id}/{turn_no}".encode()).hexdigest(), 16) % 3 == 0
    if model == "sloppy" and wrong:  # the wrong stage, and only the first call
        calls = [{**c, "args": {**c["args"], "stage": "lost"}} if c["tool"] == "move_deal" else c for c in calls[:1]]
    elif model == "forgetful" and wrong:  # stops one call short
        calls = calls[:-1]
    names = []
    for c in calls:
        execute(c["tool"], c["args"])
        names.append(c["tool"])
    return names


def anthropic_turn(messages: list[dict[str, Any]], model: str, temperature: float, execute: Execute) -> list[str]:
    import anthropic

    client = anthropic.Anthropic()
    names: list[str] = []
    for _ in range(MAX_STEPS):
        reply = client.messages.create(model=model, max_tokens=800, system=SYSTEM, tools=TOOLS,
                                       messages=messages)
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        uses = [b for b in reply.content if b.type == "tool_use"]
        if not uses:
            return names
        results = []
        for b in uses:
            names.append(b.name)
            out = execute(b.name, dict(b.input))
            results.append({"type": "tool_result", "tool_use_id": b.id, "content": json.dumps(out)})
        messages.append({"role": "user", "content": results})
    return names


def openai_turn(messages: list[dict[str, Any]], model: str, temperature: float, execute: Execute) -> list[str]:
    import openai

    client = openai.OpenAI()
    tools = [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                               "parameters": t["input_schema"]}} for t in TOOLS]
    names: list[str] = []
    for _ in range(MAX_STEPS):
        reply = client.chat.completions.create(model=model, messages=[{"role": "system", "content": SYSTEM},
                                                                      *messages], tools=tools)
        msg = reply.choices[0].message
        messages.append(msg.model_dump(exclude_none=True))
        if not msg.tool_calls:
            return names
        for tc in msg.tool_calls:
            names.append(tc.function.name)
            out = execute(tc.function.name, json.loads(tc.function.arguments or "{}"))
            messages.append({"role": "tool", "tool_call_id": tc.id, "content": json.dumps(out)})
    return names
