"""One call to the upstream API: the shared budget first, then retries the caller never sees.

429 / 529 / 5xx and dropped connections are retried by the runner's one policy (runner/models/retry.py,
the one the runner's own client follows: retry-after and the rate-limit reset headers honoured, full-jitter
backoff, bounded by the config's `retry:`; a 429 pauses the budget for every caller). Other 4xx, and
past the bound the upstream's own error, go back unchanged. A stream is relayed chunk by chunk as it
arrives; the answer keeps it whole for the cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from loguru import logger

from runner.budget.ratelimit import Budget, Held, Reservation
from runner.config import RetrySettings
from runner.gateway.cloud_auth import Signer
from runner.gateway.usage import EventStreamUsage, StreamUsage, from_body
from runner.models.base import BATCHED_HEADER, classify_status
from runner.models.retry import RetryPolicy
from runner.models.usage import Tokens, budget_input_tokens

BROKEN_STREAM = 599  # status of a stream cut after its first bytes reached the caller
# Response headers worth handing back to the caller (its SDK reads them); the rest describe the hop.
KEEP_HEADERS = ("x-ratelimit", "anthropic-ratelimit", "retry-after", "request-id", "x-request-id", "x-amzn")


@dataclass
class UpstreamAnswer:
    status: int
    body: bytes
    content_type: str
    headers: dict[str, str] = field(default_factory=dict)
    usage: Tokens = field(default_factory=Tokens)
    sent: web.StreamResponse | None = None  # a relayed stream: already on its way to the caller
    retries: int = 0
    rate_limited: int = 0
    batched: bool = False  # answered through a batch API: billed at half the price

    def response(self) -> web.StreamResponse:
        if self.sent is not None:
            return self.sent
        keep = {k: v for k, v in self.headers.items() if k.lower().startswith(KEEP_HEADERS)}
        if self.batched:  # so the runner's own clients price the call as it was billed (models/client.py)
            keep[BATCHED_HEADER] = "1"
        return web.Response(
            status=self.status, body=self.body, headers={**keep, "content-type": self.content_type}
        )


@dataclass(frozen=True)
class UpstreamCall:
    """What the gateway forwards: where, the bytes, the headers, and which budget pays."""

    provider: str
    url: str
    raw: bytes
    headers: dict[str, str]
    streaming: bool
    slot: int | None
    run: int = -1  # whose call it is, for the budget's per-run counts (Budget.run_index)
    sign: Signer | None = None  # signs each attempt anew (Bedrock's SigV4: over the URL, body, a fresh date)
    event_stream: bool = False  # its stream is AWS event-stream framed (Bedrock), not server-sent events


class Upstream:
    def __init__(self, retry: RetrySettings, limiter: Budget | None, session: aiohttp.ClientSession) -> None:
        self.retry, self.limiter, self.session = retry, limiter, session

    async def send(self, request: web.Request, call: UpstreamCall) -> UpstreamAnswer:
        shared = self.limiter is not None and call.slot is not None
        policy = RetryPolicy(self.retry, budget=shared)
        while True:
            with self._held(await self._reserve(call.slot, len(call.raw) / 4, call.run)) as held:
                # held: settled on any way out, a cancelled task (the caller hung up) included
                answer, kind, retry_after = await self._attempt(request, call, held)
            retry = policy.after(kind, retry_after) if kind is not None else None
            if retry is None:  # an answer, the caller's own error, or past the bound: the upstream's error
                answer.retries, answer.rate_limited = policy.retries, policy.rate_limited
                return answer
            if retry.pause is not None and self.limiter is not None and call.slot is not None:
                self.limiter.pause(call.slot, retry.pause)  # _reserve then waits for it
            await asyncio.sleep(retry.wait)

    async def _attempt(
        self, request: web.Request, call: UpstreamCall, held: Held | None
    ) -> tuple[UpstreamAnswer, str | None, float | None]:
        """One upstream call: its answer, and for an error its kind (runner/models/base.py classifies
        it) and the server's retry-after; None for an answer the caller takes as it is."""
        try:
            answer = await self._post(request, call)
        except (TimeoutError, aiohttp.ClientError) as e:
            body = {"error": {"type": "api_connection_error", "message": f"upstream unreachable: {e}"}}
            return UpstreamAnswer(502, json.dumps(body).encode(), "application/json"), "transient", None
        if answer.status == 200 or answer.sent is not None:
            if held is not None:
                held.used(budget_input_tokens(call.provider, answer.usage), answer.usage.output_tokens)
            return answer, None, None
        err = classify_status(
            answer.status, answer.body[:500].decode(errors="replace"), answer.headers, _json(answer.body)
        )
        return answer, err.kind, err.retry_after

    async def _post(self, request: web.Request, call: UpstreamCall) -> UpstreamAnswer:
        headers = call.sign(call.url, call.raw, call.headers) if call.sign is not None else call.headers
        async with self.session.post(call.url, data=call.raw, headers=headers) as up:
            if up.status == 200 and call.streaming:
                return await _relay(request, up, call.provider, call.event_stream)
            body = await up.read()
            answer = UpstreamAnswer(up.status, body, up.content_type, dict(up.headers))
            if up.status == 200 and isinstance(parsed := _json(body), dict):
                answer.usage = from_body(parsed, call.provider)
            return answer

    async def _reserve(self, slot: int | None, estimate: float, run: int = -1) -> Reservation | None:
        if self.limiter is None or slot is None:
            return None
        first = time.monotonic()
        while True:
            r = self.limiter.try_acquire(slot, estimate, waited=time.monotonic() - first, run=run)
            if not isinstance(r, float):
                return r
            await asyncio.sleep(min(max(r, 0.005), 0.5))

    def _held(self, res: Reservation | None) -> contextlib.AbstractContextManager[Held | None]:
        if self.limiter is None or res is None:
            return contextlib.nullcontext()
        return self.limiter.held(res)


async def _relay(
    request: web.Request, up: aiohttp.ClientResponse, provider: str, event_stream: bool = False
) -> UpstreamAnswer:
    """Chunk by chunk, as they arrive; the whole stream (to cache) and its usage come back too."""
    content_type = up.headers.get("content-type", "text/event-stream")
    keep = {k: v for k, v in up.headers.items() if k.lower().startswith(KEEP_HEADERS)}
    out = web.StreamResponse(status=200, headers={**keep, "content-type": content_type})
    await out.prepare(request)
    seen = EventStreamUsage(provider) if event_stream else StreamUsage(provider)
    chunks = []
    try:
        async for chunk in up.content.iter_any():
            seen.feed(chunk)
            chunks.append(chunk)
            await out.write(chunk)
    except (TimeoutError, aiohttp.ClientError) as e:
        # Part of the stream is already with the caller: it cannot be retried, only cut (and not cached).
        logger.warning("upstream stream broke after {} chunks: {}", len(chunks), e)
        return UpstreamAnswer(
            BROKEN_STREAM, b"".join(chunks), content_type.split(";")[0], usage=seen.usage, sent=out
        )
    await out.write_eof()
    return UpstreamAnswer(200, b"".join(chunks), content_type.split(";")[0], usage=seen.usage, sent=out)


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None
