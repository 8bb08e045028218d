"""The simulator: one async HTTP server speaking Anthropic Messages and OpenAI Chat Completions.

The official SDKs talk to it through base_url. Rate limits are enforced per model with real
429s (retry-after and the providers' ratelimit headers), and faults are injected at set rates,
so every error path of the clients runs here as it would against the real APIs.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import math
import random
import ssl
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from runner import heap
from runner.config import Limits, SimSettings
from runner.models.base import TRIAL_HEADER
from runner.models.sim import (
    azure,
    azure_batches,
    batch_routes,
    bedrock,
    bedrock_batches,
    checks,
    eventstream,
    gcs,
    models_routes,
    responses,
    rulebook,
    s3,
    strict,
    vertex,
    vertex_batches,
    wire,
)
from runner.models.sim import thinking as sim_thinking
from runner.models.sim.auth import unauthorized
from runner.models.sim.batches import Batches
from runner.models.sim.body import parse as parse_body
from runner.models.sim.dialect import ANSWER, FIRST_PARTY, Dialect, Translated
from runner.models.sim.policy import PROFILES, Action, Msg, respond
from runner.models.sim.promptcache import PromptCache, segments
from runner.models.sim.promptcache import tokens as estimate_tokens
from runner.models.sim.stream import anthropic_events, anthropic_stream, openai_chunks
from runner.serving import site_for

QUOTA_MESSAGE = {
    "openai": "You exceeded your current quota, please check your plan and billing details.",
    "anthropic": "Your credit balance is too low to access the Anthropic API. "
    "Please go to Plans & Billing to upgrade or purchase credits.",
}


@dataclass
class Bucket:
    """A token bucket refilled continuously at capacity per minute. `wasted`: what refilling a full bucket
    lost (the budget's time nobody used, the floor bench's measure of it); `first`: when it was made (its
    model's first request), `stamp` when last refilled (its last request)."""

    capacity: float
    level: float
    stamp: float
    wasted: float = 0.0
    first: float = 0.0

    def refill(self, now: float) -> None:
        level = self.level + (now - self.stamp) * self.capacity / 60.0
        self.wasted += max(0.0, level - self.capacity)
        self.level = min(self.capacity, level)
        self.stamp = now

    def wait_for(self, amount: float) -> float:
        return (
            0.0 if self.level >= amount else (min(amount, self.capacity) - self.level) * 60.0 / self.capacity
        )


class SimState:
    def __init__(self, settings: SimSettings) -> None:
        self.settings = settings
        self.rng = random.Random(settings.seed)
        # by request: how many times it came (a retry draws its fault anew)
        self.asked: Counter[str] = Counter()
        self.buckets: dict[tuple[str, str], Bucket] = {}
        self.stats: Counter[str] = Counter()
        self.per_model: dict[str, Counter[str]] = {}
        self.played: dict[str, Counter[str]] = {}  # by the model a gateway's caller asked for (x-sim-plays)
        self.started = time.monotonic()
        self.prompt_cache = PromptCache()

    def _bucket(self, model: str, dim: str, cap: float) -> Bucket:
        key = (model, dim)
        if key not in self.buckets:
            now = time.monotonic()
            self.buckets[key] = Bucket(cap, cap, now, first=now)
        return self.buckets[key]

    def admit(self, model: str, in_tokens: int, out_estimate: int) -> tuple[float, dict[str, float]]:
        """0 if admitted (budgets charged), else seconds to wait; and the remaining budgets."""
        lim: Limits | None = self.settings.limits.get(model)
        if lim is None:
            return 0.0, {}
        now = time.monotonic()
        need = [
            ("requests", lim.rpm, 1.0),
            ("input", lim.itpm, float(in_tokens)),
            ("output", lim.otpm, float(out_estimate)),
        ]
        buckets = [(self._bucket(model, d, cap), amt) for d, cap, amt in need if cap]
        for b, _ in buckets:
            b.refill(now)
        wait = max((b.wait_for(a) for b, a in buckets), default=0.0)
        if wait == 0:
            for b, a in buckets:
                b.level -= a
        remaining = {d: self._bucket(model, d, cap).level for d, cap, _ in need if cap}
        return wait, remaining

    def refund(self, model: str, dim: str, amount: float) -> None:
        """Give back budget a request did not use after all: input (Anthropic: cache reads), output (the
        estimate charged up front, over what was written)."""
        b = self.buckets.get((model, dim))
        if b is not None and amount > 0:
            b.level = min(b.capacity, b.level + amount)

    def limited_as(self, model: str, plays: str | None) -> str:
        """The model whose limits a request draws from: the real model a caller plays, where limits
        name it (real APIs limit per model; several simulator models may play one), else its own."""
        return plays if plays and plays in self.settings.limits else model

    def latency(self, rid: str) -> float:
        lat = self.settings.latency
        if lat.p50_ms <= 0 or lat.scale <= 0:
            return 0.0
        if not lat.p95_ms or lat.p95_ms <= lat.p50_ms:
            return lat.p50_ms * lat.scale / 1000
        sigma = math.log(lat.p95_ms / lat.p50_ms) / 1.6449  # lognormal through p50 and p95
        z = random.Random(rid).gauss(0, 1)
        return lat.p50_ms * math.exp(sigma * z) * lat.scale / 1000

    def fault(self, rid: str) -> str | None:
        """A fault at the configured rates, drawn from the request and how many times it came before: the
        same job meets the same faults whatever the order its calls arrive in (a run is reproducible), and
        a retried call draws again."""
        f = self.settings.faults
        self.asked[rid] += 1
        roll = random.Random(f"{self.settings.seed}\x1f{rid}\x1f{self.asked[rid]}").random()
        for name, rate in (
            ("http_500", f.http_500),
            ("overloaded", f.overloaded),
            ("drop", f.drop),
            ("slow", f.slow),
            ("malformed", f.malformed),
            ("bad_request", f.bad_request),
        ):
            if roll < rate:
                return name
            roll -= rate
        return None


def _ratelimit_headers(
    api: str | None, remaining: dict[str, float], wait: float, lim: Limits | None
) -> dict[str, str]:
    """`api`: whose headers (anthropic, openai); None: a route that documents none."""
    if lim is None or api is None:
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


def _usage_fields(api: str, u: Any, out_tokens: int) -> dict[str, Any]:
    if api == "anthropic":
        cached = (
            {
                "cache_creation_input_tokens": u.cache_write,
                "cache_read_input_tokens": u.cache_read,
                "cache_creation": {
                    "ephemeral_5m_input_tokens": u.cache_write - u.cache_write_1h,
                    "ephemeral_1h_input_tokens": u.cache_write_1h,
                },
            }
            if u.asked
            else {}
        )
        return {"input_tokens": u.input_tokens, "output_tokens": out_tokens, **cached}
    return {
        "prompt_tokens": u.input_tokens,
        "completion_tokens": out_tokens,
        "total_tokens": u.input_tokens + out_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cache_read, "audio_tokens": 0},
    }


