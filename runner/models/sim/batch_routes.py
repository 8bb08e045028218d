"""The batch APIs' HTTP routes (runner/models/sim/batches.py holds what they serve)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import orjson
from aiohttp import web
from aiohttp.web_request import FileField

from runner.models.sim.auth import unauthorized
from runner.models.sim.batches import (
    Batches,
    SimBatch,
    anthropic_batch,
    anthropic_create_error,
    anthropic_results,
    json_error,
    openai_batch,
    openai_file,
    openai_files_of,
    openai_lines,
)

# what the simulator batches: what it answers interactively (OpenAI's Batch API takes the Responses API too)
CHECKED = "credentials_checked"  # a request's mark: a cloud's route has checked its credentials
ENDPOINTS = ("/v1/chat/completions", "/v1/responses")


def _batches(request: web.Request) -> Batches:
    return request.app["batches"]


def _unauthorized(request: web.Request, api: str) -> web.Response | None:
    """The API's 401 for a caller without its key; none where a cloud's route checked the cloud's own
    (azure_batches.py: Azure's batch API is OpenAI's, with Azure's credentials)."""
    if request.get(CHECKED):
        return None
    return unauthorized(request, api, _batches(request).stats)


async def _body(request: web.Request, api: str) -> dict[str, Any] | web.Response:
    """The request's JSON object, or the 401 / 400 the API would answer."""
    if (refused := _unauthorized(request, api)) is not None:
        return refused
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        return json_error(api, 400, "body is not JSON")
    return body if isinstance(body, dict) else json_error(api, 400, "body must be a JSON object")


async def _found(request: web.Request, api: str) -> SimBatch | web.Response:
    if (refused := _unauthorized(request, api)) is not None:
        return refused
    bs = _batches(request)
    b = bs.get(request.match_info["id"])
    if b is None or b.api != api:
        return json_error(api, 404, f"no batch {request.match_info['id']!r}")
    await bs.advance(b)
    if api == "openai" and b.ended is not None and not b.files and b.failed is None:
        _write_openai_files(bs, b)
    return b


# ---------------------------------------------------------------- Anthropic
async def anthropic_create(request: web.Request) -> web.Response:
    body = await _body(request, "anthropic")
    if isinstance(body, web.Response):
        return body
    if (why := anthropic_create_error(body)) is not None:
        return json_error("anthropic", 400, why)
    if (busy := _busy(request, "anthropic")) is not None:
        return busy
    b = _batches(request).new(
        "anthropic",
        f"msgbatch_{uuid.uuid4().hex[:24]}",
        [(r["custom_id"], r["params"]) for r in body["requests"]],
        request.headers,
    )
    # made already: a caller gone now leaves it
    await asyncio.sleep(_batches(request).settings.create_seconds)
    return web.json_response(anthropic_batch(b, _origin(request)))


async def anthropic_get(request: web.Request) -> web.Response:
    b = await _found(request, "anthropic")
    return b if isinstance(b, web.Response) else web.json_response(anthropic_batch(b, _origin(request)))


async def anthropic_cancel(request: web.Request) -> web.Response:
    b = await _found(request, "anthropic")
    if isinstance(b, web.Response):
        return b
    if b.ended is None and b.cancelled is None:
        b.cancelled = time.monotonic()  # canceling now; ended, with what was done, when next looked at
        _batches(request).save(b)
    return web.json_response(anthropic_batch(b, _origin(request)))


async def anthropic_get_results(request: web.Request) -> web.Response:
    b = await _found(request, "anthropic")
    if isinstance(b, web.Response):
        return b
    if b.ended is None:
        return json_error(
            "anthropic",
            400,
            f"batch {b.id} is still {anthropic_batch(b, '')['processing_status']}: "
            "its results exist once processing has ended",
        )
    return web.Response(body=anthropic_results(b), content_type="application/binary")


def _origin(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}"


def _busy(request: web.Request, api: str) -> web.Response | None:
    """A create answered 429 with retry-after, at simulator.batches.busy's rate."""
    bs = _batches(request)
    if not bs.busy():
        return None
    bs.stats["batch_create_429"] += 1
    wait = bs.settings.retry_after_seconds
    refused = json_error(
        api, 429, "Too many batch requests: retry after the time the retry-after header says"
    )
    refused.headers["retry-after"] = str(max(0, round(wait)))
    refused.headers["retry-after-ms"] = str(int(wait * 1000))
    return refused


async def _listed(request: web.Request, api: str) -> list[SimBatch] | web.Response:
    """An API's batches, newest first (at most 100, as both APIs' first page), each advanced to now; or the
    refusal of a caller without its key."""
    bs = _batches(request)
    if (refused := _unauthorized(request, api)) is not None:
        return refused
    listed = [b for b in sorted(bs.batches.values(), key=lambda b: -b.created_wall) if b.api == api][:100]
    for b in listed:
        await bs.advance(b)
    return listed


def _page(data: list[dict[str, Any]], **extra: Any) -> web.Response:
    return web.json_response(
        {
            **extra,
            "data": data,
            "has_more": False,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }
    )


async def anthropic_list(request: web.Request) -> web.Response:
    listed = await _listed(request, "anthropic")
    if isinstance(listed, web.Response):
        return listed
    return _page([anthropic_batch(b, _origin(request)) for b in listed])


async def openai_list(request: web.Request) -> web.Response:
    listed = await _listed(request, "openai")
    if isinstance(listed, web.Response):
        return listed
    return _page([openai_batch(b) for b in listed], object="list")


async def files_delete(request: web.Request) -> web.Response:
    f = _file(request)
    if isinstance(f, web.Response):
        return f
    del _batches(request).files[request.match_info["id"]]
    _batches(request).stats["files_deleted"] += 1
    return web.json_response({"id": request.match_info["id"], "object": "file", "deleted": True})


# ---------------------------------------------------------------- OpenAI
async def files_create(request: web.Request) -> web.Response:
    if (refused := _unauthorized(request, "openai")) is not None:
        return refused
    try:
        form = await request.post()
    except ValueError as e:
        return json_error("openai", 400, f"a multipart/form-data upload is required ({e})")
    upload, purpose = form.get("file"), form.get("purpose")
    if purpose != "batch":
        return json_error(
            "openai",
            400,
            f"purpose: the simulator keeps files for batches only ({purpose!r})",
            param="purpose",
        )
    if not isinstance(upload, FileField):
        return json_error("openai", 400, "file: a file part is required", param="file")
    data = upload.file.read()
    fid = f"file-{uuid.uuid4().hex[:24]}"
    meta = openai_file(fid, upload.filename or "upload.jsonl", data, "batch")
    _batches(request).files[fid] = (meta, data)
    return web.json_response(meta)


def _file(request: web.Request) -> tuple[dict[str, Any], bytes] | web.Response:
    if (refused := _unauthorized(request, "openai")) is not None:
        return refused
    found = _batches(request).files.get(request.match_info["id"])
    return (
        found
        if found is not None
        else json_error("openai", 404, f"No such File object: {request.match_info['id']}", param="id")
    )


async def files_get(request: web.Request) -> web.Response:
    f = _file(request)
    return f if isinstance(f, web.Response) else web.json_response(f[0])


async def files_content(request: web.Request) -> web.Response:
    f = _file(request)
    return (
        f if isinstance(f, web.Response) else web.Response(body=f[1], content_type="application/octet-stream")
    )


async def openai_create(request: web.Request) -> web.Response:
    body = await _body(request, "openai")
    if isinstance(body, web.Response):
        return body
    if body.get("completion_window") != "24h":
        return json_error(
            "openai", 400, "completion_window: only '24h' is supported", param="completion_window"
        )
    if body.get("endpoint") not in ENDPOINTS:
        return json_error(
            "openai",
            400,
            f"endpoint: the simulator batches {', '.join(ENDPOINTS)} ({body.get('endpoint')!r})",
            param="endpoint",
        )
    found = _batches(request).files.get(str(body.get("input_file_id")))
    if found is None:
        return json_error(
            "openai", 404, f"No such File object: {body.get('input_file_id')}", param="input_file_id"
        )
    if (busy := _busy(request, "openai")) is not None:
        return busy
    entries, problems = openai_lines(found[1], body["endpoint"])
    problems = problems or (await _batches(request).over_token_limit(entries) or [])
    b = _batches(request).new(
        "openai",
        f"batch_{uuid.uuid4().hex[:24]}",
        entries,
        request.headers,
        endpoint=body["endpoint"],
        input_file_id=body["input_file_id"],
        metadata=body.get("metadata"),
        failed=problems or None,
    )
    await asyncio.sleep(_batches(request).settings.create_seconds)
    return web.json_response(
        {**openai_batch(b), "status": "validating", "in_progress_at": None, "failed_at": None, "errors": None}
    )


async def openai_get(request: web.Request) -> web.Response:
    b = await _found(request, "openai")
    return b if isinstance(b, web.Response) else web.json_response(openai_batch(b))


async def openai_cancel(request: web.Request) -> web.Response:
    b = await _found(request, "openai")
    if isinstance(b, web.Response):
        return b
    if b.ended is None and b.failed is None and b.cancelled is None:
        b.cancelled = time.monotonic()
        _batches(request).save(b)
    return web.json_response(openai_batch(b))


def _write_openai_files(bs: Batches, b: SimBatch) -> None:
    out, errors = openai_files_of(b)
    for kind, data in (("output", out), ("error", errors)):
        if data:
            fid = f"file-{uuid.uuid4().hex[:24]}"
            bs.files[fid] = (openai_file(fid, f"{b.id}_{kind}.jsonl", data, "batch_output"), data)
            b.files[kind] = fid


def add_routes(app: web.Application) -> None:
    app.add_routes(
        [
            web.post("/v1/messages/batches", anthropic_create),
            web.get("/v1/messages/batches", anthropic_list),
            web.get("/v1/messages/batches/{id}", anthropic_get),
            web.post("/v1/messages/batches/{id}/cancel", anthropic_cancel),
            web.get("/v1/messages/batches/{id}/results", anthropic_get_results),
            web.post("/v1/files", files_create),
            web.get("/v1/files/{id}", files_get),
            web.delete("/v1/files/{id}", files_delete),
            web.get("/v1/files/{id}/content", files_content),
            web.post("/v1/batches", openai_create),
            web.get("/v1/batches", openai_list),
            web.get("/v1/batches/{id}", openai_get),
            web.post("/v1/batches/{id}/cancel", openai_cancel),
        ]
    )
