"""Validated, frozen settings: the only place config files and the environment are read.

Errors name the file, the line and the field (YAML node marks map pydantic's error paths back
to lines). Flags override file values before validation, so they are checked the same way.
"""

from __future__ import annotations

import datetime as dt
import difflib
import hashlib
import json
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from runner.errors import ConfigError

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "default.yaml"
API_KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}

# Where a run's model calls go: the two first-party APIs, or a cloud that serves the same models.
Provider = Literal["anthropic", "openai", "bedrock", "vertex", "azure"]
CLOUDS = ("bedrock", "vertex", "azure")
# The wire format each provider speaks: Amazon Bedrock (InvokeModel) and Google Vertex AI (rawPredict) take
# Anthropic's Messages body, Azure OpenAI takes OpenAI's Chat Completions body.
API_OF = {
    "anthropic": "anthropic",
    "openai": "openai",
    "bedrock": "anthropic",
    "vertex": "anthropic",
    "azure": "openai",
}
# A cloud's credential when it is one token, read from the variable its SDK reads (Bedrock API key, Azure
# OpenAI key) or, for Vertex, which has none, a Google OAuth access token (the variable Terraform's google
# provider reads); the gateway gives a user's harness the run's token under these names.
CLOUD_KEY_ENV = {
    "bedrock": "AWS_BEARER_TOKEN_BEDROCK",
    "vertex": "GOOGLE_OAUTH_ACCESS_TOKEN",
    "azure": "AZURE_OPENAI_API_KEY",
}
# What each cloud's SDK reads from the environment (settings and credentials), read once here.
CLOUD_ENV = (
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_BEARER_TOKEN_BEDROCK",
    "ANTHROPIC_BEDROCK_BASE_URL",
    "CLOUD_ML_REGION",
    "ANTHROPIC_VERTEX_PROJECT_ID",
    "ANTHROPIC_VERTEX_BASE_URL",
    "GOOGLE_OAUTH_ACCESS_TOKEN",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "AZURE_OPENAI_ENDPOINT",
    "AZURE_OPENAI_API_KEY",
    "AZURE_OPENAI_AD_TOKEN",
    "OPENAI_API_VERSION",
)
# Any one of these sets of variables holds a cloud's credentials (as its SDK finds them: a Bedrock API key or
# an AWS key pair or profile; a Google access token or a service account's key file; an Azure key or token).
CLOUD_CREDENTIALS = {
    "bedrock": (
        ("AWS_BEARER_TOKEN_BEDROCK",),
        ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),
        ("AWS_PROFILE",),
    ),
    "vertex": (("GOOGLE_OAUTH_ACCESS_TOKEN",), ("GOOGLE_APPLICATION_CREDENTIALS",)),
    "azure": (("AZURE_OPENAI_API_KEY",), ("AZURE_OPENAI_AD_TOKEN",)),
}


@dataclass(frozen=True)
class Environment:
    """The runner's own settings from its process environment, read here and nowhere else (a child process
    handed the environment whole is not a read). Read on each call: it costs a few dict lookups, and a test
    or a shell that sets a variable sees it at once."""

    images_dir: Path | None  # RUNNER_IMAGES_DIR: images/ when the package runs outside its checkout
    base_image: str | None  # RUNNER_BASE_IMAGE: the sandbox image's base, forced
    state_dir: Path  # RUNNER_STATE_DIR: the local sandbox's templates and servers
    pg_bindir: Path | None  # RUNNER_PG_BINDIR: PostgreSQL's binaries for the local sandbox
    docker_host: str  # DOCKER_HOST, as the Docker CLI reads it
    ray_address: str | None  # RAY_ADDRESS, as Ray reads it
    ci: bool  # CI: set by every CI service; errors then fail the run by default
    keys: dict[str, str] = field(repr=False)  # provider -> API key; never printed
    cloud: dict[str, str] = field(default_factory=dict, repr=False)  # CLOUD_ENV's variables that are set

    def api_key(self, provider: str) -> str | None:
        return self.keys.get(provider)

    def has_credentials(self, provider: str) -> bool:
        """Whether the environment holds what the provider's SDK would authenticate with."""
        if provider in CLOUD_CREDENTIALS:
            return any(all(self.cloud.get(v) for v in names) for names in CLOUD_CREDENTIALS[provider])
        return provider in self.keys


def environment() -> Environment:
    env = os.environ
    return Environment(
        images_dir=Path(v) if (v := env.get("RUNNER_IMAGES_DIR")) else None,
        base_image=env.get("RUNNER_BASE_IMAGE") or None,
        state_dir=Path(env.get("RUNNER_STATE_DIR") or "/tmp/pgsandbox-runner"),
        pg_bindir=Path(v) if (v := env.get("RUNNER_PG_BINDIR")) else None,
        docker_host=env.get("DOCKER_HOST") or "unix:///var/run/docker.sock",
        ray_address=env.get("RAY_ADDRESS") or None,
        ci=bool(env.get("CI")),
        keys={p: k for p, name in API_KEY_ENV.items() if (k := env.get(name))},
        cloud={name: v for name in CLOUD_ENV if (v := env.get(name))},
    )


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Limits(_Frozen):
    """Requests, input tokens and output tokens per minute; None = unlimited."""

    rpm: float | None = Field(None, gt=0)
    itpm: float | None = Field(None, gt=0)
    otpm: float | None = Field(None, gt=0)


# Anthropic's published tiers for Claude Sonnet 4.x (see the rate-limit seed).
ANTHROPIC_TIERS = {
    "tier1": Limits(rpm=50, itpm=30_000, otpm=8_000),
    "tier2": Limits(rpm=1_000, itpm=450_000, otpm=90_000),
    "tier3": Limits(rpm=2_000, itpm=800_000, otpm=160_000),
    "tier4": Limits(rpm=4_000, itpm=2_000_000, otpm=400_000),
}


class LimitSpec(Limits):
    preset: Literal["tier1", "tier2", "tier3", "tier4"] | None = None
    covers: list[str] = Field(
        default_factory=list,
        description="more calls this budget pays for, as keys: "
        "provider or provider/model (e.g. bedrock under anthropic: a Bedrock Claude "
        "and a first-party Claude drawing on one budget; by default each has its own)",
    )

    def resolved(self) -> Limits:
        base = ANTHROPIC_TIERS[self.preset] if self.preset else Limits()
        return Limits(rpm=self.rpm or base.rpm, itpm=self.itpm or base.itpm, otpm=self.otpm or base.otpm)


