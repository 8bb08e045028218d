"""The simulator's prompt-cache segments: the tool list's part computed once, the same as computed afresh."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from runner.models.sim import promptcache
from runner.models.sim.promptcache import PromptCache, segments

TOOLS = [{"name": f"tool_{i}", "description": "d" * 400, "input_schema": {"type": "object", "properties": {
    "q": {"type": "string"}}}} for i in range(4)]


def _fresh(api: str, body: dict[str, Any]) -> list[tuple[int, bool, bytes]]:
    """The segments as the module's docstring defines them, with no memo."""
    raw: list[Any] = list(body.get("tools") or [])
    if api == "anthropic":
        raw += [{"type": "text", "text": body["system"]}] if isinstance(body.get("system"), str) else []
        for m in body["messages"]:
            raw += [{"role": m["role"], **b} for b in m["content"]]
    else:
        raw += body["messages"]
    h = hashlib.sha256(body["model"].encode())
    out = []
    for seg in raw:
        text = orjson.dumps({k: v for k, v in seg.items() if k != "cache_control"}, option=orjson.OPT_SORT_KEYS)
        h.update(text)
        out.append((max(1, -(-len(text) // 4)), "cache_control" in seg, h.copy().digest()))
    return out


def _view(segs: list[promptcache.Segment]) -> list[tuple[int, bool, bytes]]:
    return [(s.tokens, s.marked, s.digest) for s in segs]


def _body(turns: int, *, marked_tools: bool = False, model: str = "sim-strong") -> dict[str, Any]:
    tools = [*TOOLS[:-1], {**TOOLS[-1], "cache_control": {"type": "ephemeral"}}] if marked_tools else TOOLS
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": [{"type": "text", "text": f"turn {i}"}]}
                for i in range(turns)]
    return {"model": model, "system": "be brief", "tools": [dict(t) for t in tools], "messages": messages}


def test_segments_equal_a_fresh_computation_call_after_call() -> None:
    promptcache._tools_seen.clear()
    for turns in (1, 2, 5, 3):
        for marked in (False, True):
            for model in ("sim-strong", "sim-mini"):
                body = _body(turns, marked_tools=marked, model=model)
                assert _view(segments("anthropic", body)) == _fresh("anthropic", body)
    assert len(promptcache._tools_seen) == 4  # (model, marked or not): each computed once


def test_a_marker_on_the_tools_is_not_carried_to_a_request_without_it() -> None:
    marked = segments("anthropic", _body(1, marked_tools=True))
    plain = segments("anthropic", _body(1))
    assert marked[len(TOOLS) - 1].marked and not plain[len(TOOLS) - 1].marked
    assert [s.digest for s in marked] == [s.digest for s in plain]  # a marker does not change the prefix


def test_the_returned_list_is_the_callers_own() -> None:
    first = segments("anthropic", _body(2))
    first.clear()
    assert _view(segments("anthropic", _body(2))) == _fresh("anthropic", _body(2))


def test_a_top_level_breakpoint_with_only_tools_marks_the_last_tool() -> None:
    body = {"model": "sim-strong", "tools": [dict(t) for t in TOOLS], "messages": [],
            "cache_control": {"type": "ephemeral"}}
    segs = segments("anthropic", body)
    assert [s.marked for s in segs] == [False] * (len(TOOLS) - 1) + [True]


def test_openai_prefixes_hit_on_the_second_call() -> None:
    body = {"model": "sim-strong", "tools": [dict(t) for t in TOOLS] * 3,
            "messages": [{"role": "user", "content": "x" * 200}]}
    cache = PromptCache()
    assert cache.account("openai", segments("openai", body)).cache_read == 0
    assert cache.account("openai", segments("openai", body)).cache_read >= 1024
