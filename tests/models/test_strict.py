"""The simulator's request checks in-process: a message checked once is not walked again, and a bad
one is still named where it stands."""

from __future__ import annotations

from typing import Any

import pytest

from runner.models.sim import strict

TOOL = {"name": "find", "description": "Find.", "input_schema": {"type": "object", "properties": {}}}


def _body(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "sim-strong", "max_tokens": 50, "tools": [TOOL], "messages": list(messages)}


USER = {"role": "user", "content": [{"type": "text", "text": "Find Acme."}]}
CALL = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "find", "input": {}}]}
RESULT = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "Acme"}]}


def test_messages_seen_fit_are_skipped_and_a_new_bad_one_is_named_by_its_place(monkeypatch: Any) -> None:
    strict.validate("anthropic", _body(USER, CALL, RESULT))
    walked: list[int] = []
    real = strict.check

    def counting(value: Any, tp: Any, path: str) -> str | None:
        if path == "" and isinstance(value, dict):
            walked.append(len(value.get("messages", [])))
        return real(value, tp, path)

    monkeypatch.setattr(strict, "check", counting)
    strict.validate("anthropic", _body(USER, CALL, RESULT, {"role": "assistant", "content": "Done."}))
    assert walked == [1]  # only the new message was walked
    bad = {"role": "assistant", "content": [{"type": "text", "text": "x", "colour": "red"}]}
    with pytest.raises(strict.RequestRefused, match=r"^messages\.3\."):  # its place, not its place among the new
        strict.validate("anthropic", _body(USER, CALL, RESULT, bad))
    with pytest.raises(strict.RequestRefused):  # a message seen fit does not excuse the rest of the body
        strict.validate("anthropic", {**_body(USER), "max_tokens": "many"})


def test_a_tool_list_and_system_prompt_seen_fit_are_not_walked_again_and_a_changed_one_is(monkeypatch: Any) -> None:
    system = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    strict.validate("anthropic", {**_body(USER), "system": system})
    walked: list[set[str]] = []
    real = strict.check

    def counting(value: Any, tp: Any, path: str) -> str | None:
        if path == "" and isinstance(value, dict):
            walked.append(set(value))
        return real(value, tp, path)

    monkeypatch.setattr(strict, "check", counting)
    strict.validate("anthropic", {**_body(USER, CALL, RESULT), "system": system})
    assert walked[0] >= {"model", "max_tokens", "messages"} and not walked[0] & {"tools", "system"}
    bad_system = [{**system[0], "cache_control": {"type": "ephemeral", "ttl": "1d"}}]
    with pytest.raises(strict.RequestRefused, match=r"^system"):
        strict.validate("anthropic", {**_body(USER), "system": bad_system})
    with pytest.raises(strict.RequestRefused, match=r"^tools\.1"):
        strict.validate("anthropic", {**_body(USER), "tools": [TOOL, {**TOOL, "name": "other", "colour": "red"}]})
