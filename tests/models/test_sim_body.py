"""The simulator's body parse: the same value as orjson.loads, the run's tool list parsed once."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from runner.models.base import json_body
from runner.models.sim import body

TOOLS = [{"name": "search", "description": "find", "input_schema": {"type": "object", "properties": {
    "tools": {"type": "string"}}}}, {"name": "get", "description": "read", "input_schema": {"type": "object"}}]


def _raw(messages: list[Any], tools: list[Any] = TOOLS) -> bytes:
    return json_body({"model": "sim-strong", "max_tokens": 10, "messages": messages, "tools": tools})


def test_equal_to_a_full_parse_and_the_tool_list_shared_after_the_first() -> None:
    body._seen.clear()
    first = body.parse(_raw([{"role": "user", "content": "a"}]))
    second = body.parse(_raw([{"role": "user", "content": "b"}]))
    assert second == orjson.loads(_raw([{"role": "user", "content": "b"}]))
    assert second["tools"] is first["tools"] and len(body._seen) == 1


@pytest.mark.parametrize("raw", [
    b'{"tools":[1,2],"model":"m"}',  # tools not last: parsed in full
    b'{"model":"m","x":{"a":1,"tools":[1,2]}}',  # a nested "tools" at the end of the body
    b'{"model":"m","tools":[{"properties":{"q":1},"tools":[3]}]}',  # the last `,"tools":` inside the list
    b'[1,"tools",2]',
])
def test_other_shapes_parse_as_orjson_parses_them(raw: bytes) -> None:
    body._seen.clear()
    for _ in range(3):
        assert body.parse(raw) == orjson.loads(raw)


def test_a_broken_body_is_refused_whether_or_not_its_tail_is_known() -> None:
    body._seen.clear()
    good = _raw([{"role": "user", "content": "a"}])
    body.parse(good)
    tail = good[good.rfind(body.TAIL):]
    for bad in (b'{"model":"m",' + tail, b'{"model":"m","messages":[' + tail, b"not json" + tail, b"{" + tail):
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(bad)
        with pytest.raises(orjson.JSONDecodeError):
            body.parse(bad)


def test_a_changed_tool_list_is_parsed_anew() -> None:
    body._seen.clear()
    body.parse(_raw([]))
    changed = [*TOOLS, {"name": "new", "description": "d", "input_schema": {}}]
    assert body.parse(_raw([], changed))["tools"] == changed