class SpendCap(_Frozen):
    """What a job, or one run, may spend: USD at the models' prices and tokens (input and output); None: no
    cap. A call that would take spending past a cap is not sent, and the run stops there (runner/budget/
    spend.py); the same command with a higher cap resumes."""

    usd: float | None = Field(None, gt=0)
    tokens: int | None = Field(None, gt=0)


class RetrySettings(_Frozen):
    max_attempts: int = Field(6, ge=1, le=50)
    base_seconds: float = Field(0.5, gt=0)
    max_backoff_seconds: float = Field(30.0, gt=0)
    total_cap_seconds: float = Field(300.0, gt=0)


class BatchSettings(_Frozen):
    """Batch mode (runner/gateway/batcher.py): model calls held for a short window and sent as one batch per
    provider and model, at half the price and outside the per-minute limits; each caller answered when its
    own result arrives (usually minutes, at most 24 h)."""

    enabled: bool = Field(False, description="every run in batch mode (a run's own `batch:` decides for it)")
    window_seconds: float = Field(
        2.0, gt=0, description="calls are held this long after the first of a batch"
    )
    max_requests: int = Field(
        1000,
        ge=1,
        le=50_000,
        description="a batch goes as soon as this many calls are held "
        "(the APIs take up to 100,000 and 50,000)",
    )
    poll_min_seconds: float = Field(
        1.0, gt=0, description="first wait before asking whether a batch has ended"
    )
    poll_max_seconds: float = Field(60.0, gt=0, description="the wait between asks doubles up to this")
    retries: int = Field(
        2,
        ge=0,
        description="an errored, expired or cancelled request goes into the next batch this many times",
    )
    max_queued: dict[str, int] = Field(
        default_factory=dict,
        description="per provider, requests in batches not "
        "yet ended at most (your tier's batch queue limit); more wait their turn",
    )
    max_queued_tokens: dict[str, int] = Field(
        default_factory=dict,
        description="per model (key provider/model, or provider for each of its models), "
        "input tokens in batches not yet ended at most (OpenAI's enqueued-token limit; estimated as a "
        "quarter of "
        "each request's bytes); more wait their turn",
    )
    then: Literal["interactive", "error"] = Field(
        "interactive",
        description="past `retries`: the request goes "
        "interactive (full price, the per-minute budget), or the caller "
        "gets the error",
    )


class OtelSettings(_Frozen):
    """Live OpenTelemetry export (runner/report/exports/otel.py): each result's trace, in the GenAI semantic
    conventions' names, sent over OTLP/HTTP as the result is written. Headers (a hosted backend's key) come
    from OTEL_EXPORTER_OTLP_HEADERS, never from this file."""

    endpoint: str | None = Field(
        None,
        pattern=r"^https?://",
        description="an OTLP/HTTP collector, e.g. "
        "http://127.0.0.1:4318 (/v1/traces is added); unset: no live export",
    )
    capture_content: bool = Field(
        False,
        description="tool calls' arguments and results on their spans (they may hold what the records hold)",
    )


class ProviderSettings(_Frozen):
    base_url: str | None = Field(
        None,
        description="what the provider's SDK takes as base_url (OpenAI's ends in /v1, Anthropic's does not)",
    )
    timeout_seconds: float = Field(60.0, gt=0)
    transport: Literal["auto", "sdk", "lean"] = Field(
        "auto",
        description="sdk: every call through the official SDK's request code; lean: the SDK's request "
        "learned once, then sent over the runner's own connections (CPU for the simulator); "
        "auto: sdk on the real APIs, lean on the simulator",
    )


class BedrockSettings(_Frozen):
    """Amazon Bedrock (anthropic.AnthropicBedrock): Claude through InvokeModel. Credentials as the AWS SDK
    finds them: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (/ AWS_SESSION_TOKEN), a profile, or a Bedrock API
    key in AWS_BEARER_TOKEN_BEDROCK."""

    region: str | None = Field(None, description="default: AWS_REGION, else AWS_DEFAULT_REGION")
    profile: str | None = Field(
        None, description="an AWS profile (default: AWS_PROFILE, else the SDK's chain)"
    )
    base_url: str | None = Field(
        None,
        description="default: ANTHROPIC_BEDROCK_BASE_URL, else "
        "https://bedrock-runtime.{region}.amazonaws.com",
    )
    timeout_seconds: float | None = Field(None, gt=0, description="default: 60")
    batch_s3_uri: str | None = Field(
        None,
        pattern=r"^s3://[^/]+(/.*)?$",
        description="batch mode: where its jobs' input and output files go, s3://bucket/prefix/ (required)",
    )
    batch_role_arn: str | None = Field(
        None,
        pattern=r"^arn:aws(-[^:]+)?:iam::([0-9]{12})?:role/.+$",
        description="batch mode: the service role its batch inference jobs run as (required)",
    )
    control_url: str | None = Field(
        None, description="batch mode: the control plane (default: https://bedrock.{region}.amazonaws.com)"
    )
    s3_url: str | None = Field(
        None, description="batch mode: S3, path-style (default: https://s3.{region}.amazonaws.com)"
    )


class VertexSettings(_Frozen):
    """Google Vertex AI (anthropic.AnthropicVertex): Claude through rawPredict. Credentials: an OAuth access
    token in GOOGLE_OAUTH_ACCESS_TOKEN, else Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS,
    or `gcloud auth application-default login`)."""

    project: str | None = Field(None, description="default: ANTHROPIC_VERTEX_PROJECT_ID")
    region: str | None = Field(
        None, description="a location such as us-east5, or global (default: CLOUD_ML_REGION)"
    )
    base_url: str | None = Field(
        None,
        description="default: ANTHROPIC_VERTEX_BASE_URL, else the region's "
        "https://{region}-aiplatform.googleapis.com/v1",
    )
    timeout_seconds: float | None = Field(None, gt=0, description="default: 60")
    batch_gcs_uri: str | None = Field(
        None,
        pattern=r"^gs://[^/]+(/.*)?$",
        description="batch mode: where its batch prediction jobs' input and output files go, "
        "gs://bucket/prefix/ (required)",
    )
    storage_url: str | None = Field(
        None, description="batch mode: Cloud Storage's JSON API (default: https://storage.googleapis.com)"
    )


class AzureSettings(_Frozen):
    """Azure OpenAI (openai.AzureOpenAI): GPT models through a resource's deployments. Credentials:
    AZURE_OPENAI_API_KEY (or a Microsoft Entra token in AZURE_OPENAI_AD_TOKEN)."""

    endpoint: str | None = Field(
        None,
        pattern=r"^https?://",
        description="the resource, e.g. "
        "https://my-resource.openai.azure.com (default: AZURE_OPENAI_ENDPOINT)",
    )
    api_version: str | None = Field(None, description="e.g. 2024-10-21 (default: OPENAI_API_VERSION)")
    deployment: str | None = Field(None, description="the deployment calls name (default: the run's model)")
    batch_deployment: str | None = Field(
        None, description="batch mode: the Global-Batch deployment its batch lines name (default: deployment)"
    )
    timeout_seconds: float | None = Field(None, gt=0, description="default: 60")


