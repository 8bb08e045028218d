"""The clouds in the config (runner/config.py, runner/clouds.py): a run's provider may be bedrock, vertex or
azure; its settings from its own block, the config's, then the variables each cloud's SDK reads; what is
missing named in one line; each cloud a budget of its own unless a budget covers it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runner.budget.ratelimit import budget_spec, limiter_key
from runner.clouds import (
    AzureTarget,
    BedrockTarget,
    VertexTarget,
    check_credentials,
    cloud_endpoints,
    clouds_used,
    target,
)
from runner.config import CLOUD_ENV, Config, load_config, resolve_mode
from runner.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _no_cloud_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*CLOUD_ENV, "ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def _cfg(*runs: dict[str, Any], **extra: Any) -> Config:
    return Config.model_validate({"dataset": "x.jsonl", "runs": list(runs), **extra})


BEDROCK = {"name": "b", "provider": "bedrock", "model": "us.anthropic.claude-sonnet-5-5"}
VERTEX = {"name": "v", "provider": "vertex", "model": "claude-sonnet-4-5@20250929"}
AZURE = {"name": "a", "provider": "azure", "model": "gpt-5.4"}


def test_the_clouds_config_loads_with_a_run_per_cloud() -> None:
    cfg = load_config(ROOT / "configs" / "clouds.yaml")
    assert [(r.provider, r.model) for r in cfg.runs] == [("bedrock", "us.anthropic.claude-sonnet-5-5"),
                                                         ("vertex", "claude-sonnet-4-5@20250929"),
                                                         ("azure", "gpt-5.4")]
    assert clouds_used(cfg) == {"bedrock", "vertex", "azure"}


def test_a_runs_own_block_wins_over_the_configs_field_by_field_and_the_sdk_variables_fill_the_rest(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("ANTHROPIC_VERTEX_PROJECT_ID", "from-env")
    monkeypatch.setenv("OPENAI_API_VERSION", "2024-06-01")
    cfg = _cfg({**BEDROCK, "bedrock": {"timeout_seconds": 9}},
               {**VERTEX, "vertex": {"region": "europe-west1"}}, {**AZURE, "azure": {"deployment": "my-gpt"}},
               bedrock={"profile": "team"}, vertex={"region": "us-east5"},
               azure={"endpoint": "https://r.openai.azure.com/"})
    b, v, a = (target(cfg, r.model_ref(), mode="real") for r in cfg.runs)
    assert b == BedrockTarget("eu-west-1", "team", None, 9.0)
    assert b.endpoint() == "https://bedrock-runtime.eu-west-1.amazonaws.com"
    assert v == VertexTarget("from-env", "europe-west1", None, 60.0)
    assert v.endpoint() == "https://europe-west1-aiplatform.googleapis.com/v1"
    assert VertexTarget("p", "global", None, 1).endpoint() == "https://aiplatform.googleapis.com/v1"
    assert a == AzureTarget("https://r.openai.azure.com", "2024-06-01", "my-gpt", "my-gpt", 60.0)


def test_what_a_call_cannot_go_without_is_one_line_naming_the_setting_the_variable_and_who_needs_it() -> None:
    cfg = _cfg(BEDROCK, VERTEX, AZURE, vertex={"project": "p"})
    refs = [r.model_ref() for r in cfg.runs]
    said = (r"^bedrock.region is not set, nor AWS_REGION or AWS_DEFAULT_REGION in the environment "
            r"\(needed by run b\)$")
    with pytest.raises(ConfigError, match=said):
        target(cfg, refs[0], mode="sim", who="run b")
    with pytest.raises(ConfigError, match=r"vertex.region is not set, nor CLOUD_ML_REGION"):
        target(cfg, refs[1], mode="sim")
    with pytest.raises(ConfigError, match=r"azure.endpoint is not set, nor AZURE_OPENAI_ENDPOINT"):
        target(cfg, refs[2], mode="real")
    # on the simulator its address stands in for the resource; the API version is still the request's
    with pytest.raises(ConfigError, match=r"azure.api_version is not set, nor OPENAI_API_VERSION"):
        target(cfg, refs[2], mode="sim")


def test_a_run_start_names_missing_settings_before_anything_starts() -> None:
    from runner.models.preflight import check_keys

    with pytest.raises(ConfigError, match=r"vertex.project is not set.*needed by run v \(agent claude-son"):
        check_keys(_cfg(VERTEX, providers_mode="sim"))


def test_on_the_real_clouds_missing_credentials_are_named_with_the_variables_that_would_hold_them() -> None:
    t = target(_cfg(AZURE, azure={"endpoint": "https://r.openai.azure.com", "api_version": "2024-10-21"}),
               _cfg(AZURE).runs[0].model_ref(), mode="real")
    with pytest.raises(ConfigError, match=r"no azure credentials: set AZURE_OPENAI_API_KEY or AZURE_OPEN"):
        check_credentials("azure", t, "run a")


def test_bad_cloud_blocks_are_refused_with_their_field() -> None:
    with pytest.raises(ValueError, match="bedrock: settings for bedrock, but the provider is anthropic"):
        _cfg({"name": "x", "provider": "anthropic", "model": "claude-sonnet-5-5", "bedrock": {"region": "r"}})
    # the job-wide batch mode batches every cloud's runs: each has a batch service
    cfg = _cfg(BEDROCK, AZURE, VERTEX, batch={"enabled": True})
    assert cfg.batch_runs() == {"a", "b", "v"}


def test_a_batched_bedrock_run_names_the_bucket_and_role_its_jobs_need(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bedrock batch inference reads and writes S3 files as a service role: on the real cloud a batched run
    without them is one line at start; on the simulator its account's stand-ins do."""
    from runner.gateway.settings import gateway_settings

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIA")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    batched = _cfg({**BEDROCK, "batch": True}, bedrock={"region": "us-east-1"})
    with pytest.raises(ConfigError, match=r"^bedrock.batch_s3_uri and bedrock.batch_role_arn: not set, and run b "
                                          r"sends its Bedrock calls in batches"):
        gateway_settings(batched)
    b = gateway_settings(batched, sim_url="http://127.0.0.1:9").bedrock_batch
    assert b is not None and b.s3 == "http://127.0.0.1:9/s3" and b.prefix.endswith("/")
    mine = _cfg({**BEDROCK, "batch": True}, bedrock={"region": "eu-west-1", "batch_s3_uri": "s3://evals/runs",
                                                     "batch_role_arn": "arn:aws:iam::123456789012:role/Batch"})
    b = gateway_settings(mine).bedrock_batch
    assert b is not None and (b.control, b.s3, b.bucket, b.prefix) == (
        "https://bedrock.eu-west-1.amazonaws.com", "https://s3.eu-west-1.amazonaws.com", "evals", "runs/")
    with pytest.raises(ValueError, match="batch_s3_uri"):
        _cfg(BEDROCK, bedrock={"region": "us-east-1", "batch_s3_uri": "my-bucket/prefix"})


