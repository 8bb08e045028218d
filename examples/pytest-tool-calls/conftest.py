"""The suite's model client and cases. Nothing here knows about the gateway: the SDK reads
ANTHROPIC_BASE_URL from the environment, which the pgsandbox-runner plugin points at the session's gateway."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anthropic
import pytest

HERE = Path(__file__).resolve().parent
MODEL = os.environ.get("EVAL_MODEL", "claude-sonnet-5-5")
TOOLS: list[dict[str, Any]] = json.loads((HERE / "tools.json").read_text())
CASES: list[dict[str, Any]] = [json.loads(line) for line in (HERE / "cases.jsonl").read_text().splitlines() if line]


@pytest.fixture(scope="session")
def client() -> anthropic.Anthropic:
    # the gateway retries 429s and 5xx itself: the SDK's own retries would only double them
    return anthropic.Anthropic(max_retries=0)


@pytest.fixture(scope="session")
def thinking(client: anthropic.Anthropic) -> dict[str, Any]:
    """The least thinking the model takes, as its Models API says (`capabilities.thinking.types`): "disabled"
    where it is supported; else "between_tools", which Claude Sonnet 5.5 takes instead (a request with
    {"type": "disabled"} gets a 400 there: "What's new in Claude Sonnet 5.5", read 2026-11-26)."""
    info = client.models.retrieve(MODEL).model_dump()
    types = ((info.get("capabilities") or {}).get("thinking") or {}).get("types") or {}
    for kind in ("disabled", "between_tools"):
        if (types.get(kind) or {}).get("supported"):
            return {"type": kind}
    return {}  # the model's own default: it names neither


def first_tool_call(client: anthropic.Anthropic, thinking: dict[str, Any],
                    case: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """What the model calls first for the case's request; None if it calls no tool. The same request for the
    selection and the argument test of a case: the second is answered from the gateway's response cache."""
    extra: dict[str, Any] = {"thinking": thinking} if thinking else {}
    answer = client.messages.create(model=MODEL, max_tokens=1024, tools=TOOLS, **extra,
                                    messages=[{"role": "user", "content": case["prompt"]}])
    calls = [b for b in answer.content if b.type == "tool_use"]
    return (calls[0].name, dict(calls[0].input)) if calls else None
