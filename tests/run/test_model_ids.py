"""An unknown model id stops a run on the simulator, with the nearest known one; on the real APIs it warns."""

from __future__ import annotations

import pytest

from runner.config import Config
from runner.errors import ConfigError
from runner.run.model_ids import check_model_ids


def _cfg(model: str, teacher: str = "claude-sonnet-5-5", **extra: object) -> Config:
    return Config.model_validate({"dataset": "x.jsonl", "providers_mode": "sim", **extra, "runs": [
        {"name": "mini", "provider": "openai", "model": model},
        {"name": "atlas", "agent": "atlas", "provider": "openai", "model": "gpt-5.4-mini",
         "teacher": {"provider": "anthropic", "model": teacher}}]})


def test_a_typo_stops_a_simulated_run_and_names_the_model_it_meant() -> None:
    """It only warned "no price known for gpt-5.4-mimi", and the simulator played it."""
    with pytest.raises(ConfigError) as info:
        check_model_ids(_cfg("gpt-5.4-mimi", teacher="claude-sonet-5-5"), "sim")
    said = str(info.value)
    assert "runs.mini: unknown model 'gpt-5.4-mimi' (did you mean gpt-5.4-mini?)" in said
    assert "runs.atlas.teacher: unknown model 'claude-sonet-5-5' (did you mean claude-sonnet-5-5?)" in said


def test_known_ids_pass_and_a_model_the_config_declares_is_known() -> None:
    assert check_model_ids(_cfg("gpt-5.4-mini"), "sim") == []
    declared = _cfg("my-finetune", models={"my-finetune": {"context_tokens": 128_000}})
    assert check_model_ids(declared, "sim") == []


def test_on_the_real_apis_an_unknown_id_is_a_warning_the_provider_settles() -> None:
    (warning,) = check_model_ids(_cfg("gpt-5.4-mimi"), "real")
    assert "did you mean gpt-5.4-mini?" in warning and "the provider will say whether it exists" in warning


def test_a_clouds_id_is_known_by_the_model_it_names_and_a_typo_in_it_stops_a_simulated_run() -> None:
    def cloud(model: str) -> Config:
        return Config.model_validate({"dataset": "x.jsonl", "providers_mode": "sim",
                                      "runs": [{"name": "b", "provider": "bedrock", "model": model}]})

    assert check_model_ids(cloud("us.anthropic.claude-sonnet-5-5"), "sim") == []
    assert check_model_ids(cloud("anthropic.claude-sonnet-4-5-20250929-v1:0"), "sim") == []
    with pytest.raises(ConfigError, match=r"runs.b: unknown model 'us.anthropic.claude-sonet-5-5'"):
        check_model_ids(cloud("us.anthropic.claude-sonet-5-5"), "sim")
