"""Where a cloud's model calls go, resolved once from the config and the environment as each cloud's SDK
resolves them: Amazon Bedrock (anthropic.AnthropicBedrock), Google Vertex AI (anthropic.AnthropicVertex) and
Azure OpenAI (openai.AzureOpenAI).

A run's own block (`runs[].bedrock`, ...) wins over the config's top-level block field by field, and a field
set in neither is read from the variable the SDK reads (AWS_REGION, CLOUD_ML_REGION, AZURE_OPENAI_ENDPOINT,
...). What a call cannot go without (a region, a project, an API version; on the real clouds the Azure
resource) is a ConfigError at start naming the setting, the variable and who needs it. On the simulator its
address replaces the cloud's host, and stand-in credentials (SIM_CREDENTIALS) replace the real ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from runner.config import (
    CLOUD_CREDENTIALS,
    CLOUDS,
    SIM_AWS_KEY,
    AzureSettings,
    BedrockSettings,
    CloudSettings,
    Config,
    ModelRef,
    VertexSettings,
    environment,
)
from runner.errors import ConfigError

DEFAULT_TIMEOUT_SECONDS = 60.0
# What the runner presents to the simulator in each cloud's place: an AWS key pair to sign with (20
# characters, as an access key id is), a Google access token, an Azure key.
SIM_CREDENTIALS = {
    "aws_access_key": SIM_AWS_KEY[0],
    "aws_secret_key": SIM_AWS_KEY[1],
    "vertex_token": "simulator-token",
    "azure_key": "simulator-key",
}


@dataclass(frozen=True)
class BedrockTarget:
    region: str
    profile: str | None
    base_url: str | None  # set: the config's or ANTHROPIC_BEDROCK_BASE_URL; None: the region's own
    timeout: float
    batch_s3_uri: str | None = None  # batch mode's files (s3://bucket/prefix/)
    batch_role_arn: str | None = None  # the role its jobs run as
    control_url: str | None = None
    s3_url: str | None = None

    def endpoint(self) -> str:
        """What AnthropicBedrock's base_url is (its paths start at /model/...)."""
        return self.base_url or f"https://bedrock-runtime.{self.region}.amazonaws.com"

    def control(self) -> str:
        """Bedrock's control plane, where batch inference jobs are made."""
        return (self.control_url or f"https://bedrock.{self.region}.amazonaws.com").rstrip("/")

    def s3(self) -> str:
        return (self.s3_url or f"https://s3.{self.region}.amazonaws.com").rstrip("/")


@dataclass(frozen=True)
class VertexTarget:
    project: str
    region: str
    base_url: str | None
    timeout: float
    batch_gcs_uri: str | None = None  # batch mode's files (gs://bucket/prefix/)
    storage_url: str | None = None

    def control(self) -> str:
        """Where the location's batch prediction jobs are (the aiplatform host rawPredict goes to)."""
        return f"{self.endpoint().rstrip('/')}/projects/{self.project}/locations/{self.region}"

    def storage(self) -> str:
        return (self.storage_url or "https://storage.googleapis.com").rstrip("/")

    def endpoint(self) -> str:
        """What AnthropicVertex's base_url is (with /v1: its paths start at /projects/...), as the SDK picks
        it for the region: the global and multi-region hosts apart."""
        if self.base_url:
            return self.base_url
        hosts = {
            "global": "aiplatform.googleapis.com",
            "us": "aiplatform.us.rep.googleapis.com",
            "eu": "aiplatform.eu.rep.googleapis.com",
        }
        host = hosts.get(self.region, f"{self.region}-aiplatform.googleapis.com")
        return f"https://{host}/v1"


@dataclass(frozen=True)
class AzureTarget:
    resource: str  # the resource's endpoint (AzureOpenAI's azure_endpoint); "" on the simulator if unset
    api_version: str
    deployment: str
    batch_deployment: str
    timeout: float

    def endpoint(self) -> str:
        return self.resource


