"""How the gateway authenticates to a cloud: with the credentials of its own environment, found as the
cloud's SDK finds them, or on the simulator with stand-ins. A caller's credential (the run's token) never
goes on.

- Azure OpenAI: `api-key: AZURE_OPENAI_API_KEY`, or a Microsoft Entra token (AZURE_OPENAI_AD_TOKEN) as a
  bearer token, as openai.AzureOpenAI sends them.
- Vertex AI: a Google OAuth access token (GOOGLE_OAUTH_ACCESS_TOKEN, else Application Default Credentials,
  refreshed by google-auth when they expire), as anthropic.AnthropicVertex sends it.
- Bedrock: a Bedrock API key (AWS_BEARER_TOKEN_BEDROCK) as a bearer token, else a SigV4 signature made for
  each attempt over the exact URL and body sent (botocore's signer, as anthropic.AnthropicBedrock signs),
  with the AWS SDK's credential chain (environment, profile, instance role).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from runner.clouds import SIM_CREDENTIALS
from runner.config import environment
from runner.gateway.batch_wire import AwsSigner

Signer = Callable[[str, bytes, dict[str, str]], dict[str, str]]  # (url, body, headers) -> headers to send
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"


def credential_headers(provider: str, *, simulated: bool) -> dict[str, str]:
    """The headers that present the gateway's credential to `provider` (Bedrock's SigV4: `bedrock_signer`)."""
    env = environment().cloud
    if provider == "azure":
        if simulated:
            return {"api-key": SIM_CREDENTIALS["azure_key"]}
        if token := env.get("AZURE_OPENAI_AD_TOKEN"):
            return {"authorization": f"Bearer {token}"}
        return {"api-key": key} if (key := env.get("AZURE_OPENAI_API_KEY")) else {}
    if provider == "vertex":
        token = (
            SIM_CREDENTIALS["vertex_token"]
            if simulated
            else env.get("GOOGLE_OAUTH_ACCESS_TOKEN") or GOOGLE.token()
        )
        return {"authorization": f"Bearer {token}"} if token else {}
    if provider == "bedrock" and not simulated and (key := env.get("AWS_BEARER_TOKEN_BEDROCK")):
        return {"authorization": f"Bearer {key}"}
    return {}


def bedrock_signer(region: str, profile: str | None, *, simulated: bool) -> Signer | None:
    """What signs each Bedrock attempt (None: a Bedrock API key presents the gateway instead)."""
    if not simulated and environment().cloud.get("AWS_BEARER_TOKEN_BEDROCK"):
        return None
    sign = aws_signer(region, profile, simulated=simulated)
    return lambda url, body, headers: sign("POST", url, body, headers, "bedrock")


@functools.lru_cache(maxsize=16)
def aws_signer(region: str, profile: str | None, *, simulated: bool) -> AwsSigner:
    """What signs a request to an AWS service with SigV4 (botocore's signer, the AWS SDK's credential chain):
    `sign(method, url, body, headers, signing name)` -> the headers to send. One per region and profile for
    the gateway's life: the credential chain is walked once (an instance role's is a network call), and
    botocore refreshes what it found as it nears expiry."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    if simulated:
        creds: Any = Credentials(SIM_CREDENTIALS["aws_access_key"], SIM_CREDENTIALS["aws_secret_key"])
    else:
        import boto3

        creds = boto3.Session(profile_name=profile).get_credentials()

    def sign(method: str, url: str, body: bytes, headers: dict[str, str], service: str) -> dict[str, str]:
        if creds is None:
            raise RuntimeError(
                "no AWS credentials in the gateway's environment (AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or AWS_BEARER_TOKEN_BEDROCK)"
            )
        # refreshable credentials (a role's) are read frozen at each signature; `connection` is not signed,
        # as the SDK leaves it out (a proxy may drop it)
        kept = {k: v for k, v in headers.items() if k.lower() != "connection"}
        req = AWSRequest(method=method, url=url, data=body, headers=kept)
        SigV4Auth(creds.get_frozen_credentials(), service, region).add_auth(req)
        return dict(req.headers.items())

    return sign


class GoogleToken:
    """Application Default Credentials' access token, refreshed as it nears its expiry."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._creds: Any = None

    def token(self) -> str | None:
        with self._lock:
            try:
                if self._creds is None:
                    import google.auth

                    self._creds, _ = google.auth.default(scopes=[CLOUD_PLATFORM])
                if not self._creds.valid:  # no token yet, or one about to expire (google-auth's own margin)
                    import google.auth.transport.requests

                    self._creds.refresh(google.auth.transport.requests.Request())
                return str(self._creds.token)
            except Exception:  # no ADC here (DefaultCredentialsError), or google-auth not installed
                return None


GOOGLE = GoogleToken()
