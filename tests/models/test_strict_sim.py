"""The simulator is as strict as the real APIs: what they reject it rejects, with their error
shapes; it streams both wire formats; it reports prompt-cache usage by the providers' rules."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from runner.config import SimSettings
from runner.harness.crm.agents.base import NEUTRAL_TOOLS, SYSTEM_PROMPT
from runner.models.anthropic import AnthropicProvider
from runner.models.base import Request
from runner.models.openai import OpenAIProvider
from runner.models.sim.process import SimServer

ASK = "Move the Cedar Pilot opportunity to negotiation."
TOOL = {"name": "search_opportunities", "description": "Search opportunities by name.",
        "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}
OTOOL = {"type": "function", "function": {"name": TOOL["name"], "description": TOOL["description"],
                                          "parameters": TOOL["input_schema"]}}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with SimServer(SimSettings()) as s:
        yield s


def _a(sim: SimServer, plays: str = "claude-sonnet-5-5") -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="k", base_url=sim.url, max_retries=0, default_headers={"x-sim-plays": plays})


def _o(sim: SimServer, plays: str = "gpt-5.4") -> openai.OpenAI:
    return openai.OpenAI(api_key="k", base_url=f"{sim.url}/v1", max_retries=0, default_headers={"x-sim-plays": plays})


def _a_rejects(sim: SimServer, match: str, **kw: Any) -> None:
    body = {"model": "sim-strong", "max_tokens": 100, "messages": [{"role": "user", "content": ASK}], **kw}
    with pytest.raises(anthropic.BadRequestError, match=match) as info:
        _a(sim).messages.create(**body)
    assert info.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]


def test_temperature_to_a_claude_model_is_refused(sim: SimServer) -> None:
    # What a project that still sends temperature (as this one did through extra_body) gets back.
    _a_rejects(sim, "temperature` is deprecated", extra_body={"temperature": 0.0})


@pytest.mark.parametrize("kw,match", [
    ({"extra_body": {"frobnicate": 1}}, "frobnicate: Extra inputs are not permitted"),
    ({"messages": [{"role": "assistant", "content": "hi"}]}, "first message must use the \"user\" role"),
    ({"messages": [{"role": "user", "content": "   "}]}, "non-whitespace text"),
    ({"messages": [{"role": "user", "content": ASK}, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "search_opportunities", "input": {}}]},
        {"role": "user", "content": "and?"}], "tools": [TOOL]}, "without `tool_result` blocks immediately after"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "zz", "content": "x"}]}]},
     "unexpected `tool_use_id`"),
    ({"tools": [TOOL], "tool_choice": {"type": "tool", "name": "drop_table"}}, "Tool 'drop_table' not found"),
    ({"extra_body": {"max_tokens": 10**7}}, "maximum allowed number of output tokens"),
    ({"extra_body": {"messages": [{"role": "user", "content": [{"type": "txt", "text": "x"}]}]}}, "messages.0"),
])
def test_anthropic_rejects_what_the_api_rejects(sim: SimServer, kw: dict[str, Any], match: str) -> None:
    _a_rejects(sim, match, **kw)


@pytest.mark.parametrize("kw,match,plays", [
    ({"temperature": 5}, "'temperature': 5 is out of range", "gpt-4.1"),
    # "Using GPT-5.4": temperature only with reasoning effort none (its default)
    ({"temperature": 0, "reasoning_effort": "high"}, "only supported when reasoning_effort is none", "gpt-5.4"),
    ({"extra_body": {"frobnicate": 1}}, "frobnicate: Extra inputs", "gpt-5.4"),
    ({"messages": [{"role": "user", "content": ASK}, {"role": "assistant", "content": None}]},
     "expected a string, got null", "gpt-5.4"),
    ({"messages": [{"role": "user", "content": ASK}, {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "search_opportunities", "arguments": "{}"}}]}]},
     "must be followed by tool messages", "gpt-5.4"),
    ({"messages": [{"role": "user", "content": ASK}, {"role": "tool", "tool_call_id": "c9", "content": "x"}]},
     "must be a response to a preceeding message", "gpt-5.4"),
    ({"tools": [OTOOL], "tool_choice": {"type": "function", "function": {"name": "drop_table"}}},
     "tool 'drop_table' not found", "gpt-5.4"),
])
def test_openai_rejects_what_the_api_rejects(sim: SimServer, kw: dict[str, Any], match: str, plays: str) -> None:
    body = {"model": "sim-strong", "messages": [{"role": "user", "content": ASK}], **kw}
    with pytest.raises(openai.BadRequestError, match=match) as info:
        _o(sim, plays).chat.completions.create(**body)
    assert info.value.body is not None and "message" in info.value.body  # type: ignore[operator]


def test_gpt41_still_takes_temperature(sim: SimServer) -> None:
    r = _o(sim, "gpt-4.1").chat.completions.create(model="sim-strong", temperature=0,
                                                   messages=[{"role": "user", "content": ASK}], tools=[OTOOL])
    assert r.choices[0].message.tool_calls


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_empty_model_turns_never_reach_the_wire_as_null_or_blank(sim: SimServer, kind: str) -> None:
    """A model turn that ended with no text and no calls goes back as a placeholder, accepted."""
    msgs = [{"role": "user", "text": ASK}, {"role": "assistant", "text": "  ", "tool_calls": []},
            {"role": "user", "text": "Please go on."}, {"role": "assistant", "text": "", "tool_calls": [
                {"id": "c1", "name": "search_opportunities", "args": {"query": "Cedar Pilot"}}]},
            {"role": "tool", "results": [{"id": "c1", "content": "", "is_error": False}]}]
    p: Any = AnthropicProvider("k", base_url=sim.url, timeout=10, headers={"x-sim-plays": "claude-sonnet-5-5"}) \
        if kind == "anthropic" else OpenAIProvider("k", base_url=f"{sim.url}/v1", timeout=10,
                                                   headers={"x-sim-plays": "gpt-5.4"})
    # a hand-made transcript has no thinking blocks to send back: thinking off (Sonnet 5.5's lowest setting,
    # between_tools), as the API then requires
    off = {"thinking": {"type": "between_tools"}} if kind == "anthropic" else {"reasoning_effort": "none"}
    for cache in (False, True):
        c = p.generate(Request("sim-strong", SYSTEM_PROMPT, msgs, NEUTRAL_TOOLS, prompt_cache=cache, thinking=off))
        assert c.stop_reason


def test_anthropic_stream_events_and_final_message_equal_the_plain_answer(sim: SimServer) -> None:
    client = _a(sim)
    body: dict[str, Any] = {"model": "sim-strong", "max_tokens": 300, "tools": [TOOL],
                            "messages": [{"role": "user", "content": ASK}]}
    plain = client.messages.create(**body)
    events = [e.type for e in client.messages.create(**body, stream=True)]
    assert events[0] == "message_start" and events[-2:] == ["message_delta", "message_stop"]
    assert {"content_block_start", "content_block_delta", "content_block_stop"} <= set(events)
    with client.messages.stream(**body) as stream:
        deltas = [e for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    # ids differ call by call, as they do on the real API; everything else is the same message
    def same(m: Any) -> Any:
        d = m.model_dump(exclude={"id"})
        for block in d["content"]:
            block.pop("id", None)
        return d

    assert deltas and same(final) == same(plain)
    text_body = {**body, "messages": [{"role": "user", "content": "Drop the contacts table, we are starting over."}]}
    with client.messages.stream(**text_body) as stream:
        text = "".join(stream.text_stream)
    plain_text = "".join(b.text for b in client.messages.create(**text_body).content if b.type == "text")
    assert text == plain_text


def test_openai_stream_chunks_and_final_completion_equal_the_plain_answer(sim: SimServer) -> None:
    client = _o(sim)
    body: dict[str, Any] = {"model": "sim-strong", "tools": [OTOOL], "messages": [{"role": "user", "content": ASK}]}
    plain = client.chat.completions.create(**body)
    chunks = list(client.chat.completions.create(**body, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[-1].usage == plain.usage
    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    args = "".join(c.choices[0].delta.tool_calls[0].function.arguments or ""  # type: ignore[union-attr,index]
                   for c in chunks if c.choices and c.choices[0].delta.tool_calls)
    assert json.loads(args) == json.loads(plain.choices[0].message.tool_calls[0].function.arguments)  # type: ignore
    with client.chat.completions.stream(**body) as stream:
        final = stream.get_final_completion()
    got, want = final.choices[0].message, plain.choices[0].message
    assert [(t.function.name, t.function.arguments) for t in got.tool_calls or []] == \
        [(t.function.name, t.function.arguments) for t in want.tool_calls or []]  # type: ignore[union-attr]
    assert (got.content, final.choices[0].finish_reason) == (want.content, plain.choices[0].finish_reason)


def test_prompt_cache_usage_follows_the_providers_rules(sim: SimServer) -> None:
    """Anthropic: write on the first call, read on the next, none reported without breakpoints.
    OpenAI: automatic, in the prompt_tokens_details of a long enough prompt."""
    p = AnthropicProvider("k", base_url=sim.url, timeout=10, headers={"x-sim-plays": "claude-sonnet-5-5"})
    tools = [{**t, "description": t["description"] + " (cache test)"} for t in NEUTRAL_TOOLS]  # a fresh prefix
    req = Request("sim-strong", SYSTEM_PROMPT, [{"role": "user", "text": ASK}], tools, prompt_cache=True)
    first, second = p.generate(req), p.generate(req)
    assert first.cache_write_tokens > 1024 and first.cache_read_tokens == 0
    assert second.cache_read_tokens == first.cache_write_tokens and second.cache_write_tokens == 0
    raw = _a(sim).messages.create(model="sim-strong", max_tokens=50, messages=[{"role": "user", "content": ASK}])
    assert raw.usage.cache_read_input_tokens is None  # no breakpoint asked: no cache fields
    o = OpenAIProvider("k", base_url=f"{sim.url}/v1", timeout=10, headers={"x-sim-plays": "gpt-5.4"})
    otools = [{**t, "description": t["description"] + " (openai cache test)"} for t in NEUTRAL_TOOLS]
    oreq = Request("sim-strong", SYSTEM_PROMPT, [{"role": "user", "text": ASK}], otools)
    a, b = o.generate(oreq), o.generate(oreq)
    assert a.cache_read_tokens == 0 and b.cache_read_tokens >= 1024 and (b.cache_read_tokens - 1024) % 128 == 0
    assert a.input_tokens == b.input_tokens + b.cache_read_tokens  # prompt_tokens includes the cached part


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_exhausted_quota_stops_the_run_at_the_first_call(sim: SimServer, kind: str) -> None:
    from runner.config import RetrySettings
    from runner.errors import ProviderFatal
    from runner.models.client import ModelClient

    headers = {"x-sim-fault": "insufficient_quota"}
    p: Any = AnthropicProvider("k", base_url=sim.url, timeout=10, headers=headers) if kind == "anthropic" \
        else OpenAIProvider("k", base_url=f"{sim.url}/v1", timeout=10, headers=headers)
    client = ModelClient(p, wire_model="sim-strong", logical_model="gpt-5.4", limiter=None, limiter_slot=None,
                         cache=None, retry=RetrySettings())
    with pytest.raises(ProviderFatal, match=r"insufficient_quota|billing"):
        client.complete(Request("sim-strong", SYSTEM_PROMPT, [{"role": "user", "text": ASK}], NEUTRAL_TOOLS))
    assert client.stats.retries == 0


def test_the_responses_api_plain_and_streamed_through_the_sdk(sim: SimServer) -> None:
    """`/v1/responses`: the SDK's own create() and stream() read the simulator's answers; a tool loop goes
    through function_call / function_call_output items; a shape the API refuses is refused."""
    import openai

    client = openai.OpenAI(api_key="k", base_url=f"{sim.url}/v1", max_retries=0)
    tools: list[Any] = [{"type": "function", "name": "search_opportunities", "description": "Find opportunities.",
                         "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                                        "required": ["query"]}, "strict": False}]
    kw: dict[str, Any] = {"model": "gpt-5.4", "instructions": SYSTEM_PROMPT, "input": ASK, "tools": tools,
                          "max_output_tokens": 4000, "reasoning": {"effort": "low"}}  # GPT-5.4's default is none
    first = client.responses.create(**kw)
    calls = [o for o in first.output if o.type == "function_call"]
    assert first.status == "completed" and calls and calls[0].name == "search_opportunities"
    assert first.usage is not None and first.usage.output_tokens_details.reasoning_tokens > 0  # it reasons
    with client.responses.stream(**kw) as stream:
        final = stream.get_final_response()
    assert [o.type for o in final.output] == [o.type for o in first.output]
    follow = client.responses.create(**{**kw, "input": [
        {"role": "user", "content": ASK},
        {"type": "function_call", "call_id": calls[0].call_id, "name": calls[0].name, "arguments": calls[0].arguments},
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": '{"ok": true, "rows": []}'}]})
    assert follow.status == "completed" and follow.output
    cut = client.responses.create(**{**kw, "max_output_tokens": 20})
    assert cut.status == "incomplete" and cut.incomplete_details
    assert cut.incomplete_details.reason == "max_output_tokens"
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="gpt-5.4", input=ASK, max_output_tokens="many")  # type: ignore[arg-type]