Target = BedrockTarget | VertexTarget | AzureTarget


def clouds_used(cfg: Config) -> set[str]:
    """The clouds a config sets up: a run (or teacher) calls one, or its top-level block is given (a user's
    harness calls it through the gateway)."""
    called = {p for p in cfg.providers_called() if p in CLOUDS}
    return {c for c in CLOUDS if c in cfg.model_fields_set} | called


def settings_of(cfg: Config, ref: ModelRef) -> CloudSettings:
    """The ref's cloud settings: its own block over the config's, field by field."""
    return settings_over(getattr(cfg, ref.provider), ref)


def settings_over(top: CloudSettings, ref: ModelRef) -> CloudSettings:
    """The ref's own block for its cloud over `top`, the config's, field by field."""
    own: CloudSettings | None = getattr(ref, ref.provider)
    return top.model_copy(update=own.model_dump(exclude_none=True)) if own is not None else top


def target(cfg: Config, ref: ModelRef, *, mode: Literal["real", "sim"], who: str = "") -> Target:
    """Where `ref`'s calls go; ConfigError naming what is missing (`who`: the run and role needing it)."""
    return target_of(settings_of(cfg, ref), ref, mode=mode, who=who)


def target_of(s: CloudSettings, ref: ModelRef, *, mode: Literal["real", "sim"], who: str = "") -> Target:
    """Where `ref`'s calls go, given its cloud settings `s` (settings_of)."""
    env = environment().cloud
    needed = f" (needed by {who})" if who else ""

    def required(value: str | None, setting: str, *variables: str) -> str:
        found = value or next((env[v] for v in variables if env.get(v)), None)
        if not found:
            named = " or ".join(variables)
            raise ConfigError(f"{ref.provider}.{setting} is not set, nor {named} in the environment{needed}")
        return found

    timeout = s.timeout_seconds or DEFAULT_TIMEOUT_SECONDS
    if isinstance(s, BedrockSettings):
        return BedrockTarget(
            required(s.region, "region", "AWS_REGION", "AWS_DEFAULT_REGION"),
            s.profile or env.get("AWS_PROFILE"),
            s.base_url or env.get("ANTHROPIC_BEDROCK_BASE_URL"),
            timeout,
            s.batch_s3_uri,
            s.batch_role_arn,
            s.control_url,
            s.s3_url,
        )
    if isinstance(s, VertexSettings):
        return VertexTarget(
            required(s.project, "project", "ANTHROPIC_VERTEX_PROJECT_ID"),
            required(s.region, "region", "CLOUD_ML_REGION"),
            s.base_url or env.get("ANTHROPIC_VERTEX_BASE_URL"),
            timeout,
            s.batch_gcs_uri,
            s.storage_url,
        )
    assert isinstance(s, AzureSettings)
    resource = (
        required(s.endpoint, "endpoint", "AZURE_OPENAI_ENDPOINT")
        if mode == "real"
        else s.endpoint or env.get("AZURE_OPENAI_ENDPOINT", "")
    )
    deployment = s.deployment or ref.model
    return AzureTarget(
        resource.rstrip("/"),
        required(s.api_version, "api_version", "OPENAI_API_VERSION"),
        deployment,
        s.batch_deployment or deployment,
        timeout,
    )


# What each cloud's client needs beyond the SDK itself (the anthropic SDK's own extras): botocore signs every
# Bedrock request and reads its event streams; google-auth finds Application Default Credentials.
EXTRAS = {"bedrock": ("botocore", "botocore"), "vertex": ("google.auth", "google-auth")}


def check_extras(provider: str, who: str, *, needs_google_auth: bool) -> None:
    """ConfigError naming the install line when the cloud's client would fail on its first call."""
    import importlib.util

    if provider not in EXTRAS or (provider == "vertex" and not needs_google_auth):
        return
    module, package = EXTRAS[provider]
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package missing (google)
        found = False
    if not found:
        raise ConfigError(
            f"{provider} needs {package} (needed by {who}): pip install 'pgsandbox-runner[clouds]'"
        )


