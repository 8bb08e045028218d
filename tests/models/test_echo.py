"""An assistant turn goes back to the model as it came: block for block, in order, unmodified. The APIs refuse
a rebuilt turn that carries thinking blocks ("Echo the assistant message exactly as received: rebuilding the
message or filtering out redacted_thinking blocks triggers a 400 error", Anthropic's "Thinking in tool and
multi-turn workflows", read 2026-11-26), and Claude Sonnet 5.5 returns its words between tool calls as
thinking blocks, so [thinking, text, thinking, tool_use] is an ordinary turn."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from runner.harness.crm.agents.base import assistant_message
from runner.models.anthropic import AnthropicProvider
from runner.models.base import Request, ToolCall
from runner.models.openai import OpenAIProvider
from tests.models.test_wire import Recorder, server  # noqa: F401 - the recording server fixture

CANNED_BLOCKS: list[dict[str, Any]] = [
    {"type": "thinking", "thinking": "The user wants the Cedar Pilot deal.", "signature": "sig-one"},
    {"type": "text", "text": "Looking it up."},
    {"type": "thinking", "thinking": "", "signature": "sig-two-empty-at-display-omitted"},
    {"type": "redacted_thinking", "data": "opaque-bytes"},
    {"type": "server_tool_use_preview", "id": "x1", "note": "a block type the runner does not know"},
    {"type": "tool_use", "id": "toolu_1", "name": "search_opportunities", "input": {"query": "Cedar Pilot"}},
]
CANNED_ANTHROPIC = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-5-5",
                    "stop_reason": "tool_use", "content": CANNED_BLOCKS,
                    "usage": {"input_tokens": 30, "output_tokens": 20}}
# arguments as the model wrote them: spacing and key order a re-serialization would change
ARGUMENTS = '{ "query" :  "Cedar Pilot",  "limit": 5 }'
CANNED_OPENAI = {"id": "c1", "object": "chat.completion", "model": "gpt-5.4", "choices": [{
    "index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Looking it up.", "refusal": None, "annotations": [],
        "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "search_opportunities", "arguments": ARGUMENTS}}]}}],
    "usage": {"prompt_tokens": 30, "completion_tokens": 20}}


def _second_request(kind: str, url: str, rec: Recorder) -> tuple[bytes, Any]:
    """A first call answered with the canned turn, the turn put in the transcript as the agents do, a second
    call with its tool result: the second request's body as it went out."""
    canned = CANNED_ANTHROPIC if kind == "anthropic" else CANNED_OPENAI
    rec.body = orjson.dumps(canned)
    p: Any = AnthropicProvider("k", base_url=url, timeout=5) if kind == "anthropic" else \
        OpenAIProvider("k", base_url=f"{url}/v1", timeout=5)
    msgs: list[dict[str, Any]] = [{"role": "user", "text": "Find the Cedar Pilot deal."}]
    first = p.generate(Request("m", "sys", list(msgs), [], prompt_cache=True))
    assert [c.name for c in first.tool_calls] == ["search_opportunities"]
    msgs.append(assistant_message(first.text, first.tool_calls, first.received))
    msgs.append({"role": "tool", "results": [{"id": first.tool_calls[0].id, "content": "[]", "is_error": False}]})
    p.generate(Request("m", "sys", msgs, [], prompt_cache=True))
    return rec.seen[-1].body, first


def test_a_claude_turn_goes_back_byte_for_byte_every_block_in_order(server: tuple[str, Recorder]) -> None:  # noqa: F811
    url, rec = server
    body, first = _second_request("anthropic", url, rec)
    assert b'"content":' + orjson.dumps(CANNED_BLOCKS) in body
    sent = orjson.loads(body)["messages"][1]
    assert sent == {"role": "assistant", "content": CANNED_BLOCKS}
    assert [b["type"] for b in first.thinking] == ["thinking", "thinking", "redacted_thinking"]
    assert first.text == "Looking it up."  # what the agent reads: the text blocks


def test_an_openai_turn_goes_back_with_its_calls_arguments_as_written(server: tuple[str, Recorder]) -> None:  # noqa: F811
    url, rec = server
    body, _ = _second_request("openai", url, rec)
    sent = orjson.loads(body)["messages"][2]
    assert sent["tool_calls"][0]["function"]["arguments"] == ARGUMENTS  # not re-serialized
    assert sent == {"role": "assistant", "content": "Looking it up.",
                    "tool_calls": CANNED_OPENAI["choices"][0]["message"]["tool_calls"]}  # type: ignore[index]
    assert "annotations" not in sent and "refusal" not in sent  # what the request's message does not take


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_a_turn_the_agent_changed_is_built_from_its_words_and_calls(server: tuple[str, Recorder],  # noqa: F811
                                                                   kind: str) -> None:
    """An Atlas step the teacher revised is the teacher's words and calls: none of the student's blocks go
    with it (the API refuses a changed turn that carries thinking)."""
    url, rec = server
    rec.body = orjson.dumps(CANNED_ANTHROPIC if kind == "anthropic" else CANNED_OPENAI)
    p: Any = AnthropicProvider("k", base_url=url, timeout=5) if kind == "anthropic" else \
        OpenAIProvider("k", base_url=f"{url}/v1", timeout=5)
    revised = assistant_message("", [ToolCall("teacher-0-0-0", "get_account", {"account_id": 2})])
    p.generate(Request("m", "sys", [{"role": "user", "text": "go"}, revised,
                                    {"role": "tool", "results": [{"id": "teacher-0-0-0", "content": "{}"}]}], []))
    sent = orjson.loads(rec.seen[-1].body)["messages"]
    turn = sent[1] if kind == "anthropic" else sent[2]
    text = orjson.dumps(turn)
    assert b"thinking" not in text and b"get_account" in text
