"""The providers' batch APIs as the gateway uses them: submit one batch, see whether it has ended, collect
what each request came to, list the batches an earlier gateway may have created, delete what was uploaded.

Anthropic: `POST /v1/messages/batches` with `{custom_id, params}` requests; `GET .../{id}` until
`processing_status` is `ended`; the results JSONL at its `results_url`; `GET /v1/messages/batches` lists
batches. OpenAI: the requests as a JSONL file (`POST /v1/files`, purpose `batch`), then `POST /v1/batches` on
it for the endpoint the calls were made to (`/v1/chat/completions` or `/v1/responses`), tagged with
metadata; `GET /v1/batches/{id}` until it is `completed`, `expired`, `cancelled` or `failed`; its output and
error files; `DELETE /v1/files/{id}` for every file once read (they would stay in the account for 30 days).

Azure OpenAI: OpenAI's batch API on the resource's v1 paths (`/openai/v1/files`, `/openai/v1/batches`), each
line's url `/v1/chat/completions` and its `model` the Global-Batch deployment, the create's endpoint
`/chat/completions` (clouds.yaml azure.batch); a status may come capitalised ("Validating": a conflict the
fixture records), so it is compared in lower case. Bedrock's and Vertex AI's batch services (jobs over
S3 and Cloud Storage files): Vertex AI's is not used (its calls go interactive).

Amazon Bedrock's batch inference: batch_bedrock.py. The types they share: batch_wire.py.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from runner.gateway.batch_bedrock import collect as bedrock_collect
from runner.gateway.batch_bedrock import listed as bedrock_listed
from runner.gateway.batch_bedrock import state as bedrock_state
from runner.gateway.batch_bedrock import submit as bedrock_submit
from runner.gateway.batch_wire import (
    BATCH_PATHS,
    INTENT_KEY,
    AwsBatch,
    BatchEndpoint,
    BatchFailed,
    BatchGone,
    BatchRefused,
    Outcome,
    json_lines,
)
from runner.models.base import retry_after_from

__all__ = ["BATCH_PATHS", "INTENT_KEY", "AwsBatch", "BatchEndpoint", "BatchFailed", "BatchGone", "BatchRefused",
           "Outcome", "collect", "delete_file", "listed", "state", "submit"]
# Anthropic's error types as the HTTP status an interactive call would have had
_ANTHROPIC_STATUS = {"invalid_request_error": 400, "authentication_error": 401, "permission_error": 403,
                     "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429}
_OPENAI_ENDED = ("completed", "expired", "cancelled", "failed")

async def submit(session: aiohttp.ClientSession, ep: BatchEndpoint, items: list[tuple[str, dict[str, Any]]],
                 intent: str) -> tuple[str, str | None]:
    """One batch of (custom_id, request body without `stream`): its id, and (OpenAI) the uploaded file's."""
    if ep.provider == "bedrock":
        return await bedrock_submit(session, ep, items, intent)
    if ep.provider == "anthropic":
        payload = {"requests": [{"custom_id": cid, "params": body} for cid, body in items]}
        return str((await _json(session, "POST", ep.url("/v1/messages/batches"), ep, json=payload))["id"]), None
    path = ep.path or "/v1/chat/completions"
    lines = "".join(json.dumps({"custom_id": cid, "method": "POST", "url": path, "body": body}) + "\n"
                    for cid, body in items)
    endpoint = path.removeprefix("/v1") if ep.provider == "azure" else path  # azure.batch.create
    form = aiohttp.FormData()
    form.add_field("purpose", "batch")
    form.add_field("file", lines.encode(), filename="batch.jsonl", content_type="application/jsonl")
    upload = await _json(session, "POST", ep.url("/v1/files"), ep, data=form)
    try:
        created = await _json(session, "POST", ep.url("/v1/batches"), ep, json={
            "input_file_id": upload["id"], "endpoint": endpoint, "completion_window": "24h",
            "metadata": {INTENT_KEY: intent}})
    except BatchRefused:
        await delete_file(session, ep, str(upload["id"]))  # a batch that was not made leaves no file behind
        raise
    return str(created["id"]), str(upload["id"])


async def state(session: aiohttp.ClientSession, ep: BatchEndpoint, batch_id: str) -> tuple[bool, dict[str, Any]]:
    """(ended, the batch object); BatchGone for a batch the provider does not know."""
    if ep.provider == "bedrock":
        return await bedrock_state(session, ep, batch_id)
    path = f"/v1/messages/batches/{batch_id}" if ep.provider == "anthropic" else f"/v1/batches/{batch_id}"
    try:
        b = await _json(session, "GET", ep.url(path), ep)
    except BatchRefused as e:
        if e.status == 404:
            raise BatchGone(batch_id) from e
        raise
    ended = b.get("processing_status") == "ended" if ep.provider == "anthropic" else \
        str(b.get("status")).lower() in _OPENAI_ENDED
    return ended, b


