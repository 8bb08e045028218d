"""Per-model capabilities: SDK-derived facts, retirements before the run starts, what is sent."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from runner.config import load_config
from runner.errors import ConfigError
from runner.models.capabilities import lookup, sdk_request_keys, sdk_retirements
from runner.models.preflight import check_retirements, requests_sent
from runner.models.usage import Tokens, budget_input_tokens

DEFAULT = Path(__file__).resolve().parents[2] / "configs" / "default.yaml"


def test_retirement_dates_come_from_the_installed_sdks() -> None:
    dates = sdk_retirements()
    assert dates["claude-sonnet-4-5-20250929"] == dt.date(2026, 11, 30)  # anthropic's DEPRECATED_MODELS
    assert dates["gpt-4.1"] == dates["gpt-4.1-mini"] == dt.date(2027, 1, 14)  # openai's ChatModel notes


def test_no_sampling_key_the_sdk_lacks_is_ever_sent() -> None:
    assert not {"temperature", "top_p", "top_k"} & sdk_request_keys("anthropic")
    assert lookup("claude-sonnet-4-5-20250929", "anthropic").sampling == frozenset()
    assert "temperature" in lookup("gpt-4.1", "openai").sampling
    assert "temperature" not in lookup("gpt-5.4", "openai").sampling


def test_config_overrides_prices_and_sampling(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text(DEFAULT.read_text().replace("../data", str(DEFAULT.parents[1] / "data")) +
                 "models:\n  gpt-5.4-mini: {prices: {input: 1, output: 2, cache_write: 1, cache_read: 0.1},"
                 " sampling: [temperature]}\n")
    cfg = load_config(p)
    caps = lookup("gpt-5.4-mini", "openai", cfg.model_overrides())
    assert caps.prices is not None and caps.prices.output == 2 and caps.sampling == {"temperature"}
    # the default job turns reasoning off (as the seeds' models did not reason), beside the sampling now taken
    assert requests_sent(cfg)["gpt-mini"][0]["params"] == {"temperature": 0.0, "reasoning_effort": "none"}


def test_default_job_sends_no_parameter_its_models_refuse() -> None:
    sent = requests_sent(load_config(DEFAULT))
    assert set(sent) == {"claude-sonnet", "gpt-large", "gpt-mini", "atlas"}
    off = {"anthropic": {"thinking": {"type": "between_tools"}}, "openai": {"reasoning_effort": "none"}}
    for infos in sent.values():
        for info in infos:
            # no sampling parameter (none is taken); thinking stated: off, as the seeds' models did not think
            assert info["params"] == off[info["provider"]] and info["dropped"] == ["temperature"]
            assert info["prices_known"] and not info["thinks"] and info["max_tokens"] == 800


def test_original_models_are_one_flag_away_and_retirement_is_checked_first() -> None:
    cfg = load_config(DEFAULT, {"original_models": True})
    assert [r.model for r in cfg.runs] == ["claude-sonnet-4-5-20250929", "gpt-4.1", "gpt-4.1-mini", "gpt-4.1-mini"]
    assert cfg.runs[3].teacher is not None and cfg.runs[3].teacher.model == "claude-sonnet-4-5-20250929"
    warnings = check_retirements(cfg, today=dt.date(2026, 11, 22))
    assert any("claude-sonnet-4-5-20250929 retires on 2026-11-30" in w and "claude-sonnet-5-5" in w
               for w in warnings)
    with pytest.raises(ConfigError, match=r"claude-sonnet-4-5-20250929 was retired on 2026-11-30; use "
                                          r"claude-sonnet-5-5 instead.*--allow-retired"):
        check_retirements(cfg, today=dt.date(2026, 12, 1))
    allowed = load_config(DEFAULT, {"original_models": True, "allow_retired": True})
    assert any("was retired" in w for w in check_retirements(allowed, today=dt.date(2026, 12, 1)))
    assert check_retirements(load_config(DEFAULT), today=dt.date(2026, 12, 1)) == []  # the current models


def test_input_budget_follows_each_providers_rules() -> None:
    u = Tokens(input_tokens=100, output_tokens=5, cache_write_tokens=300, cache_read_tokens=5000)
    assert budget_input_tokens("anthropic", u) == 400  # cache reads do not count against ITPM
    assert budget_input_tokens("openai", u) == 5100  # every prompt token counts


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_request_keys_read_from_the_sdk_source_equal_the_imported_types(provider: str) -> None:
    """Read without importing the SDK (a second of every start): the same keys its type defines."""
    from runner.models.capabilities import sdk_request_keys, sdk_request_keys_imported

    assert sdk_request_keys(provider) == sdk_request_keys_imported(provider) | {"stream"}
