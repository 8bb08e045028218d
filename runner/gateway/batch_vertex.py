"""Vertex AI batch prediction of Claude as the gateway uses it ("Batch predictions with Anthropic Claude
models", cloud.google.com/vertex-ai/generative-ai/docs/partner-models/claude/batch, and the REST reference of
projects.locations.batchPredictionJobs and of Cloud Storage's JSON API, read 2026-11-29).

The requests as a JSONL file of `{"custom_id", "request"}` lines (the rawPredict body, `anthropic_version`
and all) put in Cloud Storage (a media upload under the configured bucket and prefix), then a batch
prediction job made on it for the calls' model (`publishers/anthropic/models/{model}`), named and labelled
by the intent that made it (display name pgsr-{intent}, label pgsandbox_intent), its output under the
prefix's `out/{intent}/`; polled until it is SUCCEEDED, PARTIALLY_SUCCEEDED, FAILED, CANCELLED or EXPIRED;
every `.jsonl` file of its `outputInfo.gcsOutputDirectory` read back (a line per request, matched by its
custom_id: `response` when its `status` is empty, else why not; a line of an `errors_N` file, the API
reference's generic layout, by its `error`) and every file of the job deleted. Each
request carries the gateway's Google OAuth token (cloud_auth.py). The API has no idempotency token: an
intent's job is found again by its label.

A failed line's `status` is the provider's text: where it starts with an HTTP status of the caller's own
fault (4xx but 408 and 429) the caller gets that status and its message in Google's error envelope, as
rawPredict would have answered; anything else is worth another try.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import re
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp

from runner.gateway.batch_wire import (
    INTENT_KEY,
    BatchEndpoint,
    BatchFailed,
    BatchGone,
    BatchRefused,
    GcpBatch,
    Outcome,
    json_lines,
)
from runner.models.base import retry_after_from

JOB_PREFIX = "pgsr-"  # a job's display name: this and the intent that made it
ENDED = (
    "JOB_STATE_SUCCEEDED",
    "JOB_STATE_PARTIALLY_SUCCEEDED",
    "JOB_STATE_FAILED",
    "JOB_STATE_CANCELLED",
    "JOB_STATE_EXPIRED",
)
# Google's canonical codes of the HTTP statuses a refusal may carry (google.rpc.Code)
_GOOGLE_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND"}
_LEADING_STATUS = re.compile(r"^\s*(\d{3})\b")
# google.rpc.Code -> its HTTP status, for the codes of a caller's own fault (code.proto's HTTP mapping)
_RPC_HTTP = {3: 400, 5: 404, 7: 403, 9: 400, 11: 400, 16: 401}


def _gcp(ep: BatchEndpoint) -> GcpBatch:
    assert ep.gcp is not None
    return ep.gcp


async def _call(
    session: aiohttp.ClientSession,
    ep: BatchEndpoint,
    method: str,
    url: str,
    body: bytes | None = None,
    content_type: str | None = None,
) -> tuple[int, bytes, Any]:
    headers = dict(await asyncio.to_thread(_gcp(ep).auth))
    if content_type:
        headers["content-type"] = content_type
    async with session.request(method, url, data=body, headers=headers) as r:
        return r.status, await r.read(), r.headers


def _refusal(status: int, raw: bytes, headers: Any, what: str) -> BatchRefused:
    words = raw[:500].decode(errors="replace")
    with contextlib.suppress(ValueError, AttributeError):
        words = str(json.loads(raw)["error"]["message"])
    return BatchRefused(status, f"{what}: {words}", retry_after_from(headers))


async def _json(
    session: aiohttp.ClientSession,
    ep: BatchEndpoint,
    method: str,
    path: str,
    payload: dict[str, Any] | None = None,
    gone: str | None = None,
) -> dict[str, Any]:
    """The job service's answer; BatchRefused for an error status (BatchGone for a 404 of job `gone`)."""
    body = json.dumps(payload).encode() if payload is not None else None
    status, raw, headers = await _call(
        session, ep, method, _gcp(ep).control + path, body, "application/json" if body else None
    )
    if status == 404 and gone is not None:
        raise BatchGone(gone)
    if status != 200:
        raise _refusal(status, raw, headers, "Vertex AI")
    found: dict[str, Any] = json.loads(raw)
    return found


def _object_url(g: GcpBatch, name: str) -> str:
    return f"{g.storage}/storage/v1/b/{g.bucket}/o/{quote(name, safe='')}"


async def _delete(session: aiohttp.ClientSession, ep: BatchEndpoint, name: str) -> None:
    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
        await _call(session, ep, "DELETE", _object_url(_gcp(ep), name))


async def submit(
    session: aiohttp.ClientSession, ep: BatchEndpoint, items: list[tuple[str, dict[str, Any]]], intent: str
) -> tuple[str, str | None]:
    g = _gcp(ep)
    lines = "".join(json.dumps({"custom_id": cid, "request": body}) + "\n" for cid, body in items)
    name = f"{g.prefix}{intent}.jsonl"
    upload = f"{g.storage}/upload/storage/v1/b/{g.bucket}/o?" + urlencode(
        {"uploadType": "media", "name": name}
    )
    status, raw, headers = await _call(session, ep, "POST", upload, lines.encode(), "application/jsonl")
    if status != 200:
        raise _refusal(status, raw, headers, "Cloud Storage upload")
    try:
        made = await _json(
            session,
            ep,
            "POST",
            "/batchPredictionJobs",
            {
                "displayName": f"{JOB_PREFIX}{intent}",
                "model": f"publishers/anthropic/models/{ep.model}",
                "labels": {INTENT_KEY: intent},
                "inputConfig": {
                    "instancesFormat": "jsonl",
                    "gcsSource": {"uris": [f"gs://{g.bucket}/{name}"]},
                },
                "outputConfig": {
                    "predictionsFormat": "jsonl",
                    "gcsDestination": {"outputUriPrefix": f"gs://{g.bucket}/{g.prefix}out/{intent}/"},
                },
            },
        )
    except BatchRefused:
        await _delete(session, ep, name)  # a job that was not made leaves no file behind
        raise
    return str(made["name"]).rsplit("/", 1)[-1], name


