"""Google Vertex AI as the simulator serves Claude on it (clouds.yaml `vertex`):

- `POST /v1/projects/{project}/locations/{location}/publishers/anthropic/models/{model}:rawPredict` and
  `:streamRawPredict` (vertex.endpoints, sdk-vertex, gcp-use-claude); any project and location are served;
- an OAuth access token as `Authorization: Bearer` (vertex.auth), else 401 UNAUTHENTICATED in the body a
  user quoted from aiplatform (vertex.errors.unauthenticated_observed, inferred: no Claude page gives it);
- the Messages body with `anthropic_version` and without `model` (vertex.request_body: "model is not passed
  in the request body"), then held to the Claude API's rules; streamed as its server-sent events;
- errors in Google's envelope, `{"error": {"code", "message", "status"}}` (vertex.errors.envelope).

Unknown there: whether a body `model` is refused or ignored (refused here: the SDK pops it), and the
wording of every refusal but the 401 (the messages here are the simulator's).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from runner.models.sim import cloud_ids, cloudbook
from runner.models.sim.dialect import VERTEX
from runner.models.sim.translate import answer, json_object, refused

PATH = "/v1/projects/{project}/locations/{location}/publishers/anthropic/models/{model}"


async def raw_predict(request: web.Request) -> web.StreamResponse:
    return await _predict(request, stream=False)


async def stream_raw_predict(request: web.Request) -> web.StreamResponse:
    return await _predict(request, stream=True)


def unauthenticated() -> web.Response:
    observed = cloudbook.at("vertex.errors.unauthenticated_observed")
    body = {
        "error": {
            "code": 401,
            "message": observed["message"],
            "status": "UNAUTHENTICATED",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": observed["details_reason"],
                    "domain": "googleapis.com",
                }
            ],
        }
    }
    return web.json_response(body, status=401)


async def _predict(request: web.Request, *, stream: bool) -> web.StreamResponse:
    token = request.headers.get("authorization", "")
    if not token.startswith("Bearer ") or not token[7:].strip():
        return refused(request, unauthenticated())
    m = request.match_info
    named = cloud_ids.vertex(m["model"])
    if named.model is None:
        name = f"projects/{m['project']}/locations/{m['location']}/publishers/anthropic/models/{m['model']}"
        return refused(request, VERTEX.error(404, f"Publisher Model `{name}` was not found."))
    body = await json_object(request, VERTEX)
    if isinstance(body, web.Response):
        return refused(request, body)
    if (problem := body_problem(body)) is not None:
        return refused(request, VERTEX.error(400, problem))
    body.pop("anthropic_version")
    body.pop("stream", None)  # the method decides (the SDK picks it by the body's stream, which it keeps)
    return await answer(
        request,
        VERTEX,
        {**body, **({"stream": True} if stream else {})},
        plays=named.model,
        limit_key=m["model"],
    )


def body_problem(body: dict[str, Any]) -> str | None:
    if "model" in body:
        return "Invalid request: `model` is not passed in the request body: it is the endpoint URL's"
    version = body.get("anthropic_version")
    if version not in cloudbook.anthropic_versions("vertex"):
        want = cloudbook.at("vertex.request_body.anthropic_version.value")
        said = f" (not {version!r})" if version else ""
        return f"Invalid request: anthropic_version must be set to {want}{said}"
    return None


def add_routes(app: web.Application) -> None:
    app.add_routes(
        [
            web.post(PATH + ":rawPredict", raw_predict),
            web.post(PATH + ":streamRawPredict", stream_raw_predict),
        ]
    )