CloudSettings = BedrockSettings | VertexSettings | AzureSettings


class Latency(_Frozen):
    p50_ms: float = Field(0.0, ge=0)
    p95_ms: float | None = Field(None, ge=0)
    scale: float = Field(1.0, ge=0)


class Faults(_Frozen):
    """Share of requests answered with each fault (0..1)."""

    http_500: float = Field(0.0, ge=0, le=1)
    overloaded: float = Field(0.0, ge=0, le=1)
    drop: float = Field(0.0, ge=0, le=1)
    slow: float = Field(0.0, ge=0, le=1)
    malformed: float = Field(0.0, ge=0, le=1)
    bad_request: float = Field(0.0, ge=0, le=1, description="400 invalid_request_error for that request")
    slow_seconds: float = Field(5.0, gt=0)


class BatchTurnaround(_Frozen):
    """How the simulator's batch APIs take their time (runner/models/sim/batches.py). The real ones end most
    batches within an hour and every one within 24 h: here each request of a batch is done after a lognormal
    draw through a median and a 95th percentile; the batch ends when all are done, and a request not done by
    the end of the window expires."""

    median_seconds: float = Field(2.0, gt=0, description="median time a request in a batch takes to be done")
    p95_seconds: float | None = Field(
        None, gt=0, description="95th percentile (None: every request the median)"
    )
    window_seconds: float = Field(
        86400.0, gt=0, description="the batch's 24 h: a request not done by then expires"
    )
    errored: float = Field(0.0, ge=0, le=1, description="share of requests that end in an API error (a 500)")
    expired: float = Field(0.0, ge=0, le=1, description="share of requests that never finish (they expire)")
    seed: int = 0
    scale: float = Field(
        1.0,
        gt=0,
        description="the providers' seconds one second of these turnarounds stands for "
        "(a bench that runs batches 60 x faster than real sets 60): prompt-"
        "cache entries age at the providers' pace inside batches",
    )
    busy: float = Field(0.0, ge=0, le=1, description="share of batch creates answered 429 (with retry-after)")
    busy_first: int = Field(0, ge=0, description="the first this many batch creates are answered 429")
    create_seconds: float = Field(
        0.0,
        ge=0,
        description="how long a batch create takes to answer (the batch "
        "exists from its start: a caller killed meanwhile "
        "leaves it made)",
    )
    retry_after_seconds: float = Field(1.0, ge=0, description="what a busy answer's retry-after says")
    enqueued_tokens: dict[str, int] = Field(
        default_factory=dict,
        description="OpenAI: per model, the prompt "
        "tokens batches not yet ended may hold; a batch past it fails "
        "('Enqueued token limit reached')",
    )


# The AWS key the runner signs its Bedrock calls to the simulator with (its secret is no secret: the simulator
# is the only account that has it).
SIM_AWS_KEY = ("AKIASIMULATOR0000000", "simulator-secret")


class SimSettings(_Frozen):
    host: str = "127.0.0.1"
    port: int = Field(0, ge=0, le=65535)
    latency: Latency = Latency()
    limits: dict[str, Limits] = Field(
        default_factory=dict,
        description="per model: the simulator model, or the "
        "real one a caller says it plays (x-sim-plays), as the real APIs limit per model",
    )
    faults: Faults = Faults()
    seed: int = 0
    stream_interval_ms: float = Field(0.0, ge=0, description="pause between streamed events (a slow stream)")
    compress: bool = Field(
        False,
        description="answer gzip/deflate-encoded to clients that accept it, as the real "
        "APIs do (off by default: it costs the simulator CPU)",
    )
    batches: BatchTurnaround = BatchTurnaround()
    state_dir: str | None = Field(
        None,
        description="where batches outlive the simulator's process, as a "
        "provider's do (a run sets its output's simulator/)",
    )
    tls_cert: str | None = Field(
        None,
        description="serve HTTPS with this certificate (PEM; with tls_key): a "
        "provider behind TLS, for tests of trust stores and proxies",
    )
    tls_key: str | None = None
    deployments: dict[str, str] = Field(
        default_factory=dict,
        description="Azure OpenAI: deployment -> the "
        "model it serves, as a resource's deployments are made (a run adds "
        "its own); a deployment named as a model serves that model",
    )
    aws_keys: dict[str, str] = Field(
        default_factory=lambda: dict([SIM_AWS_KEY]),
        description="Bedrock: access "
        "key id -> secret, the keys its account has: a SigV4 signature is checked "
        "with its key's secret, a key not here is refused as unknown (the runner's "
        "stand-in key is one)",
    )


Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


class Thinking(_Frozen):
    """Whether the model thinks on this run's calls (runner/models/thinking.py): current models do unless
    told not to, and their thinking tokens come out of the same output limit as the answer."""

    thinking: Literal["model-default", "off", "on"] = Field(
        "model-default",
        description="off: disabled where the model thinks by default; on: adaptive where taken, "
        "else a budget; model-default: send nothing (the start line says what it does)",
    )
    effort: Effort | None = Field(
        None, description="Anthropic output_config.effort / OpenAI reasoning_effort"
    )
    thinking_tokens: int = Field(
        4096,
        ge=0,
        description="added to max_output_tokens whenever the model thinks, so "
        "thinking cannot starve the answer (the budget, for "
        "budget_tokens models)",
    )

    @field_validator("thinking", mode="before")
    @classmethod
    def _yaml_booleans(cls, v: Any) -> Any:
        """YAML reads a bare `off` / `on` as false / true: take them as the words they were."""
        return {False: "off", True: "on"}.get(v, v) if isinstance(v, bool) else v


def _unset(value: Any) -> bool:
    return value is None


class CloudOverrides(_Frozen):
    """A run's (or a teacher's) own settings for the cloud it calls, over the config's top-level block field
    by field (runner/clouds.py). Left out of dumps when unset: configs without them fingerprint as before."""

    bedrock: BedrockSettings | None = Field(None, exclude_if=_unset)
    vertex: VertexSettings | None = Field(None, exclude_if=_unset)
    azure: AzureSettings | None = Field(None, exclude_if=_unset)

    def _only_its_cloud(self, provider: str | None) -> None:
        for cloud in CLOUDS:
            if getattr(self, cloud) is not None and provider != cloud:
                raise ValueError(f"{cloud}: settings for {cloud}, but the provider is {provider}")


