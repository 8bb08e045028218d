"""What models/base.py gives every provider: the request body as sent."""

from __future__ import annotations

import json

from runner.models.base import _json_text, json_body


def test_a_json_body_is_the_body_with_its_tool_list_serialized_once() -> None:
    tools = [{"name": "find", "description": "Trouvé ✓", "input_schema": {"type": "object"}}]
    body = {"model": "m", "messages": [{"role": "user", "content": "é"}], "tools": tools, "max_tokens": 5}
    assert json.loads(json_body(body)) == body
    assert "✓".encode() in json_body(body)  # UTF-8 as is, not \\u escapes
    assert id(tools) in _json_text.seen  # the next call with this list reuses its text
    assert json.loads(json_body({"tools": tools})) == {"tools": tools}
    assert json.loads(json_body({"model": "m", "tools": []})) == {"model": "m", "tools": []}
