"""Azure OpenAI's Global Batch as the simulator serves it (clouds.yaml azure.batch, ms-batch, ms-batch-rest):
OpenAI's Batch API on the resource's v1 paths, with Azure's credentials.

- `POST /openai/v1/files` (purpose batch), `POST /openai/v1/batches` with `{"input_file_id", "endpoint":
  "/chat/completions", "completion_window": "24h"}`, `GET /openai/v1/batches/{id}`, its output and error
  files' `GET .../content`, `DELETE` of a file; no api-version on these paths (azure.endpoints.v1).
- Each input line `{"custom_id", "method": "POST", "url": "/v1/chat/completions", "body": {"model":
  "<Global-Batch deployment>", ...}}` (azure.batch.input_line); the batch fails whole, with the codes the
  fixture lists (azure.batch.error_codes), for a deployment the resource lacks (model_not_found), a model
  that differs between lines (model_mismatch), a line's url not the endpoint's (url_mismatch), a window not
  24h ("If you set any other value than 24h your job will fail").
Everything else -- the batch object, its statuses, the output and error files -- is the OpenAI batch API's
(batch_routes.py), each request answered as the deployment's model would answer it interactively.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from runner.models.sim import batch_routes, cloudbook
from runner.models.sim.azure import credentials_missing, served
from runner.models.sim.batches import json_error, openai_batch, openai_lines
from runner.models.sim.dialect import AZURE
from runner.models.sim.translate import json_object, refused

ENDPOINT = "/chat/completions"  # what a create names (azure.batch.create)
LINE_URL = "/v1/chat/completions"  # what each line's url is (azure.batch.input_line)
# the OpenAI batch checks' codes under the names Azure's pages give them (azure.batch.error_codes)
AZURE_CODES = {
    "mismatched_model": "model_mismatch",
    "mismatched_endpoint": "url_mismatch",
    "too_many_requests": "too_many_tasks",
}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _checked(request: web.Request) -> web.Response | None:
    """Azure's refusals on its v1 paths: an api-version (400), no key (401); else the request is marked as
    checked for the OpenAI batch routes that serve it."""
    if "api-version" in request.query:
        body = cloudbook.at("azure.endpoints.api_version_errors.api_version_on_v1_path.body")
        return refused(request, web.json_response(text=body, status=400))
    if (missing := credentials_missing(request)) is not None:
        return missing
    request[batch_routes.CHECKED] = True
    return None


def _as_openai(handler: Handler) -> Handler:
    async def serve(request: web.Request) -> web.StreamResponse:
        return bad if (bad := _checked(request)) is not None else await handler(request)

    return serve


async def create(request: web.Request) -> web.StreamResponse:
    if (bad := _checked(request)) is not None:
        return bad
    body = await json_object(request, AZURE)
    if isinstance(body, web.Response):
        return body
    if body.get("endpoint") != ENDPOINT:
        said = f"endpoint: the simulator batches {ENDPOINT} ({body.get('endpoint')!r})"
        return json_error("openai", 400, said, param="endpoint")
    found = request.app["batches"].files.get(str(body.get("input_file_id")))
    if found is None:
        return json_error(
            "openai", 404, f"No such File object: {body.get('input_file_id')}", param="input_file_id"
        )
    entries, problems = _entries(request, found[1], body)
    b = request.app["batches"].new(
        "openai",
        f"batch_{uuid.uuid4().hex[:24]}",
        entries,
        request.headers,
        endpoint=ENDPOINT,
        input_file_id=body["input_file_id"],
        metadata=body.get("metadata"),
        failed=problems or None,
    )
    await asyncio.sleep(request.app["batches"].settings.create_seconds)
    return web.json_response(
        {**openai_batch(b), "status": "validating", "in_progress_at": None, "failed_at": None, "errors": None}
    )


def _entries(
    request: web.Request, data: bytes, body: dict[str, Any]
) -> tuple[list[tuple[str, dict[str, Any]]], list[dict[str, Any]]]:
    """The file's requests, each to the model its deployment serves; or the problems that fail the batch."""

    def problem(code: str, message: str) -> list[dict[str, Any]]:
        return [{"code": code, "line": None, "message": message, "param": None}]

    if body.get("completion_window") != "24h":
        return [], problem("invalid_request", "Currently the completion window must be set to 24h.")
    entries, problems = openai_lines(data, LINE_URL)
    if problems:
        return [], [{**p, "code": AZURE_CODES.get(p["code"], p["code"])} for p in problems]
    deployment = str(entries[0][1].get("model") or "")
    model = served(request, deployment)
    if model is None:
        return [], problem("model_not_found", f"The deployment {deployment!r} in `model` was not found.")
    return [(cid, {**request_body, "model": model}) for cid, request_body in entries], []


def add_routes(app: web.Application) -> None:
    app.add_routes(
        [
            web.post("/openai/v1/files", _as_openai(batch_routes.files_create)),
            web.get("/openai/v1/files/{id}", _as_openai(batch_routes.files_get)),
            web.delete("/openai/v1/files/{id}", _as_openai(batch_routes.files_delete)),
            web.get("/openai/v1/files/{id}/content", _as_openai(batch_routes.files_content)),
            web.post("/openai/v1/batches", create),
            web.get("/openai/v1/batches", _as_openai(batch_routes.openai_list)),
            web.get("/openai/v1/batches/{id}", _as_openai(batch_routes.openai_get)),
            web.post("/openai/v1/batches/{id}/cancel", _as_openai(batch_routes.openai_cancel)),
        ]
    )