class ModelRef(Thinking, CloudOverrides):
    # As an Atlas teacher (a ModelRef in the config) a model reviews another model's calls in the middle of a
    # tool-use loop, where a thinking Claude would need its own thinking blocks: it does not think unless
    # asked (and asking a thinking Claude is refused at start, runner/models/preflight.py).
    thinking: Literal["model-default", "off", "on"] = "off"
    provider: Provider
    model: str
    sim_model: str = Field("sim-strong", description="the simulator model that plays it offline")
    original_model: str | None = Field(None, description="the seeds' model id, used with --original-models")

    @model_validator(mode="after")
    def _cloud_block(self) -> ModelRef:
        self._only_its_cloud(self.provider)
        return self


class RunSpec(Thinking, CloudOverrides):
    """One named run: its parameters and env for any harness; provider/model for the model-calling ones."""

    name: str = Field(pattern=r"^[A-Za-z0-9._-]+$")
    params: dict[str, Any] = Field(
        default_factory=dict, description="handed to the harness; {name} in templates"
    )
    env: dict[str, str] = Field(default_factory=dict, description="extra environment for this run's records")
    provider: Provider | None = None
    model: str | None = None
    sim_model: str = Field("sim-strong", description="the simulator model that plays it offline")
    original_model: str | None = Field(None, description="the seeds' model id, used with --original-models")
    agent: Literal["baseline", "atlas"] = "baseline"
    teacher: ModelRef | None = None
    batch: bool | None = Field(
        None,
        description="this run's model calls through the providers' batch APIs (None: "
        "as `batch.enabled`); not part of what makes runs comparable",
    )
    budget: SpendCap | None = Field(
        None,
        description="what this run may spend (usd, tokens): at the cap it stops; "
        "not part of what makes runs comparable",
    )
    temperature: float = Field(0.0, ge=0, le=2)
    max_output_tokens: int = Field(800, ge=1)
    step_limit: int = Field(8, ge=1, le=100)

    @model_validator(mode="after")
    def _atlas_needs_teacher(self) -> RunSpec:
        if self.agent == "atlas" and self.teacher is None:
            raise ValueError("an atlas run needs a teacher (provider, model)")
        if (self.provider is None) != (self.model is None):
            raise ValueError("provider and model go together")
        self._only_its_cloud(self.provider)
        return self

    def model_ref(self) -> ModelRef:
        """This run's model; only runs of model-calling harnesses (crm) have one."""
        if self.provider is None or self.model is None:
            raise ValueError(f"run {self.name} has no provider/model")
        return ModelRef(
            provider=self.provider,
            model=self.model,
            sim_model=self.sim_model,
            original_model=self.original_model,
            thinking=self.thinking,
            effort=self.effort,
            thinking_tokens=self.thinking_tokens,
            bedrock=self.bedrock,
            vertex=self.vertex,
            azure=self.azure,
        )

    def template_values(self) -> dict[str, str]:
        """{run} and each parameter, for env and argv templates."""
        vals = {k: v if isinstance(v, str) else json.dumps(v) for k, v in self.params.items()}
        return {**vals, "run": self.name}


# Settings of a part of the fingerprint that change how fast records run, not what they do: a resume
# with them changed is the same job (and outputs made before one existed still resume).
SPEED_ONLY: dict[str, Any] = {"harness": {"warm"}}


class HarnessBlock(_Frozen):
    """What runs one record: the built-in CRM, a Python function, or a command (docs/harness.md)."""

    kind: Literal["crm", "python", "command"] = "crm"
    entrypoint: str | None = Field(
        None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$", description="python: package.module:function"
    )
    pythonpath: list[Path] = Field(default_factory=list, description="python: put on sys.path first")
    python: Path | None = Field(
        None,
        description="python: run the function in this interpreter (a virtualenv's "
        "bin/python, or the virtualenv's directory) instead of the runner's; command: what "
        "{python} means",
    )
    isolation: Literal["process", "thread"] = Field(
        "process",
        description="python: process (each slot a process of its own that lives across its records: "
        "module globals, cwd, environment and crashes are the slot's) or thread (a worker's slots share "
        "one interpreter: see docs/harness.md for what they then share)",
    )
    warm: bool = Field(
        True,
        description="python: fork each slot's interpreter from one that imported "
        "the harness's libraries once (false: each slot starts its own)",
    )
    command: list[str] | None = Field(None, min_length=1, description="command: argv template")
    chunk_size: int | None = Field(
        None,
        ge=1,
        le=10_000,
        description="command: records per invocation (default 4; "
        "1 with reset: recreate, which resets between invocations)",
    )
    cwd: Path | None = Field(None, description="where the harness runs (default: the config's directory)")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment, templates allowed")
    env_file: Path | None = Field(None, description="default: .env next to the config, if there is one")
    reset: Literal["none", "recreate"] = Field("none", description="recreate: fresh database per record")

    @model_validator(mode="after")
    def _kind_fields(self) -> HarnessBlock:
        if self.python is not None and self.kind == "crm":
            raise ValueError("python: is for the python and command harnesses")
        if self.isolation == "thread" and self.kind != "python":
            raise ValueError(
                "isolation: thread is for the python harness (a command's records are processes)"
            )
        if self.kind == "python" and not self.entrypoint:
            raise ValueError("a python harness needs entrypoint: package.module:function")
        if self.kind == "command" and not self.command:
            raise ValueError("a command harness needs command: [argv, ...] with {input} and {output}")
        if self.kind == "command" and self.command:
            joined = " ".join(self.command)
            missing = [p for p in ("{input}", "{output}") if p not in joined]
            if missing:
                raise ValueError(f"command must contain {' and '.join(missing)}")
        if self.kind == "command" and self.reset == "recreate" and (self.chunk_size or 1) > 1:
            raise ValueError(
                f"chunk_size: {self.chunk_size} with reset: recreate: the databases are made afresh "
                f"between invocations, so {self.chunk_size} records of one invocation would share "
                "them; set chunk_size: 1, or reset: none if the command resets them itself"
            )
        return self

    @property
    def chunk(self) -> int:
        """Records per harness call: a command's chunk
        (default 4; 1 where each record gets fresh databases)."""
        if self.kind != "command":
            return 1
        return self.chunk_size or (1 if self.reset == "recreate" else 4)


CONVERSATION_SECONDS = 300.0  # a conversation's time limit, unless the config sets one
# In batch mode each step of a conversation waits on a batch (usually minutes, at most 24 h each): a day
# in all, unless the config says otherwise; a conversation cut then is a `timeout` error, run again by
# --rerun-errors.
BATCH_CONVERSATION_SECONDS = 86_400.0
SLOT_SESSIONS_MIB = 8  # a slot's PostgreSQL sessions, in the default container memory
SLOT_DATA_MIB = 16  # a slot's database copies in memory (tmpfs): two almost empty databases


