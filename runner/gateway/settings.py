"""What a gateway process needs, resolved from the config once by whoever starts it (a run, `runner gateway`,
the pytest plugin) and handed to it whole: never the config itself, which it would validate again (a
`--runs` that left out the config's compare_to run crashed a gateway that did).

Where calls go is decided here as the official SDKs decide it: the config's base URL, else the SDK's own
environment variable (ANTHROPIC_BASE_URL, OPENAI_BASE_URL), else the provider's public address. A cloud's
calls go to one place (runner/clouds.py gateway_target): the Bedrock runtime of the configured region, the
Vertex AI host of the configured location, the configured Azure OpenAI resource. Proxies
(HTTPS_PROXY, HTTP_PROXY, NO_PROXY) and a custom CA bundle (SSL_CERT_FILE) are read from the environment by
the gateway's HTTP client at start, as the SDKs' client reads them.

The token callers must present is not among these settings: it travels in the gateway process's
environment (RUNNER_GATEWAY_TOKEN), never on a command line another local user could read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from runner.clouds import (
    AzureTarget,
    BedrockTarget,
    VertexTarget,
    azure_deployments,
    gateway_target,
    target,
)
from runner.config import (
    CLOUDS,
    PROVIDER_BASE_URLS,
    BatchSettings,
    Config,
    Limits,
    RetrySettings,
    sdk_base_url,
)
from runner.errors import ConfigError

TOKEN_ENV = "RUNNER_GATEWAY_TOKEN"  # the token a gateway admits, in its own environment
SDK_BASE_URL_ENV = {"anthropic": "ANTHROPIC_BASE_URL", "openai": "OPENAI_BASE_URL"}


class BedrockBatch(BaseModel):
    """Bedrock batch inference: the control plane, S3 (path-style), the bucket and prefix of its files, the
    role its jobs run as."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    control: str
    s3: str
    bucket: str
    prefix: str  # "" or ending in /
    role_arn: str


# On the simulator, where a config names none: a bucket and role of the simulator's account.
SIM_BATCH_S3_URI, SIM_BATCH_ROLE = "s3://pgsr-batches/runner/", "arn:aws:iam::123456789012:role/pgsr-batch"