async def state(
    session: aiohttp.ClientSession, ep: BatchEndpoint, job_id: str
) -> tuple[bool, dict[str, Any]]:
    job = await _json(session, ep, "GET", f"/batchPredictionJobs/{job_id}", gone=job_id)
    return job.get("state") in ENDED, job


async def _listed_names(session: aiohttp.ClientSession, ep: BatchEndpoint, prefix: str) -> list[str]:
    g, names, token = _gcp(ep), [], ""
    while True:  # page by page (nextPageToken)
        asked = {"prefix": prefix, **({"pageToken": token} if token else {})}
        url = f"{g.storage}/storage/v1/b/{g.bucket}/o?" + urlencode(asked)
        status, raw, headers = await _call(session, ep, "GET", url)
        if status != 200:
            raise _refusal(status, raw, headers, "Cloud Storage list")
        page = json.loads(raw)
        names += [str(item["name"]) for item in page.get("items") or []]
        token = str(page.get("nextPageToken") or "")
        if not token:
            return names


async def collect(
    session: aiohttp.ClientSession, ep: BatchEndpoint, job: dict[str, Any]
) -> dict[str, Outcome]:
    """Each request's outcome by its custom id, every file of the job deleted once read."""
    g = _gcp(ep)
    source = str(job["inputConfig"]["gcsSource"]["uris"][0]).removeprefix(f"gs://{g.bucket}/")
    out = str(job["outputConfig"]["gcsDestination"]["outputUriPrefix"]).removeprefix(f"gs://{g.bucket}/")
    written: list[str] = []
    outcomes: dict[str, Outcome] = {}
    try:
        written = await _listed_names(session, ep, out)  # a failed job's too: what it wrote goes as well
        if job.get("state") == "JOB_STATE_FAILED":
            raise BatchFailed(str((job.get("error") or {}).get("message") or "failed"))
        directory = str((job.get("outputInfo") or {}).get("gcsOutputDirectory") or "")
        mine = directory.removeprefix(f"gs://{g.bucket}/").rstrip("/") + "/"
        for name in (n for n in written if n.endswith(".jsonl") and (not directory or n.startswith(mine))):
            status, raw, headers = await _call(session, ep, "GET", _object_url(g, name) + "?alt=media")
            if status == 404:
                raise BatchGone(name)
            if status != 200:
                raise _refusal(status, raw, headers, "Cloud Storage download")
            outcomes |= {str(line.get("custom_id")): _outcome(line) for line in json_lines(raw)}
    finally:
        for name in (source, *written):
            await _delete(session, ep, name)
    return outcomes


def _outcome(line: dict[str, Any]) -> Outcome:
    response, status = line.get("response"), str(line.get("status") or "")
    if not status and isinstance(response, dict) and response.get("type") == "message":
        return 200, response
    error = line.get("error")
    if isinstance(error, dict):  # an errors_N file's line: a google.rpc.Status (its gRPC code)
        rpc = error.get("code")
        status = f"{_RPC_HTTP.get(rpc, 500) if isinstance(rpc, int) else 500}: {error.get('message') or ''}"
    m = _LEADING_STATUS.match(status)
    code = int(m[1]) if m else 0
    if not 400 <= code < 500 or code in (408, 429):
        return None  # a server's error, a throttle, a timeout, an unreadable status: again
    words = status[m.end() :].lstrip(" :") if m else status
    with contextlib.suppress(ValueError, TypeError, KeyError):
        words = str(json.loads(words)["error"]["message"])
    return code, {
        "error": {"code": code, "message": words, "status": _GOOGLE_STATUS.get(code, "FAILED_PRECONDITION")}
    }


async def listed(session: aiohttp.ClientSession, ep: BatchEndpoint, since: float) -> list[dict[str, Any]]:
    """The jobs of ours made since `since`, as the other providers' batches read: an id, when made, and the
    intent that made it (its label)."""
    after = dt.datetime.fromtimestamp(since, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    found: list[dict[str, Any]] = []
    token = ""
    while True:  # page by page (nextPageToken)
        asked = {"filter": f'create_time>="{after}"', **({"pageToken": token} if token else {})}
        page = await _json(session, ep, "GET", "/batchPredictionJobs?" + urlencode(asked))
        found += page.get("batchPredictionJobs") or []
        token = str(page.get("nextPageToken") or "")
        if not token:
            break
    return [
        {
            "id": str(j["name"]).rsplit("/", 1)[-1],
            "created_at": j.get("createTime"),
            "metadata": {
                INTENT_KEY: (j.get("labels") or {}).get(INTENT_KEY)
                or str(j.get("displayName", "")).removeprefix(JOB_PREFIX)
            },
        }
        for j in found
        if str(j.get("displayName", "")).startswith(JOB_PREFIX)
    ]
