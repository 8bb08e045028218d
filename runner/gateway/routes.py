"""Which provider a caller's path is for, and what the path itself says of the call.

The first-party APIs name the model in the body; the clouds name it in the path: Bedrock
`/model/{modelId}/invoke` (or `/invoke-with-response-stream`: the path streams), Vertex AI
`/v1/projects/{project}/locations/{region}/publishers/anthropic/models/{model}:rawPredict` (or
`:streamRawPredict`; `count-tokens:rawPredict` counts tokens), Azure OpenAI
`/openai/deployments/{deployment}/chat/completions?api-version=...` (and the v1 API's
`/openai/v1/chat/completions`, the deployment in the body's `model`). Each route also says which first-party
path speaks the same API (what the cache replays by and what decides whether a batch API takes the call),
and the path the call is keyed by (a streamed and a plain call to Bedrock ask the same question).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote

FIRST_PARTY = {
    "/v1/messages": "anthropic",
    "/v1/messages/count_tokens": "anthropic",
    "/v1/chat/completions": "openai",
    "/v1/responses": "openai",
}
_BEDROCK = re.compile(r"^/model/(?P<model>.+)/(?P<op>invoke|invoke-with-response-stream)$")
_VERTEX = re.compile(
    r"^/v1/projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/publishers/anthropic/"
    r"models/(?P<model>[^/:]+):(?P<op>rawPredict|streamRawPredict)$"
)
_AZURE = re.compile(r"^/openai/deployments/(?P<deployment>[^/]+)/chat/completions$")
AZURE_V1 = "/openai/v1/chat/completions"


@dataclass(frozen=True)
class Route:
    provider: str
    api_path: str  # the first-party path of the same API (/v1/messages, /v1/chat/completions, ...)
    upstream_path: str  # the path sent on, encoded as the cloud takes it (an ARN's / as %2F)
    key_path: str  # the path the cache keys by
    model: str | None = None  # the model (Azure: the deployment) the path names; None: the body's
    streams: bool | None = None  # the path says whether the call streams; None: the body's `stream`
    event_stream: bool = False  # its stream is AWS event-stream framed (Bedrock), not server-sent events


def route_of(path: str) -> Route | None:
    """The route of a decoded path (the run and worker prefix taken off); None: a path the gateway does not
    serve."""
    if path in FIRST_PARTY:
        return Route(FIRST_PARTY[path], path, path, path)
    if m := _BEDROCK.match(path):
        model = m["model"]
        base = f"/model/{quote(model, safe=':;')}"  # as AnthropicBedrock encodes it: one path segment
        return Route(
            "bedrock",
            "/v1/messages",
            f"{base}/{m['op']}",
            f"{base}/invoke",
            model,
            streams=m["op"] != "invoke",
            event_stream=True,
        )
    if m := _VERTEX.match(path):
        head = path.rsplit("/", 1)[0]
        if m["model"] == "count-tokens":  # the model stays in the body
            return Route("vertex", "/v1/messages/count_tokens", path, path)
        segment = quote(m["model"], safe="@")
        return Route(
            "vertex",
            "/v1/messages",
            f"{head}/{segment}:{m['op']}",
            f"{head}/{segment}:rawPredict",
            m["model"],
        )
    if m := _AZURE.match(path):
        return Route("azure", "/v1/chat/completions", path, path, m["deployment"])
    if path == AZURE_V1:
        return Route("azure", "/v1/chat/completions", path, path)
    return None