def _fault_response(d: Dialect, fault: str, request: web.Request) -> web.StreamResponse | None:
    if fault == "429":
        headers = {"retry-after": "1", **_ratelimit_headers(d.ratelimit, {}, 1.0, Limits(rpm=60))}
        return d.error(429, "rate limit exceeded (forced)", headers=headers)
    if fault == "insufficient_quota":
        status = 429 if d.api == "openai" else 400
        return d.error(status, QUOTA_MESSAGE[d.api], code="insufficient_quota" if d.api == "openai" else None)
    if fault == "bad_request":
        return d.error(400, "messages.1.content: simulated rejection of this request")
    if fault == "http_500":
        return d.error(500, "internal server error")
    if fault == "overloaded":
        return d.error(d.overloaded, "overloaded")
    if fault == "drop":
        assert request.transport is not None
        request.transport.close()
        return web.Response(status=500)
    return None


async def _stream(
    request: web.Request, d: Dialect, payload: dict[str, Any], headers: dict[str, str], body: dict[str, Any]
) -> web.StreamResponse:
    kind = (
        {"Content-Type": eventstream.CONTENT_TYPE, "X-Amzn-Bedrock-Content-Type": "application/json"}
        if d.event_stream
        else {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    resp = web.StreamResponse(headers={**headers, **kind})
    if request.app["state"].settings.compress:
        resp.enable_compression()  # by the request's Accept-Encoding, as the real APIs' front ends do
    await resp.prepare(request)
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    events: Iterable[bytes]
    if request.get("responses") is not None:
        events = responses.events(payload)
    elif d.event_stream:
        events = (eventstream.chunk(e) for e in anthropic_stream(payload))
    elif d.api == "anthropic":
        events = anthropic_events(payload)
    else:
        events = openai_chunks(payload, include_usage=include_usage)
    pause = request.app["state"].settings.stream_interval_ms / 1000
    for n, event in enumerate(events):
        if pause and n:
            await asyncio.sleep(pause)
        await resp.write(event)
    await resp.write_eof()
    return resp


def _throttled(
    d: Dialect, state: SimState, model: str, limited: str, wait: float, remaining: Any
) -> web.Response:
    """A 429 as the provider sends it: retry-after (seconds, and ms as Anthropic's SDK reads) and the
    rate-limit headers with what is left (a cloud that documents none: the status and its body only)."""
    state.stats["429"] += 1
    state.per_model[model]["429"] += 1
    if d.ratelimit is None:
        return d.error(429, f"rate limit exceeded for {limited}")
    headers = {
        "retry-after": str(max(1, math.ceil(wait))),
        "retry-after-ms": str(int(wait * 1000)),
        **_ratelimit_headers(d.ratelimit, remaining, wait, state.settings.limits.get(limited)),
    }
    return d.error(429, f"rate limit exceeded for {limited}", headers=headers)


async def _handle(request: web.Request, api: str, raw: bytes | None = None) -> web.StreamResponse:
    """One first-party API request. `raw`: the body to answer instead of the request's (a Responses API
    request, as the chat request it asks)."""
    return await answer_request(request, FIRST_PARTY[api], raw)


async def answer_request(
    request: web.Request, d: Dialect, raw: bytes | None = None, cloud: Translated | None = None
) -> web.StreamResponse:
    """One request: refuse it as the API would, throttle it, fail it on purpose, or answer it, in dialect
    `d`; `cloud`: a cloud route's request, translated (its credentials checked by the route)."""
    state: SimState = request.app["state"]
    # A provider's latency runs from the request's arrival, its own work included: the answer is due
    # then (this server shares the machine with the runner, and its work must not add to a call's time)
    arrived = time.monotonic()
    state.stats["requests"] += 1
    api, headers_in = d.api, cloud.headers if cloud is not None else request.headers
    raw = cloud.raw if cloud is not None else raw if raw is not None else await request.read()
    try:
        body = parse_body(raw)  # orjson, the run's tool list parsed once (models/sim/body.py)
    except orjson.JSONDecodeError:
        return d.error(400, "body is not JSON")
    if not isinstance(body, dict):
        return d.error(400, "body must be a JSON object")
    if (refused := _refuse(request, d, state, headers_in, body, checked=cloud is not None)) is not None:
        return refused
    model = str(body.get("model", ""))
    state.per_model.setdefault(model, Counter())["requests"] += 1
    # The SDKs serialise the same request to the same bytes: hash those, no re-encoding.
    rid = hashlib.sha256(api.encode() + b"\x1f" + raw).hexdigest()
    segs = segments(api, body)
    out_estimate = min(int(body.get("max_tokens") or body.get("max_completion_tokens") or 256), 256)
    limited = _limited(state, model, headers_in, cloud)
    wait, remaining = state.admit(limited, sum(s.tokens for s in segs), out_estimate)
    if wait > 0:
        return _throttled(d, state, model, limited, wait, remaining)
    # x-sim-fault forces one (tests); otherwise faults come at the configured rates.
    fault = request.headers.get("x-sim-fault") or state.fault(rid)
    if fault:
        state.stats[f"fault_{fault}" if fault != "429" else "429"] += 1
        failed = _fault_response(d, fault, request)
        if failed is not None:
            return failed
    if fault == "slow":
        await asyncio.sleep(state.settings.faults.slow_seconds)
        arrived += state.settings.faults.slow_seconds
    headers = {
        **({d.request_id: f"req_{rid[:20]}"} if d.request_id else {}),
        **_ratelimit_headers(d.ratelimit, remaining, 0, state.settings.limits.get(limited)),
    }
    payload = await _answer(state, headers_in, api, body, segs, rid, limited, out_estimate, arrived)
    if request.get("responses") is not None:
        payload = responses.from_chat(payload, request["responses"])
    if fault == "malformed":
        return web.Response(text=json.dumps(payload)[:-7], content_type="application/json", headers=headers)
    state.stats["ok"] += 1
    if body.get("stream"):
        return await _stream(request, d, payload, headers, body)
    return web.json_response(payload, headers=headers, dumps=_dumps)


async def answer_inside(
    state: SimState, headers: Mapping[str, str], api: str, body: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    """One request inside a batch, as the interactive endpoint would take it: refused (status and the API's
    error body) or answered (200 and the message), at once. A batch takes its time from its own turnaround
    (runner/models/sim/batches.py) and draws nothing from the per-minute limits."""
    err = wire.anthropic_error if api == "anthropic" else wire.openai_error
    if (invalid := invalid_request(state, headers, api, body)) is not None:
        status, message, param, code = invalid
        return status, err(status, message, param=param, code=code)
    model = str(body.get("model", ""))
    state.per_model.setdefault(model, Counter())["requests"] += 1
    state.per_model[model]["batched"] += 1
    raw = orjson.dumps(body)
    rid = hashlib.sha256(api.encode() + b"\x1f" + raw).hexdigest()
    out_estimate = min(int(body.get("max_tokens") or body.get("max_completion_tokens") or 256), 256)
    # no bucket is named "": nothing charged, nothing refunded; arrived long ago: no latency to wait for; its
    # prompt cache at the providers' pace (the batch's turnaround may run faster than theirs)
    payload = await _answer(
        state,
        headers,
        api,
        body,
        segments(api, body),
        rid,
        "",
        out_estimate,
        -math.inf,
        scale=state.settings.batches.scale,
    )
    state.stats["ok"] += 1
    return 200, payload


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()  # the stdlib's encoder was 3 % of this process at 64 in flight


def _refuse(
    request: web.Request,
    d: Dialect,
    state: SimState,
    headers: Mapping[str, str],
    body: dict[str, Any],
    *,
    checked: bool,
) -> web.Response | None:
    """401 without a key (`checked`: a cloud's route checked its own credentials), 404 for a model nobody
    serves, 400 for what the real API would reject."""
    if not checked and (refused := unauthorized(request, d.api, state.stats)) is not None:
        return refused
    if (invalid := invalid_request(state, headers, d.api, body)) is not None:
        status, message, param, code = invalid
        return d.error(status, message, param=param, code=code)
    return None


def _limited(state: SimState, model: str, headers: Mapping[str, str], cloud: Translated | None) -> str:
    """The limits a request draws from: a cloud's model id where `simulator.limits` names it (a cloud is an
    account of its own), else the simulator model's, or the first-party model a caller plays."""
    if cloud is not None:
        return cloud.limit_key if cloud.limit_key in state.settings.limits else model
    return state.limited_as(model, headers.get("x-sim-plays"))


def offered_only(action: Action, body: dict[str, Any]) -> Action:
    """A real model only calls tools the request offers: the policy plays the built-in CRM, so with
    another harness's tools it answers in words instead of inventing a call the API would refuse."""
    offered = {(t.get("function") or t).get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
    if not action.calls or all(c.name in offered for c in action.calls):
        return action
    return Action(text="I cannot do that with the tools I have here.")


def invalid_request(
    state: SimState, headers: Mapping[str, str], api: str, body: dict[str, Any], endpoint: str | None = None
) -> tuple[int, str, str | None, str | None] | None:
    """What the real API refuses in a request's body (a model nobody serves: 404; a parameter the API or the
    model refuses, by its published rules: 400) as (status, message, param, code); None when it would be
    answered. Interactive and inside a batch alike."""
    model = str(body.get("model", ""))
    plays = played(headers, model)
    for name in {model, plays}:
        if name not in PROFILES and rulebook.known(name) is None:
            state.stats["404"] += 1
            return 404, f"model: {name}", None, None
    try:
        strict.validate(api, body)
        refused = checks.refusal(
            api, endpoint or ("messages" if api == "anthropic" else "chat.completions"), body, headers, plays
        )
        if refused is not None:
            raise refused
    except strict.RequestRefused as e:
        state.stats["400"] += 1
        state.per_model.setdefault(model, Counter())["400"] += 1
        print(
            f"{e.status} {api} {plays}: {e}" + (f" [{e.rule}]" if e.rule else ""), file=sys.stderr, flush=True
        )
        return e.status, str(e), e.param, e.code
    return None


def played(headers: Mapping[str, str], model: str) -> str:
    """The real model a request is held to: the one the caller says it plays, or the model asked for."""
    return headers.get("x-sim-plays") or model


def profile_of(model: str) -> str:
    """The policy that plays a model asked for by its real id (`runner sim serve` answers every model the
    providers' pages describe): the small ones make a small model's mistakes."""
    if model in PROFILES:
        return model
    return "sim-mini" if any(w in model for w in ("mini", "nano", "haiku")) else "sim-strong"


def _trial(headers: Mapping[str, str], body: dict[str, Any]) -> int:
    """Which trial of its record a call belongs to (x-sim-trial, from the runner); at temperature 0 a
    model answers alike each time, so every trial is the first."""
    try:
        t = int(headers.get(TRIAL_HEADER) or 1)
    except ValueError:
        return 1
    return 1 if body.get("temperature") == 0 else t


async def _answer(
    state: SimState,
    headers: Mapping[str, str],
    api: str,
    body: dict[str, Any],
    segs: list[Any],
    rid: str,
    limited: str,
    out_estimate: int,
    arrived: float,
    scale: float = 1.0,
) -> dict[str, Any]:
    """The model's move, after its latency, with usage as the provider would count it."""
    model = str(body["model"])
    plays = headers.get("x-sim-plays")
    real = played(headers, model)
    behaviour = rulebook.book(api).behaviour(real)
    usage = state.prompt_cache.account(
        api, segs, min_tokens=int(behaviour.get("min_cacheable_prompt_tokens") or 1024), scale=scale
    )
    if api == "anthropic":
        state.refund(limited, "input", usage.cache_read)  # cache reads do not count against ITPM
    msgs: list[Msg] = wire.anthropic_messages(body) if api == "anthropic" else wire.openai_messages(body)
    action = offered_only(respond(profile_of(model), msgs, _trial(headers, body)), body)
    await asyncio.sleep(max(0.0, arrived + state.latency(rid) - time.monotonic()))
    out_tokens = estimate_tokens({"text": action.text, "calls": [[c.name, c.args] for c in action.calls]})
    think = sim_thinking.mode(api, body, real)
    # thinking follows the conversation, not the request's bytes: streamed or not, it thinks and signs alike
    conversation = hashlib.sha256(orjson.dumps(body.get("messages"))).hexdigest()
    thought, think_tokens = sim_thinking.thought(conversation, think.effort) if think.thinks else ("", 0)
    limit = int(body.get("max_tokens") or body.get("max_completion_tokens") or 1 << 30)
    cut = think_tokens + out_tokens > limit
    if cut:  # the output limit ends the answer: thinking comes first, so the answer loses
        action = Action(text=action.text[: max(0, limit - think_tokens) * 4] if action.text else "")
        out_tokens = max(0, limit - think_tokens)
        think_tokens = min(think_tokens, limit)
    # charged up front, adjusted to what was written
    state.refund(limited, "output", out_estimate - out_tokens)
    counters = [state.stats, state.per_model[model]] + (
        [state.played.setdefault(plays, Counter())] if plays else []
    )
    if plays:
        state.played[plays]["requests"] += 1
    for counter in counters:
        counter["input_tokens"] += usage.input_tokens - (usage.cache_read if api == "openai" else 0)
        counter["cache_read_tokens"] += usage.cache_read
        counter["cache_write_tokens"] += usage.cache_write
        counter["output_tokens"] += out_tokens + think_tokens
        counter["thinking_tokens"] += think_tokens
    fields = _usage_fields(api, usage, out_tokens + think_tokens)
    if api == "anthropic":
        content = wire.anthropic_content(
            action, rid, thought if think.thinks else None, think.updates_as_thinking
        )
        wire.sign_thinking(
            content,
            lambda text, where: sim_thinking.sign(real, text, where),
            conversation,
            sim_thinking.prefix_digest(body, len(body.get("messages") or [])),
        )
        return wire.anthropic_response(
            content, action, model, rid, fields, stop="max_tokens" if cut else None
        )
    if think.thinks:
        fields["completion_tokens_details"] = {
            "reasoning_tokens": think_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        }
    return wire.openai_response(action, model, rid, fields, stop="length" if cut else None)


async def _guarded(request: web.Request, api: str, raw: bytes | None = None) -> web.StreamResponse:
    return await guarded(request, FIRST_PARTY[api], raw)


async def guarded(
    request: web.Request, d: Dialect, raw: bytes | None = None, cloud: Translated | None = None
) -> web.StreamResponse:
    try:
        return await answer_request(request, d, raw, cloud)
    except Exception as e:  # a policy bug must show up as a 500 with a reason, and in the log
        traceback.print_exc(file=sys.stderr)
        return d.error(500, f"simulator error: {type(e).__name__}: {e}")


async def _anthropic(request: web.Request) -> web.StreamResponse:
    return await _guarded(request, "anthropic")


async def _openai(request: web.Request) -> web.StreamResponse:
    return await _guarded(request, "openai")


async def _responses(request: web.Request) -> web.StreamResponse:
    """OpenAI's Responses API: checked against the SDK's types, answered as the chat request it asks."""
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        return web.json_response(wire.openai_error(400, "body is not JSON"), status=400)
    if not isinstance(body, dict):
        return web.json_response(wire.openai_error(400, "body must be a JSON object"), status=400)
    if not request.headers.get("authorization", "").startswith("Bearer "):
        return await _guarded(request, "openai", b"{}")  # the chat path says 401 as the API does
    problem = responses.shape_error(body)
    if problem:
        return web.json_response(
            wire.openai_error(400, f"Invalid request: {problem}", code="invalid_request"), status=400
        )
    refused = checks.refusal(
        "openai", "responses", body, request.headers, played(request.headers, str(body.get("model", "")))
    )
    if refused is not None:
        return web.json_response(
            wire.openai_error(refused.status, str(refused), param=refused.param), status=refused.status
        )
    request["responses"] = body
    return await _guarded(request, "openai", orjson.dumps(responses.to_chat(body)))


async def _count_tokens(request: web.Request) -> web.Response:
    """Anthropic's token counter: the same estimate the simulator bills, no model call, no budget."""
    try:
        body = json.loads(await request.read())
    except ValueError:
        return web.json_response(wire.anthropic_error(400, "body is not JSON"), status=400)
    # the same two ways as /v1/messages: an x-api-key, or the bearer token of an SDK built with auth_token
    if not (
        request.headers.get("x-api-key") or request.headers.get("authorization", "").startswith("Bearer ")
    ):
        return web.json_response(wire.anthropic_error(401, "x-api-key header is required"), status=401)
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body.get("model"):
        return web.json_response(wire.anthropic_error(400, "model and messages: Field required"), status=400)
    return web.json_response({"input_tokens": sum(s.tokens for s in segments("anthropic", body))})


async def _stats(request: web.Request) -> web.Response:
    state: SimState = request.app["state"]
    buckets: dict[str, dict[str, dict[str, float]]] = {}
    for (model, dim), b in state.buckets.items():  # times in seconds since the simulator started
        buckets.setdefault(model, {})[dim] = {
            "capacity": b.capacity,
            "level": b.level,
            "wasted": b.wasted,
            "first_s": b.first - state.started,
            "last_s": b.stamp - state.started,
        }
    return web.json_response(
        {
            **state.stats,
            "models": state.per_model,
            "played": state.played,
            "buckets": buckets,
            "uptime_seconds": time.monotonic() - state.started,
        }
    )


async def _health(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


@web.middleware
async def _compress(request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
    """Plain answers encoded by the request's Accept-Encoding (streams do it themselves before they start)."""
    resp: web.StreamResponse = await handler(request)
    if isinstance(resp, web.Response):
        resp.enable_compression()
    return resp


def make_app(settings: SimSettings, apis: Sequence[str] | None = None) -> web.Application:
    """`apis`: the wire formats to resolve the SDK types of ahead (None: both; another is resolved when
    first asked)."""
    # Resolving the SDKs' types takes ~1 s of CPU per SDK: do it beside the server, not before it listens.
    strict.start_warm_up(apis)
    app = web.Application(
        client_max_size=64 * 1024 * 1024, middlewares=[_compress] if settings.compress else []
    )
    app["state"] = state = SimState(settings)
    app["batches"] = Batches(
        settings.batches, functools.partial(answer_inside, state), state.stats, settings.state_dir
    )
    app[ANSWER] = guarded  # what the cloud routes hand their requests to, translated
    batch_routes.add_routes(app)
    models_routes.add_routes(app)
    for cloud in (bedrock, bedrock_batches, s3, vertex, vertex_batches, gcs, azure, azure_batches):
        cloud.add_routes(app)
    app.add_routes(
        [
            web.post("/v1/messages", _anthropic),
            web.post("/v1/chat/completions", _openai),
            web.post("/v1/responses", _responses),
            web.post("/v1/messages/count_tokens", _count_tokens),
            web.get("/stats", _stats),
            web.get("/health", _health),
        ]
    )
    return app


def serve(
    settings: SimSettings,
    *,
    announce: bool = True,
    listen_fd: int | None = None,
    apis: Sequence[str] | None = None,
) -> None:
    """Run until killed; prints 'listening on http://HOST:PORT' once it serves (port 0 = any free port;
    `listen_fd`: on that inherited listening socket instead)."""

    async def main() -> None:
        runner = web.AppRunner(make_app(settings, apis), access_log=None, handle_signals=True)
        await runner.setup()
        tls = None
        if settings.tls_cert:
            tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            tls.load_cert_chain(settings.tls_cert, settings.tls_key)
        site = site_for(runner, settings.host, settings.port, listen_fd, tls)
        await site.start()
        server: Any = site._server
        sockets = server.sockets if server is not None else []
        port = sockets[0].getsockname()[1] if sockets else settings.port
        if announce:
            print(f"listening on http://{settings.host}:{port}", flush=True)
        # The SDKs' types, once resolved, are most of this process's ~220,000 objects: frozen, a full
        # collection takes ~10 ms, not the ~140 ms (every ~1.4 s at 280 requests/s) that froze every
        # call in flight, 10 % of the time (runner/heap.py)
        while not strict.wait_warm(0):  # not in a thread: asyncio.run's end waited for it (~5 s at a Ctrl-C)
            await asyncio.sleep(0.05)
        heap.settle()
        await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())


def serve_on(listen_fd: int, settings_json: str, apis: Sequence[str] | None) -> None:
    """A simulator forked from the run's forkserver (resources.ForkedServer), on the socket the run bound."""
    serve(SimSettings.model_validate_json(settings_json), listen_fd=listen_fd, apis=apis)
