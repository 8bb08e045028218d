"""Claude on Amazon Bedrock: Anthropic's Messages body through the anthropic SDK's AnthropicBedrock, which
moves the model into the path (POST /model/{modelId}/invoke), puts `anthropic_version` in the body, signs
each request with SigV4 (or presents a Bedrock API key) and reads the stream's AWS event-stream framing.
Requests and responses are built and read as the Anthropic provider's (runner/models/anthropic.py).

Every call goes through the SDK's own request code: a signature covers the body, so there is no request to
learn once and resend (runner/models/wire.py's lean path)."""

from __future__ import annotations

from runner.clouds import BedrockTarget
from runner.models.anthropic import AnthropicProvider


class BedrockProvider(AnthropicProvider):
    name = "bedrock"
    request_id_header = "x-amzn-requestid"  # the AWS request id (an SDK reads headers without regard to case)

    def __init__(
        self,
        target: BedrockTarget,
        *,
        base_url: str | None,
        timeout: float,
        aws_keys: tuple[str, str] | None = None,
        api_key: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """`aws_keys` (access key id, secret) sign the calls; `api_key`: a Bedrock API key (or a gateway's
        token) presented as a bearer token instead; neither: the AWS SDK's own chain (environment, profile,
        instance role) signs."""
        import anthropic

        access, secret = aws_keys or (None, None)
        profile = target.profile if aws_keys is None and api_key is None else None
        client = anthropic.AnthropicBedrock(
            aws_region=target.region,
            aws_profile=profile,
            aws_access_key=access,
            aws_secret_key=secret,
            api_key=api_key,
            base_url=base_url or target.base_url,
            timeout=timeout,
            max_retries=0,
            default_headers=headers,
        )
        self._over(client, timeout=timeout, lean=False)