async def collect(session: aiohttp.ClientSession, ep: BatchEndpoint, batch: dict[str, Any]) -> dict[str, Outcome]:
    """What each request of an ended batch came to, by custom_id (ids missing here: worth another try); its
    files deleted once read (OpenAI). BatchFailed for a batch that failed whole; BatchGone where its results
    are no longer kept (404, 410)."""
    if ep.provider == "bedrock":
        return await bedrock_collect(session, ep, batch)
    if ep.provider == "anthropic":
        raw = await _results(session, str(batch["results_url"]), ep)
        return {r["custom_id"]: _anthropic_outcome(r["result"]) for r in json_lines(raw)}
    if str(batch.get("status")).lower() == "failed":
        await delete_file(session, ep, str(batch.get("input_file_id") or ""))
        errors = (batch.get("errors") or {}).get("data") or []
        raise BatchFailed("; ".join(str(e.get("message") or e.get("code")) for e in errors) or "failed")
    out: dict[str, Outcome] = {}
    for key in ("output_file_id", "error_file_id"):
        if batch.get(key):
            raw = await _results(session, ep.url(f"/v1/files/{batch[key]}/content"), ep)
            out.update({r["custom_id"]: _openai_outcome(r) for r in json_lines(raw)})
    for key in ("input_file_id", "output_file_id", "error_file_id"):
        await delete_file(session, ep, str(batch.get(key) or ""))
    return out


async def listed(session: aiohttp.ClientSession, ep: BatchEndpoint, since: float) -> list[dict[str, Any]]:
    """The batches of this key the provider lists that were created at `since` (epoch seconds) or later: the
    candidates for a batch an earlier gateway created and could not journal (killed during the call)."""
    if ep.provider == "bedrock":
        return await bedrock_listed(session, ep, since)
    import datetime as dt

    path = "/v1/messages/batches?limit=100" if ep.provider == "anthropic" else "/v1/batches?limit=100"
    found = (await _json(session, "GET", ep.url(path), ep)).get("data") or []

    def created(b: dict[str, Any]) -> float:
        at = b.get("created_at")
        if isinstance(at, int | float):
            return float(at)
        try:
            return dt.datetime.fromisoformat(str(at).replace("Z", "+00:00")).timestamp()
        except ValueError:
            return 0.0

    return [b for b in found if created(b) >= since]


async def delete_file(session: aiohttp.ClientSession, ep: BatchEndpoint, file_id: str) -> None:
    """An uploaded or produced file removed from the account (a file already gone is no matter)."""
    if not file_id:
        return
    async with session.delete(ep.url(f"/v1/files/{file_id}"), headers=ep.headers) as r:
        await r.read()


def _anthropic_outcome(result: dict[str, Any]) -> Outcome:
    if result.get("type") == "succeeded":
        return 200, result["message"]
    if result.get("type") == "errored":
        error = result.get("error") or {}
        status = _ANTHROPIC_STATUS.get(str((error.get("error") or {}).get("type")))
        return (status, error) if status is not None and status != 429 else None  # 5xx, overloaded: again
    return None  # canceled, expired


def _openai_outcome(line: dict[str, Any]) -> Outcome:
    response = line.get("response")
    if not isinstance(response, dict):
        return None  # expired, cancelled: no response
    status = int(response.get("status_code") or 0)
    return (status, response.get("body") or {}) if status < 500 and status != 429 else None


async def _refusal(r: aiohttp.ClientResponse) -> BatchRefused:
    text = (await r.text())[:500]
    try:
        body = json.loads(text)
        inner = body.get("error") if isinstance(body, dict) else None
        words = str((inner or {}).get("message") or text) if isinstance(inner, dict) else text
    except ValueError:
        words = text
    return BatchRefused(r.status, words, retry_after_from(r.headers))


async def _json(session: aiohttp.ClientSession, method: str, url: str, ep: BatchEndpoint, **kw: Any) -> dict[str, Any]:
    async with session.request(method, url, headers=ep.headers, **kw) as r:
        if r.status != 200:
            raise await _refusal(r)
        found: dict[str, Any] = await r.json(content_type=None)
        return found


async def _results(session: aiohttp.ClientSession, url: str, ep: BatchEndpoint) -> bytes:
    async with session.get(url, headers=ep.headers) as r:
        if r.status in (404, 410):  # expired (Anthropic keeps results 29 days) or deleted
            raise BatchGone(url)
        if r.status != 200:
            raise await _refusal(r)
        return await r.read()
