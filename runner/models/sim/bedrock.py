"""Amazon Bedrock's runtime as the simulator serves Claude on it (clouds.yaml `bedrock`):

- `POST /model/{modelId}/invoke` and `/model/{modelId}/invoke-with-response-stream` (bedrock.endpoints,
  aws-invoke-model, botocore-runtime); the model id in the path, an ARN percent-encoded into one segment;
- a SigV4 signature in Bedrock's form and of the right value, or a Bedrock API key as a bearer token
  (bedrock.auth; sigv4.py);
- the Messages body with `anthropic_version` and without `model` (bedrock.request_body), then held to the
  same rules as the Claude API's body (strict.py, the published rules of the model the id names);
- errors as `{"message"}` with `X-Amzn-Errortype` (dialect.py); the stream in AWS event-stream framing
  (eventstream.py), each chunk one Messages stream event.

The runtime's error messages are not documented (bedrock.errors_note): the words here are the simulator's.
Where the fixture leaves the service's answer unknown, the route refuses what the official SDK never sends
(unknown: "Whether Bedrock / Vertex REJECT or IGNORE `model` (and Bedrock `stream`) in the body"): a body
`model` or `stream` (AnthropicBedrock pops both), and `inference_geo` (bedrock.request_body.inference_geo:
the Claude API's only). The fields an older page lists (bedrock.request_body.documented_fields) are not
enforced: that list predates thinking and effort, which the same page's newer models take.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from runner.models.sim import cloud_ids, cloudbook, sigv4
from runner.models.sim.dialect import BEDROCK
from runner.models.sim.translate import answer, json_object, refused

NOT_SENT_BY_THE_SDK = ("model", "stream", "inference_geo")


async def invoke(request: web.Request) -> web.StreamResponse:
    return await _invoke(request, stream=False)


async def invoke_with_response_stream(request: web.Request) -> web.StreamResponse:
    return await _invoke(request, stream=True)


async def _invoke(request: web.Request, *, stream: bool) -> web.StreamResponse:
    if (bad := await sigv4.refusal(request)) is not None:
        return refused(request, BEDROCK.error(bad.status, bad.message, code=bad.type))
    model_id = request.match_info["model_id"]
    named = cloud_ids.bedrock(model_id)
    if named.model is None:
        return refused(request, BEDROCK.error(404, f"model {model_id}: no such model or inference profile"))
    if named.refusal is not None:
        return refused(request, BEDROCK.error(400, named.refusal))
    body = await json_object(request, BEDROCK)
    if isinstance(body, web.Response):
        return refused(request, body)
    if (problem := body_problem(body)) is not None:
        return refused(request, BEDROCK.error(400, problem))
    betas = body.pop("anthropic_beta", None)
    body.pop("anthropic_version")
    body.pop("user_profile_id", None)  # the SDK's anthropic-user-profile-id header, moved into the body
    return await answer(
        request,
        BEDROCK,
        {**body, **({"stream": True} if stream else {})},
        plays=named.model,
        limit_key=model_id,
        headers={"anthropic-beta": ",".join(betas)} if betas else None,
    )


def body_problem(body: dict[str, Any]) -> str | None:
    """What of a Bedrock body the service refuses before the Messages API's own rules (ValidationException;
    the runtime's wording is not documented: these are the simulator's words)."""
    for key in NOT_SENT_BY_THE_SDK:
        if key in body:
            return (
                f"{key}: not taken in an InvokeModel body (the model and streaming are the path's; the "
                "region is the endpoint's)"
            )
    version = body.get("anthropic_version")
    wanted = cloudbook.at("bedrock.request_body.anthropic_version.value")
    if version is None:
        return f"anthropic_version: required in the body ({wanted})"
    if version not in cloudbook.anthropic_versions("bedrock"):
        return f"anthropic_version: {version!r} is not a version Bedrock takes ({wanted})"
    betas = body.get("anthropic_beta")
    if betas is not None and not (isinstance(betas, list) and all(isinstance(b, str) for b in betas)):
        # bedrock.request_body.anthropic_beta (aws-claude-req-resp)
        return "anthropic_beta: an array of strings"
    return None


def add_routes(app: web.Application) -> None:
    app.add_routes(
        [
            web.post("/model/{model_id:.+}/invoke", invoke),
            web.post("/model/{model_id:.+}/invoke-with-response-stream", invoke_with_response_stream),
        ]
    )