def test_a_batched_vertex_run_names_the_bucket_its_jobs_need() -> None:
    """Vertex AI batch prediction reads and writes Cloud Storage files: on the real cloud a batched run without
    a bucket is one line at start; on the simulator its stand-in does, in the configured project and
    location."""
    from runner.gateway.settings import gateway_settings

    batched = _cfg({**VERTEX, "batch": True}, vertex={"project": "p", "region": "us-east5"})
    with pytest.raises(ConfigError, match=r"^vertex.batch_gcs_uri: not set, and run v sends its Vertex AI calls"):
        gateway_settings(batched)
    v = gateway_settings(batched, sim_url="http://127.0.0.1:9").vertex_batch
    assert v is not None and (v.control, v.storage) == (
        "http://127.0.0.1:9/v1/projects/p/locations/us-east5", "http://127.0.0.1:9")
    mine = _cfg({**VERTEX, "batch": True}, vertex={"project": "p", "region": "europe-west1",
                                                   "batch_gcs_uri": "gs://evals/runs"})
    v = gateway_settings(mine).vertex_batch
    assert v is not None and (v.control, v.storage, v.bucket, v.prefix) == (
        "https://europe-west1-aiplatform.googleapis.com/v1/projects/p/locations/europe-west1",
        "https://storage.googleapis.com", "evals", "runs/")
    with pytest.raises(ValueError, match="batch_gcs_uri"):
        _cfg(VERTEX, vertex={"region": "us-east5", "batch_gcs_uri": "evals/runs"})


