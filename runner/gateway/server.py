"""The model gateway: one local HTTP endpoint every worker's SDK calls go through.

Speaks Anthropic `POST /v1/messages` (+ `/v1/messages/count_tokens`) and OpenAI
`POST /v1/chat/completions` and `POST /v1/responses`, optionally under `/run/<run>/worker/<n>` so a
call is counted to its run. Each call: the response cache (canonical request; a stream is kept as
its events and replayed as a valid stream), the shared budget (the runner's SharedLimiter: one
budget for every caller), the upstream with retries on 429/529/5xx/dropped connections
(retry-after and reset headers honoured, jittered backoff, bounded); fatal 4xx and, past the bound,
the upstream's own error pass through unchanged. Streams are relayed chunk by chunk as they arrive.
API keys come from the caller's headers or the gateway's environment and are never logged or
keyed on.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from loguru import logger

from runner.cache import ResponseCache
from runner.config import RetrySettings
from runner.gateway.usage import CallUsage, StreamUsage, from_body
from runner.models.base import classify_status
from runner.ratelimit import SharedLimiter

DEFAULT_UPSTREAMS = {"anthropic": "https://api.anthropic.com", "openai": "https://api.openai.com"}
KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
# Headers that describe the caller or the hop, not the request: never forwarded.
_HOP = {"host", "content-length", "connection", "accept-encoding", "transfer-encoding", "keep-alive"}
SIM_DEFAULT = "sim-strong"  # who plays a model the simulator does not know
ROUTES = {"/v1/messages": "anthropic", "/v1/messages/count_tokens": "anthropic",
          "/v1/chat/completions": "openai", "/v1/responses": "openai"}


@dataclass
class GatewaySettings:
    upstreams: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_UPSTREAMS))
    retry: RetrySettings = field(default_factory=RetrySettings)
    limit_keys: dict[str, str] = field(default_factory=dict)  # "provider/model" or "provider" -> limiter key
    sim_models: dict[str, str] | None = None  # simulator mode: model -> the simulator model that plays it
    timeout_seconds: float = 600.0


class Gateway:
    def __init__(self, settings: GatewaySettings, *, limiter: SharedLimiter | None = None,
                 cache: ResponseCache | None = None) -> None:
        self.settings, self.limiter, self.cache = settings, limiter, cache
        self.stats: dict[str, Counter[str]] = {}
        self.session: aiohttp.ClientSession | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/{path:.*}", self.handle)
        app.router.add_get("/stats", self.get_stats)
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        return app

    async def _open(self, app: web.Application) -> None:
        timeout = aiohttp.ClientTimeout(total=self.settings.timeout_seconds, sock_connect=10)
        self.session = aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0),
                                             auto_decompress=False)

    async def _close(self, app: web.Application) -> None:
        if self.session is not None:
            await self.session.close()

    async def get_stats(self, request: web.Request) -> web.Response:
        return web.json_response({run: dict(c) for run, c in self.stats.items()})

    # ------------------------------------------------------------------ one call
    async def handle(self, request: web.Request) -> web.StreamResponse:
        run, path = _split(request.match_info["path"])
        provider = ROUTES.get(path)
        if provider is None:
            return web.json_response({"error": {"type": "not_found", "message": f"no route {path}"}}, status=404)
        stats = self.stats.setdefault(run, Counter())
        stats["calls"] += 1
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        streaming = isinstance(body, dict) and bool(body.get("stream"))
        key = _cache_key(provider, path, raw) if self.cache is not None and path != "/v1/messages/count_tokens" \
            else None
        if key is not None and (hit := self.cache.get(key)) is not None:  # type: ignore[union-attr]
            stats["cache_hits"] += 1
            return web.Response(status=200, body=hit["body"].encode(), content_type=hit["content_type"])
        stats["cache_misses"] += key is not None
        model = str(body.get("model", "")) if isinstance(body, dict) else ""
        headers = self._upstream_headers(request, provider, model)
        if self.settings.sim_models is not None and isinstance(body, dict) and model:
            body = {**body, "model": self.settings.sim_models.get(model, SIM_DEFAULT)}
            raw = json.dumps(body).encode()
        t0 = time.monotonic()
        answer = await self._send(request, provider, path, raw, headers, model, streaming, stats)
        stats["latency_ms"] += int((time.monotonic() - t0) * 1000)
        if key is not None and self.cache is not None and answer.status == 200:
            self.cache.put(key, provider, model, {"body": answer.text, "content_type": answer.content_type})
        return answer.response

    def _upstream_headers(self, request: web.Request, provider: str, model: str) -> dict[str, str]:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        has_key = any(k.lower() in ("x-api-key", "authorization") for k in headers)
        if not has_key and os.environ.get(KEY_ENV[provider]):
            key = os.environ[KEY_ENV[provider]]
            headers.update({"x-api-key": key} if provider == "anthropic" else {"authorization": f"Bearer {key}"})
        if self.settings.sim_models is not None and model:
            headers["x-sim-plays"] = model
        return headers

    def _limit_key(self, provider: str, model: str) -> str | None:
        keys = self.settings.limit_keys
        return keys.get(f"{provider}/{model}") or keys.get(provider)

    async def _send(self, request: web.Request, provider: str, path: str, raw: bytes, headers: dict[str, str],
                    model: str, streaming: bool, stats: Counter[str]) -> _Answer:
        """Upstream with budget and retries; a stream is relayed as it comes (the answer holds it whole)."""
        assert self.session is not None
        url = self.settings.upstreams[provider].rstrip("/") + path
        retry = self.settings.retry
        deadline = time.monotonic() + retry.total_cap_seconds
        slot = self._slot(provider, model)
        estimate = len(raw) / 4
        for attempt in range(1, retry.max_attempts + 1):
            res = await self._reserve(slot, estimate)
            try:
                async with self.session.post(url, data=raw, headers=headers) as up:
                    if up.status == 200 and streaming:
                        answer = await self._relay(request, up, provider)
                        self._settle(slot, res, answer.usage, stats)
                        return answer
                    text = await up.text()
                    answer = _Answer(up.status, text, up.content_type, dict(up.headers))
            except (TimeoutError, aiohttp.ClientError) as e:
                self._release(slot, res)
                wait = _backoff(attempt, retry)
                if attempt == retry.max_attempts or time.monotonic() + wait > deadline:
                    return _Answer(502, json.dumps({"error": {"type": "api_connection_error",
                                                              "message": f"upstream unreachable: {e}"}}),
                                   "application/json", {})
                stats["retries"] += 1
                await asyncio.sleep(wait)
                continue
            if answer.status == 200:
                self._settle(slot, res, _usage(answer.text, provider), stats)
                return answer
            self._release(slot, res)
            err = classify_status(answer.status, answer.text[:500], answer.headers, _json(answer.text))
            if err.kind not in ("rate_limited", "transient"):
                return answer  # the caller's own problem: unchanged
            wait = err.retry_after if err.retry_after is not None else _backoff(attempt, retry)
            if err.kind == "rate_limited":
                stats["rate_limited"] += 1
                if self.limiter is not None and slot is not None:
                    self.limiter.pause(slot, wait)
            if attempt == retry.max_attempts or time.monotonic() + wait > deadline:
                return answer  # past the bound: the upstream's own error
            stats["retries"] += 1
            await asyncio.sleep(min(wait, retry.max_backoff_seconds))
        raise AssertionError("unreachable")

    def _slot(self, provider: str, model: str) -> int | None:
        key = self._limit_key(provider, model)
        if self.limiter is None or key is None or key not in self.limiter.keys:
            return None
        return self.limiter.slot(key)

    async def _reserve(self, slot: int | None, estimate: float) -> Any:
        if self.limiter is None or slot is None:
            return None
        while True:
            r = self.limiter.try_acquire(slot, estimate)
            if not isinstance(r, float):
                return r
            await asyncio.sleep(min(max(r, 0.005), 0.5))

    def _release(self, slot: int | None, res: Any) -> None:
        if self.limiter is not None and res is not None:
            self.limiter.settle(res, 0, 0, ok=False)

    def _settle(self, slot: int | None, res: Any, usage: CallUsage, stats: Counter[str]) -> None:
        stats["ok"] += 1
        stats["input_tokens"] += usage.input_tokens
        stats["output_tokens"] += usage.output_tokens
        stats["cache_read_tokens"] += usage.cache_read_tokens
        stats["cache_write_tokens"] += usage.cache_write_tokens
        if self.limiter is not None and res is not None:
            self.limiter.settle(res, usage.input_tokens + usage.cache_write_tokens, usage.output_tokens)

    async def _relay(self, request: web.Request, up: aiohttp.ClientResponse, provider: str) -> _Answer:
        """Chunk by chunk, as they arrive; the whole stream (to cache) and its usage come back too."""
        content_type = up.headers.get("content-type", "text/event-stream")
        out = web.StreamResponse(status=200, headers={"content-type": content_type})
        await out.prepare(request)
        seen = StreamUsage(provider)
        chunks = []
        async for chunk in up.content.iter_any():
            seen.feed(chunk)
            chunks.append(chunk)
            await out.write(chunk)
        await out.write_eof()
        return _Answer(200, b"".join(chunks).decode(errors="replace"), content_type.split(";")[0], {},
                       usage=seen.usage, sent=out)


@dataclass
class _Answer:
    status: int
    text: str
    content_type: str
    headers: dict[str, str]
    usage: CallUsage = field(default_factory=CallUsage)
    sent: web.StreamResponse | None = None  # a relayed stream: already on its way to the caller

    @property
    def response(self) -> web.StreamResponse:
        if self.sent is not None:
            return self.sent
        keep = {k: v for k, v in self.headers.items() if k.lower().startswith(("x-ratelimit", "anthropic-ratelimit",
                                                                               "retry-after", "request-id",
                                                                               "x-request-id"))}
        return web.Response(status=self.status, text=self.text, content_type=self.content_type, headers=keep)


def _split(path: str) -> tuple[str, str]:
    """`run/<run>/worker/<n>/v1/...` -> (run, /v1/...); a bare `/v1/...` counts to run "-"."""
    parts = path.strip("/").split("/")
    if len(parts) > 4 and parts[0] == "run" and parts[2] == "worker":
        return parts[1], "/" + "/".join(parts[4:])
    return "-", "/" + "/".join(parts)


def _cache_key(provider: str, path: str, raw: bytes) -> str:
    """The canonical request: same JSON, same key, whatever the key order or spacing; no headers."""
    try:
        canon = json.dumps(json.loads(raw), sort_keys=True, separators=(",", ":")).encode()
    except ValueError:
        canon = raw
    return hashlib.sha256(provider.encode() + path.encode() + b"\0" + canon).hexdigest()


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _usage(text: str, provider: str) -> CallUsage:
    body = _json(text)
    return from_body(body, provider) if isinstance(body, dict) else CallUsage()


def _backoff(attempt: int, retry: RetrySettings) -> float:
    """Full jitter, capped: spreads the retries of many callers apart."""
    return random.uniform(0, min(retry.max_backoff_seconds, retry.base_seconds * 2 ** (attempt - 1)))


def serve(gateway: Gateway, host: str = "127.0.0.1", port: int = 0) -> None:
    """Run until killed; prints 'listening on http://HOST:PORT' once bound."""
    async def main() -> None:
        runner = web.AppRunner(gateway.app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        print(f"listening on http://{host}:{bound}", flush=True)
        logger.info("gateway listening on {}:{}", host, bound)
        await asyncio.Event().wait()

    asyncio.run(main())
