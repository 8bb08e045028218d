"""Capabilities from the provider: its models endpoint, asked through the official SDKs, wins over the table."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from runner.config import Config, SimSettings
from runner.errors import ConfigError
from runner.models import capabilities, live
from runner.models.preflight import catalogue, requests_sent
from runner.models.sim.process import SimServer
from runner.models.sim.rulebook import book


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with SimServer(SimSettings()) as s:
        yield s


def test_anthropics_model_info_settles_thinking_efforts_limits_and_batch() -> None:
    info = book("anthropic").model_info("claude-sonnet-5-5")
    assert info is not None
    told = live.from_anthropic(info)
    assert told["thinking"] == frozenset({"adaptive", "between_tools"}) and told["can_disable_thinking"] is False
    assert told["efforts"] == ("low", "medium", "high", "xhigh", "max") and told["batch"] is True
    assert told["max_output_tokens"] == 128_000 and told["retires"] is None
    opus = live.from_anthropic(book("anthropic").model_info("claude-opus-5-5") or {})
    assert opus["thinking"] == frozenset({"adaptive"}) and opus["can_disable_thinking"] is False


def test_the_provider_wins_over_the_table_and_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # the table as it stood before 2026-11-26: Sonnet 5.5 could turn thinking off with `disabled`
    old = dataclasses.replace(capabilities.BUILTIN["claude-sonnet-5-5"], thinking=frozenset({"adaptive"}),
                              can_disable_thinking=True)
    monkeypatch.setitem(capabilities.BUILTIN, "claude-sonnet-5-5", old)
    models = [("anthropic", "claude-sonnet-5-5")]
    cat = live.resolve(models, live.published(models))
    caps = cat.of("anthropic", "claude-sonnet-5-5")
    assert caps.source == "provider" and not caps.can_disable_thinking and "between_tools" in caps.thinking
    assert len(cat.notes) == 1 and cat.notes[0].startswith("claude-sonnet-5-5: anthropic's models endpoint says")
    assert "can_disable_thinking False (the table: True)" in cat.notes[0] and "using the provider's" in cat.notes[0]
    cfg = Config(dataset="x.jsonl", runs=[{"name": "s", "provider": "anthropic", "model": "claude-sonnet-5-5",
                                           "thinking": "off"}])
    assert requests_sent(cfg, cat)["s"][0]["params"] == {"thinking": {"type": "between_tools"}}
    assert requests_sent(cfg, live.resolve(models, {}))["s"][0]["params"] == {"thinking": {"type": "disabled"}}


def test_a_configs_models_entry_wins_over_both() -> None:
    models = [("anthropic", "claude-sonnet-5-5")]
    cat = live.resolve(models, live.published(models), {"claude-sonnet-5-5": {"max_output_tokens": 1000}})
    assert cat.of("anthropic", "claude-sonnet-5-5").max_output_tokens == 1000


@pytest.mark.parametrize("provider,model", [("anthropic", "claude-sonnet-5-5"), ("openai", "gpt-5.4")])
def test_the_sdks_models_api_against_the_simulators_endpoint(sim: SimServer, provider: str, model: str) -> None:
    answers = live.ask([(provider, model), (provider, "no-such-model")],
                       base_urls={"anthropic": sim.url, "openai": f"{sim.url}/v1"},
                       keys={"anthropic": "k", "openai": "k"})
    assert answers[(provider, model)].told == live.published([(provider, model)])[(provider, model)].told
    assert answers[(provider, "no-such-model")].missing


def test_an_unreachable_endpoint_leaves_the_table_and_says_so() -> None:
    answers = live.ask([("anthropic", "claude-sonnet-5-5")], base_urls={"anthropic": "http://127.0.0.1:9"},
                       keys={"anthropic": "k"})
    a = answers[("anthropic", "claude-sonnet-5-5")]
    assert a.error and not a.told
    cat = live.resolve([("anthropic", "claude-sonnet-5-5")], answers)
    assert cat.of("anthropic", "claude-sonnet-5-5").source == "table"


def test_a_model_the_provider_does_not_have_stops_the_run_before_it_starts() -> None:
    cfg = Config(dataset="x.jsonl", runs=[{"name": "s", "provider": "anthropic", "model": "claude-sonnet-9"}])
    with pytest.raises(ConfigError, match=r"anthropic has no model claude-sonnet-9 \(the simulator's models endpoint"):
        catalogue(cfg)
