"""Thinking as current models do it: what each run sends, blocks that round-trip through a tool-use loop,
answers cut by the output limit recorded as such, and the strict simulator's refusals with the APIs' words."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from runner.config import Config, ModelRef, SimSettings
from runner.errors import ConfigError, ProviderRejected, TurnCut
from runner.harness.crm.agents.base import NEUTRAL_TOOLS, SYSTEM_PROMPT, assistant_message, check_complete
from runner.models.base import Request
from runner.models.capabilities import lookup
from runner.models.client import ModelClient, make_client
from runner.models.settings import client_settings
from runner.models.sim import checks
from runner.models.sim.process import SimServer
from runner.models.thinking import ThinkingChoice, plan

ASK = "Move the Cedar Pilot opportunity to negotiation."


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with SimServer(SimSettings()) as s:
        yield s


def _client(sim: SimServer, model: str = "claude-sonnet-5-5", **thinking: Any) -> ModelClient:
    provider = "anthropic" if model.startswith("claude") else "openai"
    # a run's model (a bare ModelRef is a teacher's, which does not think unless asked)
    ref = ModelRef(provider=provider, model=model, sim_model="sim-strong", **{"thinking": "model-default", **thinking})
    cfg = Config(dataset="x.jsonl", runs=[{"name": "r", "provider": provider, "model": model}], cache=False)
    return make_client(ref, client_settings(cfg), sim_url=sim.url, limiter=None, cache=None)


# ---------------------------------------------------------------------- what a run sends
@pytest.mark.parametrize(("model", "choice", "params", "max_tokens", "thinks"), [
    ("claude-sonnet-5-5", ThinkingChoice(), {}, 800 + 4096, True),  # thinks unless told: room for it
    # Sonnet 5.5 refuses `disabled`: its lowest setting is between_tools ("What's new in Claude Sonnet 5.5")
    ("claude-sonnet-5-5", ThinkingChoice("off"), {"thinking": {"type": "between_tools"}}, 800, False),
    ("claude-sonnet-5", ThinkingChoice("off"), {"thinking": {"type": "disabled"}}, 800, False),
    ("claude-sonnet-5-5", ThinkingChoice("on", "low", 2000),
     {"thinking": {"type": "adaptive"}, "output_config": {"effort": "low"}}, 2800, True),
    ("claude-sonnet-4-5-20250929", ThinkingChoice(), {}, 800, False),  # the seeds' model did not think
    ("claude-sonnet-4-5-20250929", ThinkingChoice("on", tokens=2048),
     {"thinking": {"type": "enabled", "budget_tokens": 2048}}, 2848, True),  # its only form: a budget
    ("gpt-5.4-mini", ThinkingChoice(), {}, 800 + 4096, True),
    ("gpt-5.4-mini", ThinkingChoice("off"), {"reasoning_effort": "none"}, 800, False),
    ("gpt-5.4-mini", ThinkingChoice(effort="high"), {"reasoning_effort": "high"}, 800 + 4096, True),
    ("gpt-4.1", ThinkingChoice("off"), {}, 800, False),
])
def test_each_model_is_sent_what_it_takes_with_room_to_think(model: str, choice: ThinkingChoice,
                                                             params: dict[str, Any], max_tokens: int,
                                                             thinks: bool) -> None:
    p = plan(lookup(model, "anthropic" if model.startswith("claude") else "openai"), model, choice, 800)
    assert (p.params, p.max_tokens, p.thinks) == (params, max_tokens, thinks)


def test_what_a_model_cannot_do_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"claude-opus-5-5 cannot turn thinking off \(it takes thinking: adaptive"):
        plan(lookup("claude-opus-5-5", "anthropic"), "claude-opus-5-5", ThinkingChoice("off"), 800)
    with pytest.raises(ConfigError, match=r"between_tools, which it takes at effort low, medium, high, not max"):
        plan(lookup("claude-sonnet-5-5", "anthropic"), "claude-sonnet-5-5", ThinkingChoice("off", "max"), 800)
    with pytest.raises(ConfigError, match=r"gpt-4\.1 does not reason"):
        plan(lookup("gpt-4.1", "openai"), "gpt-4.1", ThinkingChoice("on"), 800)
    with pytest.raises(ConfigError, match=r"effort 'max' is not taken by gpt-5\.4"):
        plan(lookup("gpt-5.4", "openai"), "gpt-5.4", ThinkingChoice(effort="max"), 800)


def test_a_thinking_teacher_is_refused_at_start() -> None:
    from runner.models.preflight import requests_sent

    cfg = Config(dataset="x.jsonl", runs=[{
        "name": "atlas", "agent": "atlas", "provider": "openai", "model": "gpt-5.4-mini",
        "teacher": {"provider": "anthropic", "model": "claude-sonnet-5-5", "thinking": "model-default"}}])
    assert Config(dataset="x.jsonl", runs=[{  # a teacher that says nothing does not think
        "name": "a", "agent": "atlas", "provider": "openai", "model": "gpt-5.4-mini",
        "teacher": {"provider": "anthropic", "model": "claude-sonnet-5-5"}}]).runs[0].teacher.thinking == "off"
    with pytest.raises(ConfigError, match=r"runs\.atlas\.teacher: claude-sonnet-5-5 would think .* thinking: off"):
        requests_sent(cfg)


# ---------------------------------------------------------------------- on the strict simulator
def test_thinking_blocks_round_trip_through_a_tool_use_loop(sim: SimServer) -> None:
    client = _client(sim)  # model-default: Claude 5.5 thinks
    msgs: list[dict[str, Any]] = [{"role": "user", "text": ASK}]
    for _ in range(4):
        c = client.complete(Request("claude-sonnet-5-5", SYSTEM_PROMPT, list(msgs), NEUTRAL_TOOLS, 0.0, 800))
        check_complete(c, 0)
        assert c.thinking and c.thinking[0]["type"] == "thinking" and c.thinking[0]["signature"]
        assert c.output_tokens > 0
        msgs.append(assistant_message(c.text, c.tool_calls, c.received))
        if not c.tool_calls:
            break
        msgs.append({"role": "tool", "results": [{"id": t.id, "content": '{"ok": true, "rows": []}',
                                                  "is_error": False} for t in c.tool_calls]})
    assert len(msgs) >= 4  # at least one tool round trip went back with its thinking, accepted


def test_the_api_refuses_a_loop_rebuilt_without_its_thinking_or_with_it_edited_or_moved(sim: SimServer) -> None:
    client = _client(sim)
    first = client.complete(Request("claude-sonnet-5-5", SYSTEM_PROMPT, [{"role": "user", "text": ASK}],
                                    NEUTRAL_TOOLS, 0.0, 800))
    assert first.tool_calls and first.thinking and first.received
    results = {"role": "tool", "results": [{"id": t.id, "content": "{}", "is_error": False}
                                           for t in first.tool_calls]}
    blocks = first.received["content"]
    edited = [{**b, "thinking": b["thinking"] + " (edited)"} if b["type"] == "thinking" else b for b in blocks]
    thinking = [b for b in blocks if b["type"] == "thinking"]
    moved = thinking + [b for b in blocks if b["type"] != "thinking"]  # the words between them moved after
    dropped = [b for b in blocks if b is not thinking[-1]]
    cases: list[tuple[dict[str, Any] | None, str]] = [
        (None, "must start with a thinking block"), ({"api": "anthropic", "content": edited}, "cannot be modified"),
        # one of them dropped: a turn left without its first block, or one missing from its sequence
        ({"api": "anthropic", "content": dropped}, "cannot be modified|must start with a thinking block")]
    if moved != blocks:
        cases.append(({"api": "anthropic", "content": moved}, "cannot be modified"))
    for received, words in cases:
        msgs = [{"role": "user", "text": ASK}, assistant_message(first.text, first.tool_calls, received), results]
        with pytest.raises(ProviderRejected, match=words):
            client.complete(Request("claude-sonnet-5-5", SYSTEM_PROMPT, msgs, NEUTRAL_TOOLS, 0.0, 800))
    # as received: accepted
    msgs = [{"role": "user", "text": ASK}, assistant_message(first.text, first.tool_calls, first.received), results]
    client.complete(Request("claude-sonnet-5-5", SYSTEM_PROMPT, msgs, NEUTRAL_TOOLS, 0.0, 800))


@pytest.mark.parametrize("model", ["claude-sonnet-5-5", "gpt-5.4-mini"])
def test_an_output_limit_too_small_for_thinking_cuts_the_answer_and_says_so(sim: SimServer, model: str) -> None:
    """800 tokens and no room for thinking (the seeds' setting on a model that thinks): the answer is cut, and
    the turn is a max_tokens outcome, never an empty answer taken for the model's word."""
    client = _client(sim, model, thinking_tokens=0)
    c = client.complete(Request(model, SYSTEM_PROMPT, [{"role": "user", "text": ASK}], NEUTRAL_TOOLS, 0.0, 100))
    assert c.stop_reason in ("max_tokens", "length") and c.cut == "max_tokens" and not c.tool_calls
    assert c.output_tokens == 100  # the whole limit went, thinking first: billed as output
    with pytest.raises(TurnCut) as cut:
        check_complete(c, 0)
    assert cut.value.kind == "max_tokens"
    roomy = _client(sim, model).complete(Request(model, SYSTEM_PROMPT, [{"role": "user", "text": ASK}],
                                                 NEUTRAL_TOOLS, 0.0, 100))
    assert roomy.cut is None and roomy.tool_calls  # thinking_tokens on top of the answer's limit: whole


def test_the_simulator_refuses_what_the_apis_refuse(sim: SimServer) -> None:
    claude = anthropic.Anthropic(api_key="k", base_url=sim.url, max_retries=0)
    base: dict[str, Any] = {"model": "claude-sonnet-5-5", "max_tokens": 2000,
                            "messages": [{"role": "user", "content": ASK}]}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, '"thinking.type.enabled" is not supported'),
        ({"tool_choice": {"type": "any"}, "tools": [{"name": "t", "input_schema": {"type": "object"}}]},
         'tool_choice: type "tool" and "any" are not supported for this model.'),
        ({"thinking": {"type": "disabled"}}, 'send "thinking": {"type": "between_tools"} instead'),
        ({"thinking": {"type": "between_tools"}, "output_config": {"effort": "max"}}, "between_tools is accepted only"),
        ({"output_config": {"effort": "minimal"}}, None),  # not in the SDK's type: the shape check says so
        ({"system": [{"type": "text", "text": f"s{i}", "cache_control": {"type": "ephemeral"}} for i in range(5)]},
         "A maximum of 4 blocks with cache_control may be provided. Found 5."),
    ]
    for extra, words in cases:
        with pytest.raises(anthropic.BadRequestError) as e:
            claude.messages.create(**{**base, **extra})
        assert words is None or words in str(e.value), (extra, e.value)
    gpt = openai.OpenAI(api_key="k", base_url=f"{sim.url}/v1", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="max_tokens is not supported with this model"):
        gpt.chat.completions.create(model="gpt-5.4", max_tokens=100, messages=[{"role": "user", "content": ASK}])
    # `runner sim serve` answers a model of the table by its real id, thinking as it does
    answer = claude.messages.create(**base)
    assert answer.content[0].type == "thinking" and answer.usage.output_tokens > 0
    reasoned = gpt.chat.completions.create(model="gpt-5.5", max_completion_tokens=2000,  # GPT-5.4's default: none
                                           messages=[{"role": "user", "content": ASK}])
    assert reasoned.usage is not None and reasoned.usage.completion_tokens_details is not None
    assert (reasoned.usage.completion_tokens_details.reasoning_tokens or 0) > 0


