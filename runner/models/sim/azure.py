"""Azure OpenAI as the simulator serves GPT models on it (clouds.yaml `azure`):

- `POST /openai/deployments/{deployment}/chat/completions?api-version=YYYY-MM-DD` (azure.endpoints.
  dated_legacy, ms-reference) and `POST /openai/v1/chat/completions`, the deployment in the body's `model`
  (azure.endpoints.v1, ms-v1; azure.deployment_vs_model);
- the key in `api-key`, or an Entra token as `Authorization: Bearer` (azure.auth), else 401 in the body users
  quote (azure.auth.bad_key_body_observed, inferred);
- an api-version the reference does not list as GA, or none, on a dated path: 404 (azure.endpoints.
  api_version_errors.unsupported_on_dated_path: the troubleshooting page lists an unsupported version among
  404's causes; the conflict with third parties' 400 resolved to it; a missing one is unknown and answered
  alike); an api-version on the v1 path: 400 (api_version_on_v1_path, inferred);
- a deployment the resource does not have: 404 DeploymentNotFound (azure.deployment_vs_model.
  unknown_deployment_body_observed, inferred). A resource's deployments are `simulator.deployments`
  (deployment -> model; a run adds its own), and a deployment named as a published model serves it.
The body is then held to OpenAI's Chat Completions rules, answered in OpenAI's format and rate-limit
headers (azure.rate_limits.headers).
"""

from __future__ import annotations

from aiohttp import web

from runner.models.sim import cloudbook, rulebook
from runner.models.sim.dialect import AZURE
from runner.models.sim.translate import answer, json_object, refused


def credentials_missing(request: web.Request) -> web.Response | None:
    """401 unless an `api-key` or a bearer token is presented."""
    bearer = request.headers.get("authorization", "")
    if request.headers.get("api-key") or (bearer.startswith("Bearer ") and bearer[7:].strip()):
        return None
    body = cloudbook.at("azure.auth.bad_key_body_observed.body")
    return refused(request, web.json_response(text=body, status=401))


def served(request: web.Request, deployment: str) -> str | None:
    """The model a deployment of the resource serves (None: the resource has no such deployment)."""
    made = request.app["state"].settings.deployments
    if deployment in made:
        return str(made[deployment])
    return deployment if rulebook.book("openai").resolve(deployment) is not None else None


def deployment_not_found(request: web.Request) -> web.Response:
    body = cloudbook.at("azure.deployment_vs_model.unknown_deployment_body_observed.body")
    return refused(request, web.json_response(text=body, status=404))


async def dated_chat(request: web.Request) -> web.StreamResponse:
    if (missing := credentials_missing(request)) is not None:
        return missing
    if request.query.get("api-version") not in cloudbook.azure_api_versions():
        # the body is not documented: the simulator's words, in the shape of Azure's other errors
        return refused(
            request,
            web.json_response({"error": {"code": "404", "message": "Resource not found"}}, status=404),
        )
    deployment = request.match_info["deployment"]
    model = served(request, deployment)
    if model is None:
        return deployment_not_found(request)
    body = await json_object(request, AZURE)
    if isinstance(body, web.Response):
        return refused(request, body)
    return await answer(request, AZURE, body, plays=model, limit_key=deployment)


async def v1_chat(request: web.Request) -> web.StreamResponse:
    if "api-version" in request.query:
        body = cloudbook.at("azure.endpoints.api_version_errors.api_version_on_v1_path.body")
        return refused(request, web.json_response(text=body, status=400))
    if (missing := credentials_missing(request)) is not None:
        return missing
    body = await json_object(request, AZURE)
    if isinstance(body, web.Response):
        return refused(request, body)
    deployment = str(body.get("model") or "")
    model = served(request, deployment)
    if model is None:
        return deployment_not_found(request)
    return await answer(request, AZURE, body, plays=model, limit_key=deployment)


def add_routes(app: web.Application) -> None:
    app.add_routes(
        [
            web.post("/openai/deployments/{deployment}/chat/completions", dated_chat),
            web.post("/openai/v1/chat/completions", v1_chat),
        ]
    )