class DatabaseSettings(_Frozen):
    """The sandbox's database: the harness's own schema files, names and PostgreSQL version."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    schema_files: list[Path] = Field(
        default_factory=list,
        alias="schema",
        description=".sql, .sql.gz, .sh files or directories, applied in order",
    )
    name: str = "sandbox"
    user: str = Field(
        "sandbox",
        description="the role the harness logs in as: never the superuser unless "
        "allow_superuser (docs/security.md)",
    )
    allow_superuser: bool = Field(
        False,
        description="let the harness log in as postgres, the superuser: its SQL "
        "(or a model's, through it) can then run programs and read "
        "files in the sandbox",
    )
    extra_databases: dict[str, list[Path] | None] = Field(default_factory=dict)
    shared_databases: list[str] = Field(
        default_factory=list,
        description="extra databases a worker's slots share instead of each having"
        " its own copy (telemetry, logs: written at once, never reset)",
    )
    postgres: Literal["15", "16", "17"] = "15"

    @model_validator(mode="after")
    def _no_superuser_unless_asked(self) -> DatabaseSettings:
        if self.user == "postgres" and not self.allow_superuser:
            raise ValueError(
                "user: postgres is the superuser: a harness's SQL (or a model's, through a SQL tool) "
                "could run shell commands in the sandbox (COPY ... TO PROGRAM) and read its files. Use "
                "a role of its own (the default: sandbox), or set allow_superuser: true"
            )
        return self


class PriceSpec(_Frozen):
    """USD per 1M tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_write: float = Field(ge=0)
    cache_read: float = Field(ge=0)
    cache_write_1h: float | None = Field(
        None,
        ge=0,
        description="Anthropic's one-hour cache write (batch mode's "
        "Claude requests use it); default: the 5-minute write's",
    )


class ModelSpec(_Frozen):
    """Overrides for one model's capabilities (runner/models/capabilities.py holds the defaults)."""

    prices: PriceSpec | None = None
    sampling: list[Literal["temperature", "top_p", "top_k"]] | None = None
    context_tokens: int | None = Field(None, gt=0)
    max_output_tokens: int | None = Field(None, gt=0)
    min_cache_tokens: int | None = Field(None, ge=0)
    retires: dt.date | None = None
    successor: str | None = None


class RaySettings(_Frozen):
    """executor: ray -- which cluster, and what each worker actor asks of it (docs/scale-out.md)."""

    address: str | None = Field(
        None,
        description="host:port or ray://host:port; default: RAY_ADDRESS, else a "
        "Ray started on this machine for the run",
    )
    cpus_per_worker: float = Field(1.0, ge=0, description="Ray CPUs each worker actor reserves")
    memory_per_worker_mb: int | None = Field(
        None, gt=0, description="Ray memory each worker actor reserves (its sandbox included)"
    )