class VertexBatch(BaseModel):
    """Vertex AI batch prediction: the location its jobs are made in, Cloud Storage's JSON API, the bucket and
    prefix of their files."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    control: str  # https://{region}-aiplatform.googleapis.com/v1/projects/{project}/locations/{region}
    storage: str  # https://storage.googleapis.com
    bucket: str
    prefix: str  # "" or ending in /


# On the simulator, where a config names none: a bucket, project and location of the simulator's.
SIM_BATCH_GCS_URI, SIM_VERTEX_PROJECT, SIM_VERTEX_REGION = "gs://pgsr-batches/runner/", "pgsr-sim", "us-east5"


class GatewaySettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    upstreams: dict[str, str] = Field(default_factory=lambda: dict(PROVIDER_BASE_URLS))
    retry: RetrySettings = Field(default_factory=RetrySettings)
    batch: BatchSettings | None = None  # batch mode for the runs in batch_runs ("*": every run)
    batch_runs: frozenset[str] = frozenset()
    journal: str | None = None  # where batch mode keeps its batches (an output directory's batches.jsonl)
    limits: dict[str, Limits] = Field(default_factory=dict)  # the shared budget, per key
    adaptive: bool = False  # an adaptive concurrency window per key (runner/budget/ratelimit.py)
    limit_keys: dict[str, str] = Field(default_factory=dict)  # "provider/model" or "provider" -> budget key
    sim_models: dict[str, str] | None = None  # simulator mode: model -> the simulator model that plays it
    model_overrides: dict[str, dict[str, object]] = Field(default_factory=dict)  # the config's `models:`
    timeout_seconds: float = 600.0
    cache_dir: str | None = None  # the response cache (None: none)
    gates: str | None = None  # the run's first-call gates file (runner/budget/gates.py) ...
    gate_keys: list[str] = Field(default_factory=list)  # ... and its keys
    spend: str | None = None  # the run's spending caps file (runner/budget/spend.py) ...
    spend_runs: list[str] = Field(default_factory=list)  # ... and its runs
    bedrock_region: str | None = None  # what Bedrock calls are signed for (SigV4's credential scope)
    bedrock_profile: str | None = None  # the AWS profile whose credentials sign them (None: the SDK's chain)
    bedrock_batch: BedrockBatch | None = None  # where Bedrock batch inference goes (batch mode)
    vertex_batch: VertexBatch | None = None  # where Vertex AI batch prediction goes (batch mode)
    deployments: dict[str, str] = Field(default_factory=dict)  # Azure: deployment -> the model it serves
    # Azure: deployment ("*": any) -> the Global-Batch deployment its batched calls name
    batch_deployments: dict[str, str] = Field(default_factory=dict)


def upstreams(cfg: Config | None, sim_url: str | None) -> dict[str, str]:
    """Each provider's SDK base URL: the simulator; else the config's, the SDK's environment variable, the
    provider's own. A cloud's is the root its paths start from (Vertex AI's paths carry their /v1)."""
    if sim_url:
        served = {p: sdk_base_url(sim_url, p) for p in PROVIDER_BASE_URLS}
        return served | {c: sim_url.rstrip("/") for c in CLOUDS}
    first = {
        p: (getattr(cfg, p).base_url if cfg is not None else None)
        or os.environ.get(SDK_BASE_URL_ENV[p])
        or url
        for p, url in PROVIDER_BASE_URLS.items()
    }
    clouds = {
        c: t.endpoint().rstrip("/").removesuffix("/v1")
        for c in CLOUDS
        if cfg is not None and (t := gateway_target(cfg, c, "real")) is not None and t.endpoint()
    }
    return first | clouds


def _cloud_settings(cfg: Config, sim_url: str | None) -> dict[str, Any]:
    """What the gateway needs of the clouds: the region and profile Bedrock calls are signed with, and the
    Azure deployments the runs name (each priced as the model it serves, batched through its Global-Batch
    deployment)."""
    mode: Literal["real", "sim"] = "sim" if sim_url else "real"
    bedrock = gateway_target(cfg, "bedrock", mode)
    region = bedrock.region if isinstance(bedrock, BedrockTarget) else None
    top = cfg.azure  # a user's harness: the config's batch deployment for its deployment (unnamed: for any)
    batch: dict[str, str] = {top.deployment or "*": top.batch_deployment} if top.batch_deployment else {}
    for r in cfg.model_runs():
        for ref in (r.model_ref(), r.teacher):
            if (
                ref is not None
                and ref.provider == "azure"
                and isinstance(t := target(cfg, ref, mode=mode), AzureTarget)
            ):
                batch[t.deployment] = t.batch_deployment
    # on the simulator a stand-in region will do: it checks a signature with the scope's own region
    return {
        "bedrock_region": region or ("us-east-1" if sim_url else None),
        "bedrock_profile": bedrock.profile if isinstance(bedrock, BedrockTarget) else None,
        "bedrock_batch": _bedrock_batch(cfg, bedrock, sim_url),
        "vertex_batch": _vertex_batch(cfg, gateway_target(cfg, "vertex", mode), sim_url),
        "deployments": azure_deployments(cfg),
        "batch_deployments": batch,
    }


def _bucket_and_prefix(uri: str) -> tuple[str, str]:
    """`s3://bucket/prefix` or `gs://bucket/prefix` as (bucket, "" or a prefix ending in /)."""
    bucket, _, prefix = uri.partition("://")[2].partition("/")
    return bucket, prefix if not prefix or prefix.endswith("/") else prefix + "/"


def _vertex_batch(cfg: Config, vertex: Any, sim_url: str | None) -> VertexBatch | None:
    """Where Vertex AI batch prediction goes, when a run batches Vertex calls (or the config's block says
    where); a batched Vertex run without its bucket is a ConfigError naming it."""
    batched = [r.name for r in cfg.model_runs() if r.name in cfg.batch_runs() and r.provider == "vertex"]
    t = vertex if isinstance(vertex, VertexTarget) else None
    uri = (t.batch_gcs_uri if t else None) or (SIM_BATCH_GCS_URI if sim_url else None)
    if uri is None:
        if batched:
            raise ConfigError(
                f"vertex.batch_gcs_uri: not set, and run {batched[0]} sends its Vertex AI calls in batches "
                "(batch prediction reads and writes Cloud Storage files)"
            )
        return None
    bucket, prefix = _bucket_and_prefix(uri)
    if sim_url:
        root = sim_url.rstrip("/")
        project, region = (t.project, t.region) if t else (SIM_VERTEX_PROJECT, SIM_VERTEX_REGION)
        control = f"{root}/v1/projects/{project}/locations/{region}"
        return VertexBatch(control=control, storage=root, bucket=bucket, prefix=prefix)
    assert t is not None
    return VertexBatch(control=t.control(), storage=t.storage(), bucket=bucket, prefix=prefix)


def _bedrock_batch(cfg: Config, bedrock: Any, sim_url: str | None) -> BedrockBatch | None:
    """Where Bedrock batch inference goes, when a run batches Bedrock calls
    (or the config's block says where); a batched Bedrock run without its bucket or role is a ConfigError
    naming them."""
    batched = [r.name for r in cfg.model_runs() if r.name in cfg.batch_runs() and r.provider == "bedrock"]
    t = bedrock if isinstance(bedrock, BedrockTarget) else None
    uri = (t.batch_s3_uri if t else None) or (SIM_BATCH_S3_URI if sim_url else None)
    role = (t.batch_role_arn if t else None) or (SIM_BATCH_ROLE if sim_url else None)
    if uri is None or role is None:
        if batched:
            missing = " and ".join(
                n for n, v in (("bedrock.batch_s3_uri", uri), ("bedrock.batch_role_arn", role)) if v is None
            )
            raise ConfigError(
                f"{missing}: not set, and run {batched[0]} sends its Bedrock calls in batches "
                "(batch inference reads and writes S3 files, as a service role)"
            )
        return None
    bucket, prefix = _bucket_and_prefix(uri)
    if sim_url:
        return BedrockBatch(
            control=sim_url.rstrip("/"),
            s3=f"{sim_url.rstrip('/')}/s3",
            bucket=bucket,
            prefix=prefix,
            role_arn=role,
        )
    assert t is not None
    return BedrockBatch(control=t.control(), s3=t.s3(), bucket=bucket, prefix=prefix, role_arn=role)


def gateway_settings(
    cfg: Config,
    *,
    sim_url: str | None = None,
    cache: bool | None = None,
    gates: tuple[str, list[str]] | None = None,
    spend: tuple[str, list[str]] | None = None,
) -> GatewaySettings:
    """The settings of the gateway a config describes: its rate_limits as one shared budget, where each
    provider's calls go (or the simulator), its retry policy, response cache and batch mode."""
    keys = sorted(cfg.rate_limits)
    covered = {c: k for k in keys for c in cfg.rate_limits[k].covers}  # a budget paying for other keys' calls
    # batch mode for the runs that ask for it; with `batch.enabled` and no run opting out, for every caller
    # (`runner gateway` serves callers of any run name)
    every = cfg.batch.enabled and all(r.batch is not False for r in cfg.runs)
    batch_runs = frozenset(cfg.batch_runs() | ({"*"} if every else set()))
    use_cache = cfg.cache if cache is None else cache
    from runner.cache import DEFAULT_DIR

    return GatewaySettings(
        upstreams=upstreams(cfg, sim_url),
        retry=cfg.retry,
        limit_keys={**covered, **{k: k for k in keys}},
        limits={k: cfg.rate_limits[k].resolved() for k in keys},
        adaptive=bool(cfg.adaptive_concurrency),
        sim_models={} if sim_url else None,
        model_overrides=cfg.model_overrides(),
        batch=cfg.batch if batch_runs else None,
        batch_runs=batch_runs,
        journal=str(cfg.output_dir / "batches.jsonl") if batch_runs else None,
        cache_dir=str(Path(cfg.cache_dir or DEFAULT_DIR)) if use_cache else None,
        gates=gates[0] if gates else None,
        gate_keys=list(gates[1]) if gates else [],
        spend=spend[0] if spend else None,
        spend_runs=list(spend[1]) if spend else [],
        **_cloud_settings(cfg, sim_url),
    )
