"""Claude on Google Vertex AI: Anthropic's Messages body through the anthropic SDK's AnthropicVertex, which
moves the model into the path (POST /v1/projects/{project}/locations/{region}/publishers/anthropic/models/
{model}:rawPredict, or :streamRawPredict), puts `anthropic_version` in the body and presents a Google OAuth
access token. Requests and responses are built and read as the Anthropic provider's.

Every call goes through the SDK's own request code (the path depends on each body's model and `stream`)."""

from __future__ import annotations

from runner.clouds import VertexTarget
from runner.models.anthropic import AnthropicProvider


class VertexProvider(AnthropicProvider):
    name = "vertex"
    request_id_header = "x-request-id"  # undocumented for rawPredict: kept where a proxy sets one

    def __init__(
        self,
        target: VertexTarget,
        *,
        base_url: str | None,
        timeout: float,
        access_token: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """`access_token`: presented as is; None: Google's Application Default Credentials, refreshed by the
        SDK (google-auth)."""
        import anthropic

        client = anthropic.AnthropicVertex(
            region=target.region,
            project_id=target.project,
            access_token=access_token,
            base_url=base_url or target.base_url,
            timeout=timeout,
            max_retries=0,
            default_headers=headers,
        )
        self._over(client, timeout=timeout, lean=False)