def check_credentials(provider: str, target: Target, who: str) -> None:
    """On the real clouds: ConfigError unless the cloud's SDK will find credentials (the environment's, else
    the AWS SDK's chain: config files, an instance role; Google's Application Default Credentials)."""
    if environment().has_credentials(provider):
        return
    found = False
    if isinstance(target, BedrockTarget):
        try:
            import boto3

            found = boto3.Session(profile_name=target.profile).get_credentials() is not None
        except Exception:  # botocore's ProfileNotFound and the like: no credentials, said below
            found = False
    elif isinstance(target, VertexTarget):
        try:
            import google.auth

            google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
            found = True
        except Exception:  # DefaultCredentialsError, or google-auth not installed
            found = False
    if not found:
        sets = " or ".join("+".join(names) for names in CLOUD_CREDENTIALS[provider])
        extra = {
            "bedrock": ", or an AWS profile with credentials",
            "vertex": ", or Application Default Credentials (gcloud auth application-default login)",
        }
        raise ConfigError(
            f"no {provider} credentials: set {sets}{extra.get(provider, '')} (needed by {who}; "
            "or run on the simulator: --providers sim)"
        )


def azure_deployments(cfg: Config) -> dict[str, str]:
    """The Azure deployments the config's runs call, each to the model it serves (for the simulator, which,
    as a resource, serves the deployments made on it)."""
    out: dict[str, str] = {}
    for r in cfg.model_runs():
        for ref in (r.model_ref(), r.teacher):
            if ref is not None and ref.provider == "azure":
                s = settings_of(cfg, ref)
                assert isinstance(s, AzureSettings)
                deployment = s.deployment or ref.model
                out.update({deployment: ref.model, s.batch_deployment or deployment: ref.model})
    return out


def gateway_target(cfg: Config, cloud: str, mode: Literal["real", "sim"]) -> Target | None:
    """The one place a gateway sends a cloud's calls: the first run's of that cloud, else the config's block
    and the environment; None where they say too little (no region: the gateway then refuses those calls)."""
    refs = [
        ref
        for r in cfg.model_runs()
        for ref in (r.model_ref(), r.teacher)
        if ref is not None and ref.provider == cloud
    ]
    try:
        return target(cfg, refs[0] if refs else ModelRef(provider=cloud, model=""), mode=mode)
    except ConfigError:
        return None


def cloud_endpoints(cfg: Config, sim_url: str | None) -> dict[str, str]:
    """Where each cloud the config uses sends its calls, as its SDK's base URL (the manifest's `endpoints`):
    the simulator's address, else the cloud's. A run on a region or resource of its own is named apart."""
    from runner.config import sdk_base_url

    mode: Literal["real", "sim"] = "sim" if sim_url else "real"
    out: dict[str, str] = {}
    refs = [(r.name, ref) for r in cfg.model_runs() for ref in (r.model_ref(), r.teacher) if ref is not None]
    for cloud in sorted(clouds_used(cfg)):
        mine = [(run, ref) for run, ref in refs if ref.provider == cloud] or [
            ("", ModelRef(provider=cloud, model=""))
        ]
        for run, ref in mine:
            try:
                where = target(cfg, ref, mode=mode).endpoint()
            except ConfigError:
                continue  # a user's harness with nothing set: its calls go where its own SDK says
            if sim_url:
                where = sdk_base_url(sim_url, cloud)
            key = cloud if out.get(cloud, where) == where else f"{cloud} ({run})"
            out[key] = where
    return out


__all__ = [
    "CLOUDS",
    "SIM_CREDENTIALS",
    "AzureTarget",
    "BedrockTarget",
    "Target",
    "VertexTarget",
    "azure_deployments",
    "check_credentials",
    "check_extras",
    "cloud_endpoints",
    "clouds_used",
    "gateway_target",
    "settings_of",
    "target",
]
