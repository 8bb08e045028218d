"""A request's JSON body, its tool list parsed once per run.

A run sends the same tool list with every call, most of each body's bytes (the CRM's: ~11 of
~12 KB): parsing it and freeing it again was a fifth of the simulator's CPU at 64 conversations in
flight. Where the body ends with that list (`..., "tools": [...]}`, as the built-in agents send
it: models/base.py json_body) and those bytes were seen before, the rest is parsed and the list
seen before is put back, the same object every time (the server and its checks only read it).

Why the tail is safe to split off: `,"tools":` cannot stand inside a JSON string (its quotes would
be escaped), and a body that is one JSON object ending in `,"tools":` + a whole JSON value + `}`
has that value as its own last member. A tail is remembered only after it parsed, alone, to the
very list the full parse found.
"""

from __future__ import annotations

from typing import Any

import orjson

TAIL = b',"tools":'
KEEP = 64  # distinct tool lists remembered (a run has one per harness and API)

_seen: dict[bytes, Any] = {}


def parse(raw: bytes) -> Any:
    """orjson.loads(raw), and the same value (orjson.JSONDecodeError likewise for a bad body)."""
    at = raw.rfind(TAIL)
    tail = raw[at + len(TAIL) : -1] if at > 0 and raw.endswith(b"}") else None
    if tail is not None:
        tools = _seen.get(tail)
        if tools is not None:
            body = orjson.loads(raw[:at] + b"}")
            if isinstance(body, dict) and body:  # `{,"tools":...}` is no JSON, though `{}` is
                body["tools"] = tools
                return body
    body = orjson.loads(raw)
    if tail is not None and isinstance(body, dict) and isinstance(body.get("tools"), list):
        _remember(tail, body["tools"])
    return body


def _remember(tail: bytes, tools: list[Any]) -> None:
    try:
        alone = orjson.loads(tail)
    except orjson.JSONDecodeError:  # the last `,"tools":` was inside the list (a tool with such a property)
        return
    if alone == tools:
        if len(_seen) >= KEEP:
            _seen.clear()
        _seen[tail] = tools
