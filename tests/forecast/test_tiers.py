"""The providers' published tiers, read from runner/budget/published.yaml."""

from __future__ import annotations

import pytest

from runner.forecast import tiers


def test_a_model_row_gives_its_limits_and_says_where_they_were_read() -> None:
    found = tiers.limits("anthropic", "start", "claude-sonnet-5-5")
    assert found is not None
    lim, where = found
    assert (lim.rpm, lim.itpm, lim.otpm) == (1000, 2_000_000, 400_000)
    assert where.startswith("anthropic start: claude-sonnet-5-5")


def test_a_pooled_row_covers_each_model_it_names_dated_ids_too() -> None:
    found = tiers.limits("anthropic", "start", "claude-sonnet-4-5-20250929")
    assert found is not None and "pool" in found[1]


def test_openai_tokens_per_minute_limit_input() -> None:
    found = tiers.limits("openai", "tier1", "gpt-5.4-mini")
    assert found is not None
    assert (found[0].rpm, found[0].itpm, found[0].otpm) == (500, 500_000, None)


def test_no_published_row_is_none_and_an_unknown_tier_names_the_known_ones() -> None:
    assert tiers.limits("anthropic", "start", "claude-nonexistent-9") is None
    with pytest.raises(KeyError, match="start"):
        tiers.limits("anthropic", "platinum", "claude-sonnet-5-5")
    assert "tier4" in tiers.names("openai")