def test_a_model_that_cannot_turn_thinking_off_is_refused_so_by_its_published_rules() -> None:
    body = {"thinking": {"type": "disabled"}, "messages": [], "model": "m", "max_tokens": 10}
    refused = checks.refusal("anthropic", "messages", body, {}, "claude-opus-5-5")
    assert refused is not None and '"thinking.type.disabled" is not supported' in str(refused)
    assert refused.rule == "opus55-thinking-disabled" and refused.status == 400
    assert checks.refusal("anthropic", "messages", body, {}, "claude-sonnet-5") is None  # Sonnet 5 takes it


@pytest.mark.local
def test_a_job_whose_output_limit_is_too_small_records_max_tokens_outcomes(tmp_path: Any, local_bindir: str) -> None:
    """The seeds' 800-token habit on a thinking model, shrunk to make every answer a cut one: each record is a
    max_tokens outcome (not ok, not an empty answer), counted in the progress line; with room to think, ok."""
    import json

    from tests.runs import SAMPLE, finish, rows_of, start_run

    cfg = tmp_path / "cut.yaml"
    cfg.write_text(f"dataset: {SAMPLE}\nproviders: sim\ncache: false\nworkers: 1\nruns:\n"
                   "  - {name: tight, provider: anthropic, model: claude-sonnet-5-5, max_output_tokens: 120,"
                   " thinking_tokens: 0}\n"
                   "  - {name: roomy, provider: anthropic, model: claude-sonnet-5-5, max_output_tokens: 120}\n")
    code, log = finish(start_run(cfg, tmp_path / "out", "--sandbox", "local", "--limit", "3"))
    assert code == 0, log[-3000:]
    tight, roomy = rows_of(tmp_path / "out", "tight"), rows_of(tmp_path / "out", "roomy")
    assert [r["error_kind"] for r in tight] == ["max_tokens"] * 3 and all(r["usage"]["output_tokens"] for r in tight)
    assert all(r["status"] == "ok" for r in roomy)
    assert "3 errors (3 cut: turns the model did not finish)" in log
    sent = json.loads((tmp_path / "out" / "manifest.json").read_text())["requests"]
    assert sent["roomy"][0]["max_tokens"] == 120 + 4096 and sent["roomy"][0]["thinks"]