class Config(_Frozen):
    dataset: Path = Field(description="the records, one JSON object per line")
    harness: HarnessBlock = HarnessBlock()
    database: DatabaseSettings | None = Field(None, description="default: the built-in CRM's")
    id_field: str | None = Field(None, description="default: the first of id, conversation_id present")
    success_field: str | None = Field(None, description="dotted path into the harness's result")
    metrics: dict[str, str] | None = Field(
        None, description="name: dotted path into the result (report columns)"
    )
    group_by: dict[str, str] | None = Field(None, description="name: dotted path (record.x or output.x)")
    config_dir: Path = Field(Path("."), exclude=True, description="relative harness paths start here")
    runs: list[RunSpec] = Field(min_length=1)
    workers: int | None = Field(None, ge=1, le=256, description="default: 4, or split from concurrency")
    slots: int | None = Field(
        None,
        ge=1,
        le=256,
        description="records in flight per worker, each on its own "
        "database; default: 1, or split from concurrency",
    )
    concurrency: int | Literal["auto"] | None = Field(
        None,
        description="records in flight in all (or auto: found "
        "by AIMD while the run goes), split into "
        "workers x slots from cores and memory",
    )
    sandbox: Literal["auto", "docker", "local", "external"] = "auto"
    executor: Literal["local", "ray"] = Field(
        "local", description="where workers run: local processes, or Ray actors over a cluster (extra: ray)"
    )
    ray: RaySettings = RaySettings()
    dsn: str | None = None
    output_dir: Path = Path("out/default")  # YAML `out` (EXTERNAL_NAMES); output_dir still reads
    providers_mode: Literal["auto", "real", "sim"] = "auto"  # YAML `providers`, as the flag
    limit: int | None = Field(None, ge=1)
    shard: tuple[int, int] | None = None
    conversation_timeout_seconds: float | None = Field(
        None,
        gt=0,
        description="per-conversation time limit; unset: 300 s, or 24 h where a run is in batch mode "
        "(each step waits on a batch: minutes, at most 24 h)",
    )
    max_attempts: int = Field(3, ge=1, le=10, description="per record, across worker crashes")
    max_worker_restarts: int | None = Field(None, ge=0, description="default: 3 x workers + 10")
    heartbeat_timeout_seconds: float = Field(60.0, gt=0)
    shutdown_grace_seconds: float = Field(30.0, ge=0)
    container_memory: str | None = Field(
        None,
        description="per sandbox; default: 256m, plus 24m per slot beyond "
        "the first (8m without container_tmpfs)",
    )
    container_cpus: float = Field(1.0, gt=0)
    container_tmpfs: bool = Field(
        True,
        description="data directory in memory: files are created and unlinked "
        "(TRUNCATE, CREATE DATABASE) far faster than on disk",
    )
    container_network: Literal["auto", "none", "bridge"] = Field(
        "auto",
        description="none: the sandbox has no network at all (no route out, not even to this machine), "
        "reached through a Unix socket: DB_HOST is that socket's directory. bridge: Docker's default "
        "network, its "
        "port published on 127.0.0.1. auto: none for the built-in CRM (which connects through the socket), "
        "bridge "
        "for a user's harness (which may build its own host:port URL)",
    )
    cache: bool = True
    cache_dir: Path | None = None
    rerun_errors: bool = False
    select: str | None = Field(
        None,
        exclude=True,
        description="-k: records whose id, tags or fields match (and, or, not: runner/select.py)",
    )
    ids: list[str] | None = Field(None, exclude=True, description="--ids: only these records")
    maxfail: int | None = Field(
        None,
        ge=1,
        exclude=True,
        description="-x / --maxfail N: after N results that "
        "failed, were cut or ended in an error, start no more records (those in flight "
        "finish) and exit 1",
    )
    last_failed: bool = Field(
        False,
        exclude=True,
        description="--lf: only the records whose last result failed "
        "or ended in an error, run again, the models asked "
        "again (the response cache neither read nor written)",
    )
    skip_invalid: bool = Field(
        False, description="bad dataset lines go to DATASET.rejects.jsonl instead of stopping"
    )
    force: bool = Field(
        False, description="YAML force_resume, flag --force-resume (the old key force still reads)"
    )
    fail_on_error: bool | None = Field(
        None,
        description="exit 1 when any result ended in an error (provider, "
        "sandbox, harness, time limit; not a cut turn); default: "
        "on where CI is set",
    )
    epochs: int = Field(
        1,
        ge=1,
        le=100,
        description="trials per record: each record run N times as independent "
        "items (own cache keys), for error bars and pass@k",
    )
    reducer: str = Field(
        "mean",
        description="with epochs, the headline success of a record's trials: mean, all "
        "(every trial succeeded), any, or at_least_K",
    )
    compare_to: str | None = Field(
        None,
        description="the reference run: every other run is compared against it "
        "on the records both finished (default: the first run)",
    )
    fail_under: dict[str, float] = Field(
        default_factory=dict,
        description="run: the least success rate (0..1) it must reach, else exit 1 (CI gates)",
    )
    rate_limits: dict[str, LimitSpec] = Field(
        default_factory=dict, description="key: provider or provider/model"
    )
    budget: SpendCap | None = Field(
        None,
        description="what the job may spend in all (usd, tokens; --budget, "
        "--budget-tokens): at the cap it stops, and the same command "
        "with a higher cap resumes",
    )
    concurrency_window_seconds: float | None = Field(
        None,
        gt=0,
        description="concurrency auto: how long the throttle watches before each decision (default: "
        "3 round trips of a model call, as the shared budget times them; 10 s until one is)",
    )
    adaptive_concurrency: bool | None = Field(None, description="default: on where no limit is configured")
    retry: RetrySettings = RetrySettings()
    batch: BatchSettings = BatchSettings()
    otel: OtelSettings = OtelSettings()
    anthropic: ProviderSettings = ProviderSettings()
    openai: ProviderSettings = ProviderSettings()
    bedrock: BedrockSettings = BedrockSettings()
    vertex: VertexSettings = VertexSettings()
    azure: AzureSettings = AzureSettings()
    models: dict[str, ModelSpec] = Field(default_factory=dict, description="per-model capability overrides")
    prompt_cache: bool = Field(
        True, description="Anthropic cache_control breakpoints on tools, system, transcript"
    )
    allow_retired: bool = False
    original_models: bool = Field(False, description="run each model's original_model (the seeds' ids)")
    simulator: SimSettings = SimSettings()
    telemetry_dsn: str | None = None
    gateway: bool | Literal["auto"] = Field(
        "auto",
        description="python/command harnesses: their SDK calls go through the runner's gateway (one budget, "
        "retries, cache). auto: when a model call can happen (an API key in the environment, or "
        "providers: sim); true: always; false: never",
    )

    @model_validator(mode="after")
    def _checks(self) -> Config:
        names = [r.name for r in self.runs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"run names must be unique: {', '.join(dupes)}")
        if self.sandbox == "external" and not self.dsn:
            raise ValueError("sandbox: external needs dsn")
        if self.shard is not None and not 1 <= self.shard[0] <= self.shard[1]:
            raise ValueError("shard must be i/n with 1 <= i <= n")
        if self.harness.kind == "crm" and self.harness.reset != "none":
            raise ValueError("the crm harness resets its database itself (harness.reset: none)")
        if not re.fullmatch(r"mean|all|any|at_least_[1-9][0-9]*", self.reducer):
            raise ValueError(f"reducer: {self.reducer!r} is none of mean, all, any, at_least_K")
        if self.compare_to is not None and self.compare_to not in names:
            raise ValueError(
                f"compare_to: {self.compare_to!r} is not a run of this config ({', '.join(names)})"
            )
        for run, least in self.fail_under.items():
            if run not in names:
                raise ValueError(f"fail_under: {run!r} is not a run of this config ({', '.join(names)})")
            if not 0 <= least <= 1:
                raise ValueError(f"fail_under.{run}: {least} is not a share from 0 to 1")
        for provider in ("anthropic", "openai"):
            if problem := _base_url_problem(provider, getattr(self, provider).base_url):
                raise ValueError(problem)
        if problem := _covers_problem(self.rate_limits):
            raise ValueError(problem)
        if self.harness.kind == "crm":
            bad = [r.name for r in self.runs if r.provider is None]
            if bad:
                raise ValueError(f"runs of the crm harness need provider and model: {', '.join(bad)}")
        return self

    def sandbox_network(self) -> str:
        """What the sandbox gets (runner/sandbox/docker.py): auto is none where it can be, for the built-in
        harness only; a user's harness keeps a TCP port unless it says none."""
        if self.container_network == "auto" and self.harness.kind != "crm":
            return "bridge"
        return self.container_network

    def sandbox_memory(self, slots: int = 1) -> str:
        """A slot adds its sessions, and with the data directory in memory its database copies (an
        almost empty PostgreSQL database is ~8m; the worker raises the limit for larger ones)."""
        per_slot = SLOT_SESSIONS_MIB + (SLOT_DATA_MIB if self.container_tmpfs else 0)
        return self.container_memory or f"{256 + per_slot * (slots - 1)}m"

    def model_runs(self) -> list[RunSpec]:
        """The runs whose models the runner itself calls (the built-in agents)."""
        return [r for r in self.runs if r.provider is not None] if self.harness.kind == "crm" else []

    def providers_called(self) -> set[str]:
        """The providers whose APIs those runs call (agents and teachers)."""
        return {ref.provider for run in self.model_runs() for ref in (run.model_ref(), run.teacher) if ref}

    def fingerprint(self) -> str:
        """What makes two runs comparable (resume refuses a different one): not workers or timing."""
        keep = self.model_dump(
            mode="json",
            include={"runs", "providers_mode", "models", "harness", "database", "id_field"},
            exclude={"runs": {"__all__": {"batch", "budget"}}, **SPEED_ONLY},
        )
        return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:16]

    def fingerprint_parts(self) -> dict[str, str]:
        """The fingerprint by part: each run apart (`run:NAME`), so a resume may narrow or widen the runs
        (`--runs`) and a refusal can say which part changed."""

        def digest(v: Any) -> str:
            return hashlib.sha256(json.dumps(v, sort_keys=True).encode()).hexdigest()[:16]

        whole = self.model_dump(
            mode="json",
            include={"providers_mode", "models", "harness", "database", "id_field"},
            exclude=SPEED_ONLY,
        )
        return {
            **{k: digest(v) for k, v in whole.items()},
            **{
                f"run:{r.name}": digest(r.model_dump(mode="json", exclude={"batch", "budget"}))
                for r in self.runs
            },
        }

    def conversation_limit(self) -> float:
        """The per-conversation time limit in force: as set, else the default for how the runs call."""
        if self.conversation_timeout_seconds is not None:
            return self.conversation_timeout_seconds
        return BATCH_CONVERSATION_SECONDS if self.batch_runs() else CONVERSATION_SECONDS

    def batch_runs(self) -> set[str]:
        """The runs whose model calls go through the batch APIs."""
        return {r.name for r in self.runs if (r.batch if r.batch is not None else self.batch.enabled)}

    def model_overrides(self) -> dict[str, dict[str, Any]]:
        return {k: v.model_dump(exclude_none=True) for k, v in self.models.items()}

    def with_original_models(self) -> Config:
        """Each run (and teacher) on its original_model where one is given: the seeds' exact job."""

        def swap(ref: Any) -> Any:
            return ref.model_copy(update={"model": ref.original_model}) if ref.original_model else ref

        runs = [
            swap(r).model_copy(update={"teacher": swap(r.teacher) if r.teacher else None}) for r in self.runs
        ]
        return self.model_copy(update={"runs": runs, "original_models": True})


