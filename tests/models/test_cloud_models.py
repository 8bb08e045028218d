"""A cloud's model id looked up as the first-party model it names (runner/models/cloud_models.py), at the
first-party prices, said so; its own `models:` entry wins."""

from __future__ import annotations

import pytest

from runner.models.capabilities import BUILTIN, lookup
from runner.models.cloud_models import first_party


@pytest.mark.parametrize(("provider", "model", "named"), [
    ("bedrock", "anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5-20250929"),
    ("bedrock", "us.anthropic.claude-sonnet-5-5", "claude-sonnet-5-5"),
    ("bedrock", "global.anthropic.claude-opus-4-6-v1", "claude-opus-4-6"),
    ("bedrock", "arn:aws:bedrock:us-east-1:123456789012:inference-profile/eu.anthropic.claude-sonnet-4-6",
     "claude-sonnet-4-6"),
    ("bedrock", "meta.llama3-70b-instruct-v1:0", None),
    ("vertex", "claude-haiku-4-5@20251001", "claude-haiku-4-5-20251001"),
    ("vertex", "claude-sonnet-5-5", "claude-sonnet-5-5"),
    ("vertex", "gemini-2.5-pro", None),
    ("azure", "gpt-5.4", "gpt-5.4"),
])
def test_each_clouds_id_names_its_first_party_model(provider: str, model: str, named: str | None) -> None:
    assert first_party(provider, model) == named


def test_a_cloud_model_has_the_first_party_capabilities_and_prices_stated_as_such() -> None:
    caps = lookup("us.anthropic.claude-sonnet-5-5", "bedrock")
    first = BUILTIN["claude-sonnet-5-5"]
    assert caps.known and caps.provider == "anthropic"  # the format it speaks: thinking, caching follow it
    assert (caps.prices, caps.thinking, caps.max_output_tokens) == (first.prices, first.thinking,
                                                                   first.max_output_tokens)
    assert caps.price_source is not None and caps.price_source.startswith("Anthropic's first-party prices")
    assert str(lookup("gpt-5.4", "azure").price_source).startswith("OpenAI's first-party prices")
    assert lookup("claude-sonnet-5-5", "anthropic").price_source is None
    unknown = lookup("us.anthropic.claude-nonesuch", "bedrock")
    assert not unknown.known and unknown.prices is None and unknown.price_source is None


def test_the_configs_models_entry_for_the_cloud_id_gives_the_clouds_own_prices() -> None:
    prices = {"input": 3.3, "output": 16.5, "cache_write": 4.125, "cache_read": 0.33}
    model = "eu.anthropic.claude-sonnet-5-5"
    caps = lookup(model, "bedrock", {model: {"prices": prices}})
    assert caps.prices is not None and caps.prices.input == 3.3


def test_a_cloud_keeps_its_own_retirement_schedule_not_the_first_party_apis() -> None:
    assert lookup("claude-sonnet-4-5-20250929", "anthropic").retires is not None  # the SDK's deprecation data
    assert lookup("claude-sonnet-4-5@20250929", "vertex").retires is None