def test_auto_runs_on_a_real_cloud_only_when_its_credentials_are_set(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _cfg(BEDROCK, AZURE)
    assert resolve_mode(cfg) == "sim"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIA")
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "k")
    assert resolve_mode(cfg) == "sim"  # an access key id without its secret is no credential
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    assert resolve_mode(cfg) == "real"


def test_each_cloud_is_a_budget_of_its_own_unless_a_budget_covers_it() -> None:
    first_party = {"name": "f", "provider": "anthropic", "model": "claude-sonnet-5-5"}
    apart = _cfg(first_party, BEDROCK, rate_limits={"anthropic": {"rpm": 50}, "bedrock": {"rpm": 20}})
    assert limiter_key(apart, "bedrock", BEDROCK["model"]) == "bedrock"
    assert set(budget_spec(apart)[0]) == {"anthropic", "bedrock"}
    shared = _cfg(first_party, BEDROCK, rate_limits={"anthropic": {"rpm": 50, "covers": ["bedrock"]}})
    assert limiter_key(shared, "bedrock", BEDROCK["model"]) == "anthropic"
    assert set(budget_spec(shared)[0]) == {"anthropic"}
    one_model = _cfg(first_party, BEDROCK, rate_limits={
        "anthropic/claude-sonnet-5-5": {"rpm": 50, "covers": [f"bedrock/{BEDROCK['model']}"]}})
    assert limiter_key(one_model, "bedrock", BEDROCK["model"]) == "anthropic/claude-sonnet-5-5"
    with pytest.raises(ValueError, match="covers: bedrock has a budget of its own"):
        _cfg(BEDROCK, rate_limits={"anthropic": {"covers": ["bedrock"]}, "bedrock": {"rpm": 1}})
    with pytest.raises(ValueError, match="bedrock is covered by both"):
        _cfg(BEDROCK, rate_limits={"anthropic": {"covers": ["bedrock"]}, "openai": {"covers": ["bedrock"]}})


def test_the_manifest_names_each_clouds_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOUD_ML_REGION", "global")
    cfg = _cfg(BEDROCK, {**BEDROCK, "name": "b2", "bedrock": {"region": "eu-west-3"}}, VERTEX,
               bedrock={"region": "us-east-1"}, vertex={"project": "p"})
    assert cloud_endpoints(cfg, None) == {"bedrock": "https://bedrock-runtime.us-east-1.amazonaws.com",
                                          "bedrock (b2)": "https://bedrock-runtime.eu-west-3.amazonaws.com",
                                          "vertex": "https://aiplatform.googleapis.com/v1"}
    assert cloud_endpoints(cfg, "http://127.0.0.1:9") == {"bedrock": "http://127.0.0.1:9",
                                                          "vertex": "http://127.0.0.1:9/v1"}


def test_configs_without_clouds_fingerprint_as_before() -> None:
    """The cloud blocks of a run are left out of its dump when unset: an output made before them resumes."""
    cfg = _cfg({"name": "x", "provider": "anthropic", "model": "claude-sonnet-5-5"})
    assert "bedrock" not in cfg.runs[0].model_dump(mode="json")
    assert "azure" in _cfg({**AZURE, "azure": {"deployment": "d"}}).runs[0].model_dump(mode="json")


def test_a_missing_extra_is_named_with_its_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from runner.clouds import check_extras

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "botocore" else real(name, *a))
    with pytest.raises(ConfigError, match=r"bedrock needs botocore \(needed by run b\): pip install "
                                          r"'pgsandbox-runner\[clouds\]'"):
        check_extras("bedrock", "run b", needs_google_auth=False)
    check_extras("vertex", "run v", needs_google_auth=False)  # a token in the environment: no google-auth
    check_extras("azure", "run a", needs_google_auth=False)
