"""The providers' batch APIs as the gateway uses them: submit one batch, see whether it has ended, collect
what each request came to.

Anthropic: `POST /v1/messages/batches` with `{custom_id, params}` requests; `GET .../{id}` until
`processing_status` is `ended`; the results JSONL at its `results_url`. OpenAI: the requests as a JSONL
file (`POST /v1/files`, purpose `batch`), then `POST /v1/batches` on it for `/v1/chat/completions`; `GET
/v1/batches/{id}` until it is `completed`, `expired`, `cancelled` or `failed`; its output and error files.

What a request came to is an `Outcome`: an answer or the API's own refusal (status and body, for the
caller as an interactive call would have had them), or `None` where it is worth another try (an error
of the provider's side, an expired or cancelled request, a batch that failed whole).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import aiohttp

from runner.gateway.request import upstream_url

Outcome = tuple[int, dict[str, Any]] | None
BATCH_PATHS = {"/v1/messages": "anthropic", "/v1/chat/completions": "openai"}
# Anthropic's error types as the HTTP status an interactive call would have had
_ANTHROPIC_STATUS = {"invalid_request_error": 400, "authentication_error": 401, "permission_error": 403,
                     "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429}
_OPENAI_ENDED = ("completed", "expired", "cancelled", "failed")


@dataclass(frozen=True)
class Endpoint:
    provider: str
    base: str  # the provider's SDK base URL (OpenAI's ends in /v1)
    headers: dict[str, str]  # the key, and the simulator's x-sim-* where it answers

    def url(self, path: str) -> str:
        return upstream_url(self.base, self.provider, path)


async def submit(session: aiohttp.ClientSession, ep: Endpoint, items: list[tuple[str, dict[str, Any]]]) -> str:
    """One batch of (custom_id, request body without `stream`); its id. Raises aiohttp.ClientError on
    any refusal."""
    if ep.provider == "anthropic":
        payload = {"requests": [{"custom_id": cid, "params": body} for cid, body in items]}
        return str((await _json(session, "POST", ep.url("/v1/messages/batches"), ep, json=payload))["id"])
    lines = "".join(json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": body})
                    + "\n" for cid, body in items)
    form = aiohttp.FormData()
    form.add_field("purpose", "batch")
    form.add_field("file", lines.encode(), filename="batch.jsonl", content_type="application/jsonl")
    upload = await _json(session, "POST", ep.url("/v1/files"), ep, data=form)
    created = await _json(session, "POST", ep.url("/v1/batches"), ep, json={
        "input_file_id": upload["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"})
    return str(created["id"])


class BatchGone(Exception):
    """The provider does not know the batch (404): nothing of it will ever come back."""


async def state(session: aiohttp.ClientSession, ep: Endpoint, batch_id: str) -> tuple[bool, dict[str, Any]]:
    """(ended, the batch object); BatchGone for a batch the provider does not know."""
    path = f"/v1/messages/batches/{batch_id}" if ep.provider == "anthropic" else f"/v1/batches/{batch_id}"
    try:
        b = await _json(session, "GET", ep.url(path), ep)
    except aiohttp.ClientResponseError as e:
        if e.status == 404:
            raise BatchGone(batch_id) from e
        raise
    ended = b.get("processing_status") == "ended" if ep.provider == "anthropic" else b.get("status") in _OPENAI_ENDED
    return ended, b


async def collect(session: aiohttp.ClientSession, ep: Endpoint, batch: dict[str, Any]) -> dict[str, Outcome]:
    """What each request of an ended batch came to, by custom_id (ids missing here: worth another try)."""
    if ep.provider == "anthropic":
        raw = await _bytes(session, str(batch["results_url"]), ep)
        return {r["custom_id"]: _anthropic_outcome(r["result"]) for r in _lines(raw)}
    out: dict[str, Outcome] = {}
    for key in ("output_file_id", "error_file_id"):
        if batch.get(key):
            raw = await _bytes(session, ep.url(f"/v1/files/{batch[key]}/content"), ep)
            out.update({r["custom_id"]: _openai_outcome(r) for r in _lines(raw)})
    return out


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


def _lines(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


async def _json(session: aiohttp.ClientSession, method: str, url: str, ep: Endpoint, **kw: Any) -> dict[str, Any]:
    async with session.request(method, url, headers=ep.headers, **kw) as r:
        if r.status != 200:
            raise aiohttp.ClientResponseError(r.request_info, (), status=r.status,
                                              message=(await r.text())[:300])
        found: dict[str, Any] = await r.json(content_type=None)
        return found


async def _bytes(session: aiohttp.ClientSession, url: str, ep: Endpoint) -> bytes:
    async with session.get(url, headers=ep.headers) as r:
        if r.status != 200:
            raise aiohttp.ClientResponseError(r.request_info, (), status=r.status,
                                              message=(await r.text())[:300])
        return await r.read()