def _covers_problem(rate_limits: dict[str, LimitSpec]) -> str | None:
    """Each call draws on one budget: a key is covered by one budget at most, and not one of its own."""
    owner: dict[str, str] = {}
    for key, spec in rate_limits.items():
        for covered in spec.covers:
            if covered in rate_limits:
                return (
                    f"rate_limits.{key}.covers: {covered} has a budget of its own "
                    f"(rate_limits.{covered}): drop one of them"
                )
            if covered in owner:
                return f"rate_limits: {covered} is covered by both {owner[covered]} and {key}"
            owner[covered] = key
    return None


def resolve_path(cfg: Config, p: Path) -> Path:
    """A path from the config file, relative to the file's directory."""
    return p if p.is_absolute() else (cfg.config_dir / p).resolve()


# The providers' own base URLs, in the official SDKs' meaning (what `base_url=` takes; see sdk_base_url).
PROVIDER_BASE_URLS = {"anthropic": "https://api.anthropic.com", "openai": "https://api.openai.com/v1"}


def model_endpoints(cfg: Config, sim_url: str | None) -> dict[str, str]:
    """Where each provider's calls go, as SDK base URLs: the simulator, the config's, or the provider's."""
    return {
        p: sdk_base_url(sim_url, p) if sim_url else getattr(cfg, p).base_url or url
        for p, url in PROVIDER_BASE_URLS.items()
    }


def sdk_base_url(root: str, provider: str) -> str:
    """A server's root (the simulator, a gateway) as the provider's SDK takes it: OpenAI's and Vertex's base
    URLs carry the API version (/v1), Anthropic's does not (its SDK puts /v1 in every path), nor do Bedrock's
    (paths start at /model/...) and Azure's (AzureOpenAI's azure_endpoint: it adds /openai/...).
    `anthropic.base_url` and `openai.base_url` mean the same: what the SDK's `base_url=` takes."""
    root = root.rstrip("/")
    return f"{root}/v1" if provider in ("openai", "vertex") else root


def _base_url_problem(provider: str, url: str | None) -> str | None:
    if not url:
        return None
    versioned = url.rstrip("/").endswith("/v1")
    if provider == "openai" and not versioned:
        return (
            f"openai.base_url: {url} is not what the OpenAI SDK takes: its base URL ends in /v1 "
            f"(e.g. https://api.openai.com/v1, or {url.rstrip('/')}/v1)"
        )
    if provider == "anthropic" and versioned:
        return (
            f"anthropic.base_url: {url} ends in /v1, which the Anthropic SDK adds itself: give "
            f"{url.rstrip('/')[:-3]} (e.g. https://api.anthropic.com)"
        )
    return None


def harness_python(cfg: Config) -> Path | None:
    """harness.python as an interpreter's path (a virtualenv's directory means its bin/python)."""
    p = cfg.harness.python
    if p is None:
        return None
    p = resolve_path(cfg, p)
    return p / "bin" / "python" if p.is_dir() else p


def check_harness_python(cfg: Config) -> None:
    """Fail at start, naming the key, on an interpreter that is not there."""
    p = harness_python(cfg)
    if p is not None and not (p.is_file() and os.access(p, os.X_OK)):
        raise ConfigError(
            f"harness.python: {p} is not an executable Python interpreter (give a virtualenv's "
            "bin/python or its directory)"
        )


def gateway_use(cfg: Config) -> str | None:
    """Why a user's harness gets the gateway's variables, or None: it gets none of ours (no base URL, no key
    it did not have), so a harness that turns a judge on when a key is set behaves as it would alone."""
    # its calls go through the runner's own clients, batched ones by the gateway
    if cfg.harness.kind == "crm":
        return f"batch mode for {', '.join(sorted(runs))}" if (runs := cfg.batch_runs()) else None
    if cfg.gateway is False:
        return None
    if cfg.gateway is True:
        return "gateway: true"
    keys = [API_KEY_ENV[p] for p in environment().keys]
    if keys:
        return f"{' and '.join(keys)} set: its calls go through the gateway"
    return "providers: sim" if cfg.providers_mode == "sim" else None


def resolve_mode(cfg: Config) -> Literal["real", "sim"]:
    """auto: the real providers when every credential they need is set (an API key; a cloud's credentials as
    its SDK finds them in the environment), else the simulator."""
    if cfg.providers_mode != "auto":
        return cfg.providers_mode
    runs = cfg.model_runs()
    env = environment()
    if not runs:  # a user's harness: which providers it calls is its own business
        return "real" if env.keys else "sim"
    needed = {r.provider for r in runs if r.provider} | {r.teacher.provider for r in runs if r.teacher}
    return "real" if all(env.has_credentials(p) for p in needed) else "sim"


def api_key(provider: str) -> str | None:
    return environment().api_key(provider)


def _line_of(node: yaml.Node | None, loc: tuple[int | str, ...]) -> int | None:
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((v for k, v in node.value if k.value == part), None)
            if match is None:
                break
            node = match
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            break
        line = node.start_mark.line + 1
    return line


