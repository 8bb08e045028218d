"""Anthropic's Message Batches API as the gateway uses it: `POST /v1/messages/batches` with
`{custom_id, params}` requests; `GET .../{id}` until `processing_status` is `ended`; the results JSONL at its
`results_url`; `GET /v1/messages/batches` lists batches
(the candidates for one an earlier gateway made and could not
journal: the intent is not kept on the batch, so the batcher matches them by their requests)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import aiohttp

from runner.gateway.batch_wire import (
    BatchEndpoint,
    Outcome,
    fetch_batch,
    fetch_json,
    fetch_results,
    json_lines,
)

# Anthropic's error types as the HTTP status an interactive call would have had
_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
}


async def submit(
    session: aiohttp.ClientSession, ep: BatchEndpoint, items: list[tuple[str, dict[str, Any]]], intent: str
) -> tuple[str, str | None]:
    payload = {"requests": [{"custom_id": cid, "params": body} for cid, body in items]}
    return str(
        (await fetch_json(session, "POST", ep.url("/v1/messages/batches"), ep, json=payload))["id"]
    ), None


async def state(
    session: aiohttp.ClientSession, ep: BatchEndpoint, batch_id: str
) -> tuple[bool, dict[str, Any]]:
    b = await fetch_batch(session, ep.url(f"/v1/messages/batches/{batch_id}"), ep, batch_id)
    return b.get("processing_status") == "ended", b


async def collect(
    session: aiohttp.ClientSession, ep: BatchEndpoint, batch: dict[str, Any]
) -> dict[str, Outcome]:
    raw = await fetch_results(session, str(batch["results_url"]), ep)
    return {r["custom_id"]: _outcome(r["result"]) for r in json_lines(raw)}


async def listed(session: aiohttp.ClientSession, ep: BatchEndpoint, since: float) -> list[dict[str, Any]]:
    found = (await fetch_json(session, "GET", ep.url("/v1/messages/batches?limit=100"), ep)).get("data") or []
    return [b for b in found if _created(b) >= since]


def _created(batch: dict[str, Any]) -> float:
    """Its created_at (RFC 3339) in epoch seconds; 0 where it cannot be read."""
    try:
        return dt.datetime.fromisoformat(str(batch.get("created_at")).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _outcome(result: dict[str, Any]) -> Outcome:
    if result.get("type") == "succeeded":
        return 200, result["message"]
    if result.get("type") == "errored":
        error = result.get("error") or {}
        status = _STATUS.get(str((error.get("error") or {}).get("type")))
        return (status, error) if status is not None and status != 429 else None  # 5xx, overloaded: again
    return None  # canceled, expired
