"""Per-model capabilities: SDK-derived facts, retirements before the run starts, what is sent."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from runner.config import load_config
from runner.errors import ConfigError
from runner.models import capabilities
from runner.models.capabilities import lookup, sdk_request_keys, sdk_retirements
from runner.models.preflight import check_retirements, requests_sent
from runner.models.usage import Tokens, budget_input_tokens

DEFAULT = Path(__file__).resolve().parents[2] / "configs" / "default.yaml"


def test_retirement_dates_are_read_from_the_sdks_own_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each SDK's deprecation data as its file writes it (anthropic's DEPRECATED_MODELS, openai's ChatModel
    notes), read from stand-ins of those files: what a given SDK release lists is its own business."""
    files = {
        ("anthropic", "_data", "deprecated_models.py"):
            'from typing import Dict\nDEPRECATED_MODELS: Dict[str, str] = {\n'
            '    "claude-x-1": "November 30th, 2026",\n    "claude-y-2": "January 2nd, 2027",\n}\n',
        ("openai", "types", "shared", "chat_model.py"):
            'ChatModel = Literal[\n  "gpt-a",\n  "gpt-a-mini",\n]\n"""\n  "gpt-a",\n  "gpt-a-mini":\n'
            '  Announced shutdown date: 2027-01-14\n"""\n',
    }
    monkeypatch.setattr(capabilities, "_sdk_source", lambda package, *parts: files.get((package, *parts)))
    capabilities.sdk_retirements.cache_clear()
    try:
        assert capabilities.sdk_retirements() == {"claude-x-1": dt.date(2026, 11, 30),
                                                  "claude-y-2": dt.date(2027, 1, 2),
                                                  "gpt-a": dt.date(2027, 1, 14), "gpt-a-mini": dt.date(2027, 1, 14)}
    finally:
        capabilities.sdk_retirements.cache_clear()


def test_the_installed_sdks_dates_are_read_and_win_over_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    dates = sdk_retirements()  # whatever this release lists: each date a date, each id a string
    assert all(isinstance(k, str) and isinstance(v, dt.date) for k, v in dates.items())
    monkeypatch.setattr(capabilities, "sdk_retirements", lambda: {"gpt-4.1": dt.date(2027, 6, 1)})
    assert lookup("gpt-4.1", "openai").retires == dt.date(2027, 6, 1)


def test_the_seeds_models_keep_their_dates_once_an_sdk_drops_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """anthropic 2.15.0 dropped claude-sonnet-4-5-20250929 from DEPRECATED_MODELS once it retired: the
    table's own date (from the providers' pages) still stops a run that names it."""
    monkeypatch.setattr(capabilities, "sdk_retirements", dict)
    assert lookup("claude-sonnet-4-5-20250929", "anthropic").retires == dt.date(2026, 11, 30)
    assert lookup("claude-sonnet-4-5", "anthropic").retires == dt.date(2026, 11, 30)
    assert lookup("gpt-4.1", "openai").retires == lookup("gpt-4.1-mini", "openai").retires == dt.date(2027, 1, 14)


def test_the_day_is_the_machines_unless_runner_today_says_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNNER_TODAY", "2027-02-03")
    assert capabilities.today() == dt.date(2027, 2, 3)
    monkeypatch.setenv("RUNNER_TODAY", "tomorrow")
    with pytest.raises(ConfigError, match="RUNNER_TODAY='tomorrow' is not a date"):
        capabilities.today()
    monkeypatch.delenv("RUNNER_TODAY")
    assert capabilities.today() == dt.date.today()  # the one place the suite reads the calendar


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
    # today's state (the suite's day): the GPT-4.1 runs alone still start, with a warning naming the day
    full = load_config(DEFAULT, {"original_models": True})
    gpt = full.model_copy(update={"runs": [r for r in full.runs if r.name in ("gpt-large", "gpt-mini")]})
    assert check_retirements(gpt, today=dt.date(2026, 12, 1)) == [
        "gpt-4.1 retires on 2027-01-14 (in 44 days); use gpt-5.4 instead",
        "gpt-4.1-mini retires on 2027-01-14 (in 44 days); use gpt-5.4-mini instead"]
    with pytest.raises(ConfigError, match=r"gpt-4.1 was retired on 2027-01-14"):
        check_retirements(gpt, today=dt.date(2027, 1, 14))


def test_input_budget_follows_each_providers_rules() -> None:
    u = Tokens(input_tokens=100, output_tokens=5, cache_write_tokens=300, cache_read_tokens=5000)
    assert budget_input_tokens("anthropic", u) == 400  # cache reads do not count against ITPM
    assert budget_input_tokens("openai", u) == 5100  # every prompt token counts


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_request_keys_read_from_the_sdk_source_equal_the_imported_types(provider: str) -> None:
    """Read without importing the SDK (a second of every start): the same keys its type defines."""
    from runner.models.capabilities import sdk_request_keys, sdk_request_keys_imported

    assert sdk_request_keys(provider) == sdk_request_keys_imported(provider) | {"stream"}