# Field -> the name users write (YAML key = flag): kept apart so fingerprints of earlier runs still match.
EXTERNAL_NAMES = {"providers_mode": "providers", "force": "force_resume", "output_dir": "out"}


# ${VAR} or ${VAR:-default}; $${ is a literal ${. Distinct from the harness's {placeholders}, which are
# filled per record: these are filled once, when the config is read.
_VAR = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _variables(config_dir: Path) -> dict[str, str]:
    """The environment, over the .env beside the config (python-dotenv's rule: it never overrides)."""
    from dotenv import dotenv_values

    dotenv = config_dir / ".env"
    found = {k: v for k, v in dotenv_values(dotenv).items() if v is not None} if dotenv.is_file() else {}
    return {**found, **os.environ}


def _interpolate(node: yaml.Node | None, variables: dict[str, str], path: Path) -> None:
    """Fill ${VAR} in every string of the document, in place; an unset one without a default names
    file:line."""
    if isinstance(node, yaml.ScalarNode) and "$" in node.value:

        def fill(m: re.Match[str]) -> str:
            if m.group(0) == "$${":
                return "${"
            name, default = m.group(1), m.group(2)
            if name in variables:
                return variables[name]
            if default is not None:
                return default
            raise ConfigError(
                f"${{{name}}} is not set (export it, put it in the .env beside the config, or write "
                f"${{{name}:-default}})",
                where=f"{path}:{node.start_mark.line + 1}",
            )

        value = _VAR.sub(fill, node.value)
        if value != node.value:
            node.value = value
            if node.style is None:  # a plain scalar is typed by what it now says (a number, true, ...)
                node.tag = yaml.resolver.Resolver().resolve(yaml.ScalarNode, value, (True, False))
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _interpolate(item, variables, path)
    elif isinstance(node, yaml.MappingNode):
        for _, value_node in node.value:
            _interpolate(value_node, variables, path)


# What `runner gateway` reads of a config; a file holding only these is a whole gateway config.
GATEWAY_KEYS = (
    "rate_limits",
    "retry",
    "anthropic",
    "openai",
    "bedrock",
    "vertex",
    "azure",
    "models",
    "cache",
    "cache_dir",
    "adaptive_concurrency",
    "batch",
    "out",
)


def load_config(
    path: str | Path | None = None, overrides: dict[str, Any] | None = None, *, gateway_only: bool = False
) -> Config:
    """Read, fill ${VAR}s, merge flags, validate. Relative paths in the file are relative to the file.
    `gateway_only`: the file may hold only GATEWAY_KEYS (no dataset or runs: the gateway runs none)."""
    path = Path(path) if path else DEFAULT_CONFIG
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read config: {e.strerror}", where=str(path)) from None
    try:
        node = yaml.compose(text)
        if "$" in text:
            _interpolate(node, _variables(path.parent), path)
        data = (yaml.safe_load(yaml.serialize(node)) if node is not None else None) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(f"not valid YAML: {getattr(e, 'problem', e)}", where=where) from None
    if not isinstance(data, dict):
        raise ConfigError("the config must be a mapping", where=str(path))
    if isinstance(data.get("dataset"), str) and not Path(data["dataset"]).is_absolute():
        data["dataset"] = str((path.parent / data["dataset"]).resolve())
    data["config_dir"] = str(path.parent.resolve())
    if gateway_only:
        data.setdefault("dataset", "(the gateway reads no dataset)")
        data.setdefault("runs", [{"name": "gateway"}])
        data.setdefault("harness", {"kind": "python", "entrypoint": "gateway:none"})
    for key, name in EXTERNAL_NAMES.items():  # one spelling before the flags merge in
        if name in data:
            data[key] = data.pop(name)
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    if given.get("last_failed"):  # a cached answer would only replay the failure --lf reruns, at $0
        given["cache"] = False
    if "concurrency" in given:  # --concurrency re-splits: the file's workers/slots yield unless also flags
        for key in ("workers", "slots"):
            if key not in given:
                data.pop(key, None)
    data.update(given)
    try:
        cfg = Config.model_validate(data)
        return cfg.with_original_models() if cfg.original_models else cfg
    except ValidationError as e:
        raise _invalid(e, node, path, overrides or {}) from None


def _invalid(
    e: ValidationError, node: yaml.Node | None, path: Path, overrides: dict[str, Any]
) -> ConfigError:
    """The first validation error as one line: the field as the user wrote it, where (file:line, or the
    command line), what is wrong with it."""
    first = e.errors()[0]
    loc = tuple(first["loc"])
    if loc and loc[0] in EXTERNAL_NAMES and loc[0] not in overrides:
        loc = (EXTERNAL_NAMES[str(loc[0])], *loc[1:])  # as the user wrote it
    in_file = loc and loc[0] not in overrides
    line = _line_of(node, loc) if in_file else None
    field = ".".join(map(str, loc)) or "(config)"
    where = f"{path}:{line}" if line else (str(path) if in_file else "command line")
    more = f" (and {len(e.errors()) - 1} more)" if len(e.errors()) > 1 else ""
    said = _unknown_key(loc) if first["type"] == "extra_forbidden" else first["msg"]
    return ConfigError(f"{field}: {said}{more}", where=where)


def _unknown_key(loc: tuple[int | str, ...]) -> str:
    """A key no setting has, with the one nearest in spelling where `loc` points (pydantic's own words were
    "Extra inputs are not permitted", and no hint)."""
    known = _settings_at(loc[:-1])
    near = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
    return "not a setting" + (
        f"; did you mean {near[0]}?"
        if near
        else f" here (there: {', '.join(sorted(known))})"
        if 0 < len(known) <= 12
        else ""
    )


def _settings_at(loc: tuple[int | str, ...]) -> list[str]:
    """The keys a config may hold at `loc` (field names, list indices, dict keys, from the top), as users
    write them."""
    ann: Any = Config
    for part in loc:
        ann = _unwrap(ann)
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            fields = ann.model_fields
            field = fields.get(str(part)) or next((f for f in fields.values() if f.alias == part), None)
            if field is None:
                return []
            ann = field.annotation
        else:  # a list's index or a dict's key: into the type of its items
            args = typing.get_args(ann)
            if not args:
                return []
            ann = args[-1]
    ann = _unwrap(ann)
    if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
        return []
    names = [f.alias or name for name, f in ann.model_fields.items() if name != "config_dir"]
    return [EXTERNAL_NAMES.get(n, n) for n in names] if ann is Config else names


def _unwrap(ann: Any) -> Any:
    """X out of X | None."""
    args = [a for a in typing.get_args(ann) if a is not type(None)]
    return args[0] if typing.get_origin(ann) in (typing.Union, types.UnionType) and len(args) == 1 else ann
