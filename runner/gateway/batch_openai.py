"""OpenAI's Batch API as the gateway uses it, and Azure OpenAI's, the same API on a resource's v1 paths.

OpenAI: the requests as a JSONL file (`POST /v1/files`, purpose `batch`), then `POST /v1/batches` on it for
the endpoint the calls were made to (`/v1/chat/completions` or `/v1/responses`), tagged with metadata (the
intent that made it); `GET /v1/batches/{id}` until it is `completed`, `expired`, `cancelled` or `failed`;
its output and error files; `DELETE /v1/files/{id}` for every file once read (they would stay in the
account for 30 days).

Azure OpenAI (`/openai/v1/files`, `/openai/v1/batches`): each line's url `/v1/chat/completions` and its
`model` the Global-Batch deployment, the create's endpoint `/chat/completions` (clouds.yaml azure.batch); a
status may come capitalised ("Validating": a conflict the fixture records), so it is compared in lower case.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from runner.gateway.batch_wire import (
    INTENT_KEY,
    BatchEndpoint,
    BatchFailed,
    BatchRefused,
    Outcome,
    fetch_batch,
    fetch_json,
    fetch_results,
    json_lines,
)

_ENDED = ("completed", "expired", "cancelled", "failed")


async def submit(
    session: aiohttp.ClientSession, ep: BatchEndpoint, items: list[tuple[str, dict[str, Any]]], intent: str
) -> tuple[str, str | None]:
    path = ep.path or "/v1/chat/completions"
    lines = "".join(
        json.dumps({"custom_id": cid, "method": "POST", "url": path, "body": body}) + "\n"
        for cid, body in items
    )
    endpoint = path.removeprefix("/v1") if ep.provider == "azure" else path  # azure.batch.create
    form = aiohttp.FormData()
    form.add_field("purpose", "batch")
    form.add_field("file", lines.encode(), filename="batch.jsonl", content_type="application/jsonl")
    upload = await fetch_json(session, "POST", ep.url("/v1/files"), ep, data=form)
    try:
        created = await fetch_json(
            session,
            "POST",
            ep.url("/v1/batches"),
            ep,
            json={
                "input_file_id": upload["id"],
                "endpoint": endpoint,
                "completion_window": "24h",
                "metadata": {INTENT_KEY: intent},
            },
        )
    except BatchRefused:
        await delete_file(session, ep, str(upload["id"]))  # a batch that was not made leaves no file behind
        raise
    return str(created["id"]), str(upload["id"])


async def state(
    session: aiohttp.ClientSession, ep: BatchEndpoint, batch_id: str
) -> tuple[bool, dict[str, Any]]:
    b = await fetch_batch(session, ep.url(f"/v1/batches/{batch_id}"), ep, batch_id)
    return str(b.get("status")).lower() in _ENDED, b


async def collect(
    session: aiohttp.ClientSession, ep: BatchEndpoint, batch: dict[str, Any]
) -> dict[str, Outcome]:
    if str(batch.get("status")).lower() == "failed":
        await delete_file(session, ep, str(batch.get("input_file_id") or ""))
        errors = (batch.get("errors") or {}).get("data") or []
        raise BatchFailed("; ".join(str(e.get("message") or e.get("code")) for e in errors) or "failed")
    out: dict[str, Outcome] = {}
    for key in ("output_file_id", "error_file_id"):
        if batch.get(key):
            raw = await fetch_results(session, ep.url(f"/v1/files/{batch[key]}/content"), ep)
            out.update({r["custom_id"]: _outcome(r) for r in json_lines(raw)})
    for key in ("input_file_id", "output_file_id", "error_file_id"):
        await delete_file(session, ep, str(batch.get(key) or ""))
    return out


async def listed(session: aiohttp.ClientSession, ep: BatchEndpoint, since: float) -> list[dict[str, Any]]:
    found = (await fetch_json(session, "GET", ep.url("/v1/batches?limit=100"), ep)).get("data") or []
    return [b for b in found if isinstance(b.get("created_at"), int | float) and b["created_at"] >= since]


async def delete_file(session: aiohttp.ClientSession, ep: BatchEndpoint, file_id: str) -> None:
    """An uploaded or produced file removed from the account (a file already gone is no matter)."""
    if not file_id:
        return
    async with session.delete(ep.url(f"/v1/files/{file_id}"), headers=ep.headers) as r:
        await r.read()


def _outcome(line: dict[str, Any]) -> Outcome:
    response = line.get("response")
    if not isinstance(response, dict):
        return None  # expired, cancelled: no response
    status = int(response.get("status_code") or 0)
    return (status, response.get("body") or {}) if status < 500 and status != 429 else None
