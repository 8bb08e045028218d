"""The model calls a CRM conversation should take, foreseen from the record alone (for `runner plan`).

An agent that does what the record's gold calls say makes, per turn, one call per gold call (each proposes
the next tool call, which runs before the next call) and one more that answers the user; a turn that
expects a clarifying question or a refusal is one call. Atlas makes each of those calls twice: the
student proposes, the teacher reviews. A model that explores, retries or errs makes more: the forecast's
high figure allows for it; what a run actually did, once measured, replaces this (runner/forecast/).

Prompts are rebuilt as the agents build them (runner/harness/crm/agents/): the system prompt, the tool
list and the transcript so far, counted as the runner's client counts a request before sending it (compact
JSON, ~4 characters a token). What the database answers is not known before it runs: a tool result is
taken as TOOL_RESULT_CHARS of JSON (a search's row or two, an update's confirmation).
"""

from __future__ import annotations

from typing import Any

import orjson

from runner.config import RunSpec
from runner.harness.base import CallShape
from runner.harness.crm.agents.atlas import TEACHER_PROMPT
from runner.harness.crm.agents.base import NEUTRAL_TOOLS, SYSTEM_PROMPT

TOOL_RESULT_CHARS = 220  # one tool result's JSON (`{"ok": true, "result": {...}}`): a row or two
ANSWER_CHARS = 120  # the agent's closing words to the user, a question or a refusal: a sentence or two
CALL_OUTPUT_CHARS = 20  # what a tool call's output adds to its name and arguments (the block's frame)
# Atlas: the marker and JSON frame around the student's step shown to the teacher
PROPOSAL_OVERHEAD_CHARS = 60
# the teacher's verdict: mostly `{"verdict": "approve"}`, now and then a revision with guidance
VERDICT_CHARS = 60
CALL_ID = "call_0123456789abcdefghij"  # a tool call id as the providers write them (~24 characters)


def _chars(obj: Any) -> int:
    return len(orjson.dumps(obj, default=str))


FIXED_CHARS = _chars(NEUTRAL_TOOLS)  # the tool list every call carries


def _tokens(chars: int) -> int:
    return max(1, chars // 4)


def _call_message(call: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "text": "",
        "tool_calls": [{"id": CALL_ID, "name": call["tool"], "args": call.get("args", {})}],
    }


TOOL_MESSAGE_CHARS = _chars(
    {"role": "tool", "results": [{"id": CALL_ID, "content": "x" * TOOL_RESULT_CHARS, "is_error": False}]}
)


class _Role:
    """One role's calls in order: each call's prompt, and its prefix (the previous call's prompt)."""

    def __init__(self, role: str, system: str) -> None:
        self.role, self.base = role, FIXED_CHARS + _chars(system)
        self.shared = self.marked = _tokens(self.base)  # a record's first call: what every first call sends
        self.calls: list[CallShape] = []

    def call(self, transcript_chars: int, answer_chars: int, tail_chars: int = 0) -> None:
        """`tail_chars`: the end of this prompt that the next one does not repeat (the teacher's view of the
        proposed step): the next prompt shares this one's transcript, but not its end."""
        prompt = _tokens(self.base + transcript_chars + tail_chars)
        self.calls.append(
            CallShape(
                self.role, prompt, min(self.shared, prompt), _tokens(answer_chars), min(self.marked, prompt)
            )
        )
        self.shared = _tokens(self.base + transcript_chars)
        self.marked = prompt if not tail_chars else _tokens(self.base)


def expected_calls(record: dict[str, Any], run: RunSpec) -> list[CallShape]:
    atlas = run.agent == "atlas" and run.teacher is not None
    agent = _Role("student" if atlas else "agent", SYSTEM_PROMPT)
    teacher = _Role("teacher", TEACHER_PROMPT) if atlas else None
    chars = 2  # the transcript's brackets

    def step(answer: dict[str, Any]) -> None:
        calls = answer.get("tool_calls") or []
        # output is what the model writes: the text, each call's name and arguments (not the id it is given)
        answer_chars = len(answer.get("text", "")) + sum(
            len(c["name"]) + _chars(c["args"]) + CALL_OUTPUT_CHARS for c in calls
        )
        agent.call(chars, answer_chars)
        if teacher is not None:
            teacher.call(chars, VERDICT_CHARS, _chars(answer) + PROPOSAL_OVERHEAD_CHARS)

    for turn in record.get("turns", []):
        chars += _chars({"role": "user", "text": turn.get("user", "")}) + 1
        for gold in turn.get("gold_calls") or []:
            message = _call_message(gold)
            step(message)
            chars += _chars(message) + TOOL_MESSAGE_CHARS + 2
        closing = {"role": "assistant", "text": "x" * ANSWER_CHARS, "tool_calls": []}
        step(closing)
        chars += _chars(closing) + 1
    return agent.calls + (teacher.calls if teacher is not None else [])
