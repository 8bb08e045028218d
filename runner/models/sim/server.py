"""The simulator: one async HTTP server speaking Anthropic Messages and OpenAI Chat Completions.

The official SDKs talk to it through base_url. Rate limits are enforced per model with real
429s (retry-after and the providers' ratelimit headers), and faults are injected at set rates,
so every error path of the clients runs here as it would against the real APIs.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import random
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from runner.config import Limits, SimSettings
from runner.models.sim import wire
from runner.models.sim.policy import PROFILES, Msg, respond


def estimate_tokens(obj: Any) -> int:
    """~4 characters a token: the same estimate the client-side limiter uses."""
    return max(1, math.ceil(len(json.dumps(obj, sort_keys=True, separators=(",", ":"))) / 4))


@dataclass
class Bucket:
    """A token bucket refilled continuously at capacity per minute."""

    capacity: float
    level: float
    stamp: float

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.capacity / 60.0)
        self.stamp = now

    def wait_for(self, amount: float) -> float:
        return 0.0 if self.level >= amount else (min(amount, self.capacity) - self.level) * 60.0 / self.capacity


class SimState:
    def __init__(self, settings: SimSettings) -> None:
        self.settings = settings
        self.rng = random.Random(settings.seed)
        self.buckets: dict[tuple[str, str], Bucket] = {}
        self.stats: Counter[str] = Counter()
        self.per_model: dict[str, Counter[str]] = {}
        self.started = time.monotonic()

    def _bucket(self, model: str, dim: str, cap: float) -> Bucket:
        key = (model, dim)
        if key not in self.buckets:
            self.buckets[key] = Bucket(cap, cap, time.monotonic())
        return self.buckets[key]

    def admit(self, model: str, in_tokens: int, out_estimate: int) -> tuple[float, dict[str, float]]:
        """0 if admitted (budgets charged), else seconds to wait; and the remaining budgets."""
        lim: Limits | None = self.settings.limits.get(model)
        if lim is None:
            return 0.0, {}
        now = time.monotonic()
        need = [("requests", lim.rpm, 1.0), ("input", lim.itpm, float(in_tokens)),
                ("output", lim.otpm, float(out_estimate))]
        buckets = [(self._bucket(model, d, cap), amt) for d, cap, amt in need if cap]
        for b, _ in buckets:
            b.refill(now)
        wait = max((b.wait_for(a) for b, a in buckets), default=0.0)
        if wait == 0:
            for b, a in buckets:
                b.level -= a
        remaining = {d: self._bucket(model, d, cap).level for d, cap, _ in need if cap}
        return wait, remaining

    def latency(self, rid: str) -> float:
        lat = self.settings.latency
        if lat.p50_ms <= 0 or lat.scale <= 0:
            return 0.0
        if not lat.p95_ms or lat.p95_ms <= lat.p50_ms:
            return lat.p50_ms * lat.scale / 1000
        sigma = math.log(lat.p95_ms / lat.p50_ms) / 1.6449  # lognormal through p50 and p95
        z = random.Random(rid).gauss(0, 1)
        return lat.p50_ms * math.exp(sigma * z) * lat.scale / 1000

    def fault(self) -> str | None:
        f = self.settings.faults
        roll = self.rng.random()
        for name, rate in (("http_500", f.http_500), ("overloaded", f.overloaded), ("drop", f.drop),
                           ("slow", f.slow), ("malformed", f.malformed)):
            if roll < rate:
                return name
            roll -= rate
        return None


def _ratelimit_headers(api: str, remaining: dict[str, float], wait: float, lim: Limits | None) -> dict[str, str]:
    if lim is None:
        return {}
    reset = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + max(wait, 1)))
    h: dict[str, str] = {}
    if api == "anthropic":
        for dim, cap in (("requests", lim.rpm), ("input-tokens", lim.itpm), ("output-tokens", lim.otpm)):
            if cap:
                key = {"requests": "requests", "input-tokens": "input", "output-tokens": "output"}[dim]
                h[f"anthropic-ratelimit-{dim}-limit"] = str(int(cap))
                h[f"anthropic-ratelimit-{dim}-remaining"] = str(max(0, int(remaining.get(key, cap))))
                h[f"anthropic-ratelimit-{dim}-reset"] = reset
    else:
        if lim.rpm:
            h["x-ratelimit-limit-requests"] = str(int(lim.rpm))
            h["x-ratelimit-remaining-requests"] = str(max(0, int(remaining.get("requests", lim.rpm))))
            h["x-ratelimit-reset-requests"] = f"{max(wait, 0.001):.3f}s"
        if lim.itpm:
            h["x-ratelimit-limit-tokens"] = str(int(lim.itpm))
            h["x-ratelimit-remaining-tokens"] = str(max(0, int(remaining.get("input", lim.itpm))))
            h["x-ratelimit-reset-tokens"] = f"{max(wait, 0.001):.3f}s"
    return h


async def _handle(request: web.Request, api: str) -> web.StreamResponse:
    state: SimState = request.app["state"]
    state.stats["requests"] += 1
    err = wire.anthropic_error if api == "anthropic" else wire.openai_error
    raw = await request.read()
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return web.json_response(err(400, "body is not JSON"), status=400)
    if not isinstance(body, dict):
        return web.json_response(err(400, "body must be a JSON object"), status=400)
    model = str(body.get("model", ""))
    auth = request.headers.get("x-api-key") or request.headers.get("authorization", "")
    if not auth or auth.strip() in ("Bearer", "Bearer invalid", "invalid"):
        state.stats["401"] += 1
        return web.json_response(err(401, "invalid x-api-key"), status=401)
    if model not in PROFILES:
        state.stats["404"] += 1
        return web.json_response(err(404, f"model: {model}"), status=404)
    per = state.per_model.setdefault(model, Counter())
    per["requests"] += 1
    # The SDKs serialise the same request to the same bytes: hash and measure those, no re-encoding.
    rid = hashlib.sha256(api.encode() + b"\x1f" + raw).hexdigest()
    in_tokens = max(1, len(raw) // 4)
    out_estimate = min(int(body.get("max_tokens") or body.get("max_completion_tokens") or 256), 256)
    wait, remaining = state.admit(model, in_tokens, out_estimate)
    lim = state.settings.limits.get(model)
    if wait > 0:
        state.stats["429"] += 1
        per["429"] += 1
        headers = {"retry-after": str(max(1, math.ceil(wait))), "retry-after-ms": str(int(wait * 1000)),
                   **_ratelimit_headers(api, remaining, wait, lim)}
        return web.json_response(err(429, f"rate limit exceeded for {model}"), status=429, headers=headers)
    # x-sim-fault forces one (tests); otherwise faults come at the configured rates.
    fault = request.headers.get("x-sim-fault") or state.fault()
    if fault == "429":
        state.stats["429"] += 1
        headers = {"retry-after": "1", **_ratelimit_headers(api, {}, 1.0, Limits(rpm=60))}
        return web.json_response(err(429, "rate limit exceeded (forced)"), status=429, headers=headers)
    if fault:
        state.stats[f"fault_{fault}"] += 1
    if fault == "http_500":
        return web.json_response(err(500, "internal server error"), status=500)
    if fault == "overloaded":
        status = 529 if api == "anthropic" else 503
        return web.json_response(err(status, "overloaded"), status=status)
    if fault == "drop":
        assert request.transport is not None
        request.transport.close()
        return web.Response(status=500)
    if fault == "slow":
        await asyncio.sleep(state.settings.faults.slow_seconds)
    msgs: list[Msg] = wire.anthropic_messages(body) if api == "anthropic" else wire.openai_messages(body)
    action = respond(model, msgs)
    await asyncio.sleep(state.latency(rid))
    out_tokens = estimate_tokens({"text": action.text, "calls": [[c.name, c.args] for c in action.calls]})
    state.stats["input_tokens"] += in_tokens
    state.stats["output_tokens"] += out_tokens
    per["input_tokens"] += in_tokens
    per["output_tokens"] += out_tokens
    render = wire.anthropic_response if api == "anthropic" else wire.openai_response
    payload = render(action, model, rid, (in_tokens, out_tokens))
    headers = {"request-id" if api == "anthropic" else "x-request-id": f"req_{rid[:20]}",
               **_ratelimit_headers(api, remaining, 0, lim)}
    if fault == "malformed":
        return web.Response(text=json.dumps(payload)[:-7], content_type="application/json", headers=headers)
    state.stats["ok"] += 1
    return web.json_response(payload, headers=headers)


async def _guarded(request: web.Request, api: str) -> web.StreamResponse:
    try:
        return await _handle(request, api)
    except Exception as e:  # a policy bug must show up as a 500 with a reason, and in the log
        traceback.print_exc(file=sys.stderr)
        err = wire.anthropic_error if api == "anthropic" else wire.openai_error
        return web.json_response(err(500, f"simulator error: {type(e).__name__}: {e}"), status=500)


async def _anthropic(request: web.Request) -> web.StreamResponse:
    return await _guarded(request, "anthropic")


async def _openai(request: web.Request) -> web.StreamResponse:
    return await _guarded(request, "openai")


async def _stats(request: web.Request) -> web.Response:
    state: SimState = request.app["state"]
    return web.json_response({**state.stats, "models": state.per_model,
                              "uptime_seconds": time.monotonic() - state.started})


async def _reset_stats(request: web.Request) -> web.Response:
    state: SimState = request.app["state"]
    state.stats.clear()
    state.per_model.clear()
    state.buckets.clear()
    state.started = time.monotonic()
    return web.json_response({"ok": True})


async def _health(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def make_app(settings: SimSettings) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app["state"] = SimState(settings)
    app.add_routes([web.post("/v1/messages", _anthropic), web.post("/v1/chat/completions", _openai),
                    web.get("/stats", _stats), web.post("/stats/reset", _reset_stats), web.get("/health", _health)])
    return app


def serve(settings: SimSettings, *, announce: bool = True) -> None:
    """Run until killed; prints 'listening on http://HOST:PORT' once bound (port 0 = any free port)."""

    async def main() -> None:
        runner = web.AppRunner(make_app(settings), access_log=None, handle_signals=True)
        await runner.setup()
        site = web.TCPSite(runner, settings.host, settings.port, backlog=1024)
        await site.start()
        server: Any = site._server
        sockets = server.sockets if server is not None else []
        port = sockets[0].getsockname()[1] if sockets else settings.port
        if announce:
            print(f"listening on http://{settings.host}:{port}", flush=True)
        await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
