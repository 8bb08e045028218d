"""A record's conversation, read from what its harness wrote, in one neutral form the exporters share (Inspect
AI's messages, OpenTelemetry's spans): who said what, which tools were called with which arguments, and what
each returned.

Two shapes are read from a result's `output`:

- `transcript`, the built-in CRM's: `{"role": "user"|"assistant", "text", "tool_calls": [{"id", "name",
  "args"}]}` and `{"role": "tool", "results": [{"id", "content", "is_error"}]}`;
- `messages`, OpenAI's chat format, as a harness that keeps its conversation would write it: `{"role",
  "content", "tool_calls": [{"id", "function": {"name", "arguments"}}], "tool_call_id"}`.

Anything else gives no turns: the exporters then say what the result says (scores, usage, error) and
nothing made up.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class LoggedCall:
    id: str
    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class LoggedTurn:
    """One message: `role` user, assistant, system or tool (then `call_id` and `name` say which call it
    answers, `error` whether it failed)."""

    role: str
    text: str = ""
    calls: tuple[LoggedCall, ...] = ()
    call_id: str = ""
    name: str = ""
    error: bool = False


@dataclass
class LoggedConversation:
    turns: list[LoggedTurn] = field(default_factory=list)

    def first_user_text(self) -> str | None:
        return next((t.text for t in self.turns if t.role == "user"), None)

    def last_assistant(self) -> LoggedTurn | None:
        return next((t for t in reversed(self.turns) if t.role == "assistant"), None)


def _args(v: Any) -> dict[str, Any]:
    """Tool arguments as an object: OpenAI sends them as a JSON string."""
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return {"arguments": v}
    return v if isinstance(v, dict) else {"arguments": v}


def _text(v: Any) -> str:
    """Content as text: a string, or the text parts of a list of parts."""
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, list):
        return "".join(str(p.get("text", "")) for p in v if isinstance(p, dict))
    return json.dumps(v)


def _from_transcript(items: list[Any]) -> list[LoggedTurn]:
    names: dict[str, str] = {}
    turns: list[LoggedTurn] = []
    for m in items:
        if not isinstance(m, dict):
            continue
        if m.get("role") == "tool":
            for r in m.get("results") or []:
                call = str(r.get("id", ""))
                turns.append(
                    LoggedTurn(
                        "tool",
                        _text(r.get("content")),
                        call_id=call,
                        name=names.get(call, ""),
                        error=bool(r.get("is_error")),
                    )
                )
            continue
        calls = tuple(
            LoggedCall(str(c.get("id", "")), str(c.get("name", "")), _args(c.get("args")))
            for c in m.get("tool_calls") or []
            if isinstance(c, dict)
        )
        names.update({c.id: c.name for c in calls})
        turns.append(LoggedTurn(str(m.get("role", "user")), _text(m.get("text")), calls))
    return turns


def _from_openai(items: list[Any]) -> list[LoggedTurn]:
    names: dict[str, str] = {}
    turns: list[LoggedTurn] = []
    for m in items:
        if not isinstance(m, dict):
            continue
        role = str(m.get("role", "user"))
        if role == "tool":
            call = str(m.get("tool_call_id", ""))
            turns.append(
                LoggedTurn(
                    "tool",
                    _text(m.get("content")),
                    call_id=call,
                    name=str(m.get("name") or names.get(call, "")),
                )
            )
            continue
        calls = tuple(
            LoggedCall(
                str(c.get("id", "")),
                str((c.get("function") or {}).get("name", "")),
                _args((c.get("function") or {}).get("arguments")),
            )
            for c in m.get("tool_calls") or []
            if isinstance(c, dict)
        )
        names.update({c.id: c.name for c in calls})
        turns.append(LoggedTurn("system" if role == "developer" else role, _text(m.get("content")), calls))
    return turns


def conversation(output: dict[str, Any] | None) -> LoggedConversation:
    if not output:
        return LoggedConversation()
    if isinstance(output.get("transcript"), list):
        return LoggedConversation(_from_transcript(output["transcript"]))
    if isinstance(output.get("messages"), list):
        return LoggedConversation(_from_openai(output["messages"]))
    return LoggedConversation()
