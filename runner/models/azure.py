"""GPT models on Azure OpenAI: OpenAI's Chat Completions body through the openai SDK's AzureOpenAI, to the
resource's deployment (POST /openai/deployments/{deployment}/chat/completions?api-version=...) with its
`api-key` (or an Entra token). Requests and responses are built and read as the OpenAI provider's.

The request's path, query and headers do not change from call to call (the deployment is fixed per
provider), so on the simulator calls go out lean as the OpenAI provider's do (runner/models/wire.py)."""

from __future__ import annotations

from runner.clouds import AzureTarget
from runner.models.openai import OpenAIProvider


class AzureProvider(OpenAIProvider):
    name = "azure"

    def __init__(
        self,
        target: AzureTarget,
        *,
        endpoint: str | None,
        timeout: float,
        api_key: str | None = None,
        headers: dict[str, str] | None = None,
        lean: bool = False,
    ) -> None:
        """`endpoint`: where the resource is served (the simulator, a gateway; None: the target's resource);
        `api_key` None: the SDK reads AZURE_OPENAI_API_KEY or AZURE_OPENAI_AD_TOKEN."""
        import openai

        client = openai.AzureOpenAI(
            azure_endpoint=endpoint or target.resource,
            azure_deployment=target.deployment,
            api_version=target.api_version,
            api_key=api_key,
            timeout=timeout,
            max_retries=0,
            default_headers=headers,
        )
        self._over(client, timeout=timeout, lean=lean)
