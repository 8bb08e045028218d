"""The model gateway: one local HTTP endpoint every worker's SDK calls go through.

Speaks Anthropic `POST /v1/messages` (+ `/v1/messages/count_tokens`) and OpenAI
`POST /v1/chat/completions` and `POST /v1/responses`, optionally under `/run/<run>/worker/<n>` so a
call is counted to its run and worker. Each call: the response cache (the canonical request, whether
streamed or not; see replay.py), then the upstream through the shared budget with retries
(upstream.py). Counts per run at `GET /stats`; a worker takes its own since its last record with
`POST /workers/<n>/take`, which is how each result gets its calls, tokens and cost.
API keys come from the caller's headers or the gateway's environment and are never logged or
keyed on.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from loguru import logger

from runner.budget.gates import Gates, Refused
from runner.budget.ratelimit import Budget
from runner.budget.spend import JOB, Spend, Spent
from runner.cache import ResponseCache
from runner.config import api_key
from runner.gateway.batch_api import BATCH_PATHS, Endpoint
from runner.gateway.batcher import CARRIED, INTERACTIVE, Batcher
from runner.gateway.journal import Journal
from runner.gateway.replay import as_stream, final_message
from runner.gateway.request import canonical, upstream_url
from runner.gateway.settings import GatewaySettings
from runner.gateway.spending import Spending
from runner.gateway.upstream import Answer, Call, Upstream
from runner.gateway.usage import from_body
from runner.models.base import TRIAL_HEADER
from runner.models.capabilities import Prices, lookup
from runner.models.usage import Counts, Tokens
from runner.serving import site_for

# Headers that describe the caller or the hop, not the request: never forwarded.
_HOP = {"host", "content-length", "connection", "accept-encoding", "transfer-encoding", "keep-alive"}
_KEYS = {"x-api-key", "authorization", "x-runner-token"}  # a caller's credentials: swapped for the provider's
GATE_POLL_SECONDS = 0.05
NOT_SENT_HEADER = "x-runner-not-sent"  # on a refusal the run's gate gave without sending the call


def presented(headers: Any, token: str) -> bool:
    """The caller shows the token: as its API key (x-api-key, or a bearer token), or as x-runner-token."""
    bearer = (headers.get("authorization") or "").removeprefix("Bearer ").strip()
    return any(hmac.compare_digest(value, token) for value in (headers.get("x-api-key") or "", bearer,
                                                                   headers.get("x-runner-token") or "") if value)
SIM_DEFAULT = "sim-strong"  # who plays a model the simulator does not know
ROUTES = {"/v1/messages": "anthropic", "/v1/messages/count_tokens": "anthropic",
          "/v1/chat/completions": "openai", "/v1/responses": "openai"}
UNCACHED = {"/v1/messages/count_tokens"}


@dataclass
class Incoming:
    """One caller's request, as the gateway reads it."""

    run: str
    worker: str | None
    path: str
    provider: str
    raw: bytes
    body: dict[str, Any] | None
    plays: str = ""  # the model a simulator model stands in for (the caller's x-sim-plays), if it said

    @property
    def model(self) -> str:
        return str(self.body.get("model", "")) if self.body else ""

    @property
    def priced_as(self) -> str:
        """The model whose prices and rules the call is held to: the one played, else the one asked."""
        return self.plays or self.model

    @property
    def streaming(self) -> bool:
        return bool(self.body and self.body.get("stream"))


class Gateway:
    def __init__(self, settings: GatewaySettings, *, limiter: Budget | None = None,
                 cache: ResponseCache | None = None, token: str | None = None, gates: Gates | None = None,
                 spend: Spend | None = None) -> None:
        self.settings, self.limiter, self.cache = settings, limiter, cache
        self.token = token  # what a caller must present (as its API key, or x-runner-token): None admits all
        self.gates = gates
        batched = settings.batch_runs
        self.spending = Spending(spend, self._price, lambda run: bool(batched) and ("*" in batched or run in batched))
        self.runs: dict[str, Counts] = {}
        self.workers: dict[str, Counts] = {}
        self.trials: dict[str, int] = {}  # the trial each worker (slot) runs now, where a job has epochs
        self.upstream: Upstream | None = None
        self.batcher: Batcher | None = None
        self._prices: dict[tuple[str, str], Prices | None] = {}

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[self._admit])
        app.router.add_get("/health", self.health)
        app.router.add_get("/stats", self.get_stats)
        app.router.add_get("/batches", self.get_batches)
        app.router.add_post("/workers/{worker}/take", self.take)
        app.router.add_post("/workers/{worker}/trial/{trial:[0-9]+}", self.set_trial)
        app.router.add_post("/{path:.*}", self.handle)
        app.router.add_get("/{path:.*}", self.models)
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        return app

    @web.middleware
    async def _admit(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Only the run's own callers: a request without the run's token is refused before it is read, spends
        nothing and is counted nowhere (the gateway holds the run's keys and budget; any local process can
        reach its port)."""
        if self.token is None or request.path == "/health" or presented(request.headers, self.token):
            response: web.StreamResponse = await handler(request)
            return response
        path = request.path
        message = "this gateway serves its run only: present the run's token as the API key"
        if path.endswith("/v1/messages") or "/v1/messages/" in path:
            body: dict[str, Any] = {"type": "error", "error": {"type": "authentication_error", "message": message}}
        else:
            body = {"error": {"message": message, "type": "invalid_request_error", "param": None,
                              "code": "invalid_api_key"}}
        return web.json_response(body, status=401)

    async def _open(self, app: web.Application) -> None:
        timeout = aiohttp.ClientTimeout(total=self.settings.timeout_seconds, sock_connect=10)
        # Upstreams compress their answers (aiohttp asks for gzip and deflate): decoded here, since what
        # goes back to the caller, its usage counts and the cache are the plain bytes (no Content-Encoding).
        # As the SDKs reach the providers: proxies from the environment (HTTPS_PROXY, NO_PROXY), and the trust
        # store their HTTP client builds (certifi, or SSL_CERT_FILE).
        import httpx2

        session = aiohttp.ClientSession(timeout=timeout, auto_decompress=True, trust_env=True,
                                        connector=aiohttp.TCPConnector(limit=0, ssl=httpx2.create_ssl_context()))
        self.upstream = Upstream(self.settings.retry, self.limiter, session)
        if (batch := self.settings.batch) is not None:
            journal = Journal(Path(self.settings.journal)) if self.settings.journal else None
            self.batcher = Batcher(session, batch, journal)
            pending = journal.pending() if journal is not None else []
            unknown = journal.unknown() if journal is not None else []
            if pending or unknown:
                logger.info("{} batch(es) left out by an earlier run: collecting them{}", len(pending),
                            f"; {len(unknown)} it was creating when it stopped: looking for them" if unknown else "")
                self.batcher.resume([(batch_endpoint(self.settings, p, {}), bid, keys) for p, bid, keys in pending],
                                    [(batch_endpoint(self.settings, i.provider, {}, i.path), i) for i in unknown])

    async def _close(self, app: web.Application) -> None:
        if self.batcher is not None:
            await self.batcher.close()
        if self.upstream is not None:
            await self.upstream.session.close()

    async def health(self, request: web.Request) -> web.Response:
        """Whether it serves: the one answer without the token, which says nothing else."""
        return web.json_response({"ok": True})

    async def get_stats(self, request: web.Request) -> web.Response:
        return web.json_response({run: t.as_dict() for run, t in self.runs.items()})

    async def get_batches(self, request: web.Request) -> web.Response:
        """Batch mode's counts: batches out and ended, requests held, answered, retried, given up."""
        b = self.batcher
        return web.json_response({**b.stats, **b.now(), "waited_seconds": round(b.waited, 3)} if b is not None
                                 else {})

    async def set_trial(self, request: web.Request) -> web.Response:
        """The trial a worker's next calls belong to (config epochs): their own cache keys, and the
        simulator told which sample to draw."""
        self.trials[request.match_info["worker"]] = int(request.match_info["trial"])
        return web.json_response({})

    async def take(self, request: web.Request) -> web.Response:
        """A worker's counts since it last asked (its last record), and a fresh start."""
        tally = self.workers.pop(request.match_info["worker"], Counts())
        return web.json_response(tally.as_dict())

    async def models(self, request: web.Request) -> web.StreamResponse:
        """The providers' models endpoints, passed through (the run's start asks them, as may a harness): no
        budget, no cache, the caller's key swapped as for any call."""
        run, worker, path = _split(request.match_info["path"])
        if not (path == "/v1/models" or path.startswith("/v1/models/")):
            return web.json_response({"error": {"type": "not_found_error", "message": f"no route {path}"}},
                                     status=404)
        provider = "anthropic" if request.headers.get("anthropic-version") else "openai"
        call = Incoming(run, worker, path, provider, b"", None)
        url = upstream_url(self.settings.upstreams[provider], provider, path) + (
            f"?{request.query_string}" if request.query_string else "")
        assert self.upstream is not None
        async with self.upstream.session.get(url, headers=self._upstream_headers(request, call)) as up:
            body = await up.read()
            return web.Response(status=up.status, body=body, content_type=up.content_type)

    # ------------------------------------------------------------------ one call
    async def handle(self, request: web.Request) -> web.StreamResponse:
        run, worker, path = _split(request.match_info["path"])
        provider = ROUTES.get(path)
        if provider is None:
            return web.json_response({"error": {"type": "not_found_error", "message": f"no route {path}"}},
                                     status=404)
        raw = await request.read()
        body = _json(raw)
        call = Incoming(run, worker, path, provider, raw, body if isinstance(body, dict) else None,
                        request.headers.get("x-sim-plays", ""))
        tallies = [self.runs.setdefault(run, Counts())]
        tallies += [self.workers.setdefault(worker, Counts())] if worker else []
        key = self._cache_key(call)
        if key is not None and (hit := self._from_cache(key, call)) is not None:
            for t in tallies:
                t.llm_calls += 1
                t.cache_hits += 1
            return hit
        t0 = time.monotonic()
        gate = run if self.gates is not None and run in self.gates else None
        try:
            probing = await self._enter_gate(gate) if gate is not None else False
        except Refused as e:  # the run's requests are refused: not sent, counted so, the caller told why
            return self._unsent(tallies, provider, str(e))
        try:
            ticket = self.spending.reserve(run, provider, call.priced_as, call.raw, call.body)
        except Spent as e:  # the job's or the run's cap: not sent, and no call of it goes from now
            if self.gates is not None:
                self.gates.close(str(e), None if e.scope == JOB else e.scope)
                self.gates.no_verdict(gate or "", probing)
            return self._unsent(tallies, provider, str(e))
        with self.spending.held(ticket, provider, call.priced_as) as paid:
            answer = await self._forward(request, call)
            if answer.status == 200:
                paid(answer.usage, answer.batched)
        if gate is not None:
            self._judge(gate, probing, answer, call)
        prices = self._price(provider, call.priced_as)
        for t in tallies:
            t.llm_calls += 1
            t.cache_misses += key is not None
            t.retries += answer.retries
            t.rate_limited += answer.rate_limited
            if answer.status == 200:  # at the batch APIs' price when it came through one: as billed
                t.answered(answer.usage, prices, time.monotonic() - t0, batched=answer.batched)
            else:
                t.errors += 1
        if key is not None and answer.status == 200:
            self._to_cache(key, call, answer)
        return answer.response()

    def _unsent(self, tallies: list[Counts], provider: str, words: str) -> web.Response:
        for t in tallies:
            t.llm_calls += 1
            t.errors += 1
            t.not_sent += 1
        return refused_unsent(provider, words)

    async def _enter_gate(self, key: str) -> bool:
        """The run's first-call gate (runner/budget/gates.py), waited at without holding the event loop."""
        assert self.gates is not None
        while (passed := self.gates.try_enter(key)) is None:
            await asyncio.sleep(GATE_POLL_SECONDS)
        return passed

    def _judge(self, key: str, probing: bool, answer: Answer, call: Incoming) -> None:
        """What a call's answer says of its run: answered, refused as every request of it would be, or no
        verdict (a 5xx, a 429 past the retries, a cut stream)."""
        assert self.gates is not None
        if answer.status == 200:
            self.gates.answered(key)
        elif answer.status in (400, 422):
            words = error_words(answer.body)
            self.gates.refused(key, f"{call.provider} {call.priced_as} answered HTTP {answer.status}: {words}",
                               probing=probing)
        else:
            self.gates.no_verdict(key, probing)

    async def _forward(self, request: web.Request, call: Incoming) -> Answer:
        s = self.settings
        if self.batcher is not None and ("*" in s.batch_runs or call.run in s.batch_runs):
            if call.path in BATCH_PATHS and call.body is not None:
                answer = await self._batched(request, call)
                if answer is not None:
                    return answer
            else:  # what the batch APIs do not take (count_tokens) goes as it came
                self.batcher.stats["interactive_unbatchable"] += 1
        raw = call.raw
        if s.sim_models is not None and call.body is not None and call.model:
            raw = json.dumps({**call.body, "model": sim_model(self.settings, call.model)}).encode()
        assert self.upstream is not None
        return await self.upstream.send(request, Call(
            call.provider, upstream_url(s.upstreams[call.provider], call.provider, call.path), raw,
            self._upstream_headers(request, call), call.streaming,
            self._slot(call.provider, call.priced_as),
            self.limiter.run_index(call.run) if self.limiter is not None else -1))

    async def _batched(self, request: web.Request, call: Incoming) -> Answer | None:
        """Through a batch: held with others, answered when its result arrives; a streaming caller gets its
        stream cut from the final message. None: past its batches' retries, it goes interactive."""
        assert self.batcher is not None and call.body is not None
        body = dict(call.body)
        if self.settings.sim_models is not None and call.model:
            body["model"] = sim_model(self.settings, call.model)
        ep = batch_endpoint(self.settings, call.provider, self._upstream_headers(request, call), call.path)
        told = self.trials.get(call.worker or "", 1)
        def gone() -> bool:  # the caller hung up (an SDK that timed out waiting, and may ask again)
            return request.transport is None or request.transport.is_closing()

        status, answer = await self.batcher.send(ep, call.model, body, salt=f"trial {told}" if told > 1 else "",
                                                 gone=gone)
        if (status, answer) == INTERACTIVE:
            return None
        usage = from_body(answer, call.provider) if status == 200 else Tokens()
        if status == 200 and call.streaming and (stream := as_stream(call.path, answer, call.body)) is not None:
            return Answer(200, stream, "text/event-stream", usage=usage, batched=True)
        return Answer(status, json.dumps(answer).encode(), "application/json", usage=usage, batched=True)

    def _upstream_headers(self, request: web.Request, call: Incoming) -> dict[str, str]:
        """The caller's headers with its key swapped for the provider's (the run's token never leaves)."""
        provider, model = call.provider, call.priced_as
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP and k.lower() not in _KEYS}
        if self.token is None and any(k.lower() in ("x-api-key", "authorization") for k in request.headers):
            headers.update({k: v for k, v in request.headers.items() if k.lower() in ("x-api-key", "authorization")})
        elif key := api_key(provider) or ("sim-key" if self.settings.sim_models is not None else None):
            headers.update({"x-api-key": key} if provider == "anthropic" else {"authorization": f"Bearer {key}"})
        if self.settings.sim_models is not None and model:
            headers["x-sim-plays"] = model
            if (told := self.trials.get(call.worker or "", 1)) > 1:
                headers[TRIAL_HEADER] = str(told)
        return headers

    def _slot(self, provider: str, model: str) -> int | None:
        keys = self.settings.limit_keys
        key = keys.get(f"{provider}/{model}") or keys.get(provider)
        if self.limiter is None or key is None or key not in self.limiter.keys:
            return None
        return self.limiter.slot(key)

    def _price(self, provider: str, model: str) -> Prices | None:
        if (provider, model) not in self._prices:
            self._prices[provider, model] = lookup(model, provider, self.settings.model_overrides).prices
        return self._prices[provider, model]

    # ------------------------------------------------------------------ the cache
    def _cache_key(self, call: Incoming) -> str | None:
        """The canonical request: same JSON whatever the key order, spacing or `stream`; no headers."""
        if self.cache is None or call.path in UNCACHED:
            return None
        canon = call.raw if call.body is None else canonical(call.body)
        # trial 1 keys as a single-trial run's calls; each later trial apart (as models/base.py Request)
        told = self.trials.get(call.worker or "", 1)
        trial = f"\0trial {told}".encode() if told > 1 else b""
        return hashlib.sha256(call.provider.encode() + call.path.encode() + b"\0" + canon + trial).hexdigest()

    def _from_cache(self, key: str, call: Incoming) -> web.Response | None:
        """The cached answer in the form this caller asked for; None (a miss) if it cannot be given so."""
        assert self.cache is not None
        entry = self.cache.get(key)
        if entry is None or "body" not in entry:
            return None
        if entry["content_type"] == "text/event-stream":
            # Kept as raw events: replayable to a streaming caller only.
            return _sse(entry["body"].encode()) if call.streaming else None
        message = json.loads(entry["body"])
        if not call.streaming:
            if call.path == "/v1/chat/completions" and not message.get("usage"):
                return None  # cut from a stream without usage: a plain caller expects it
            return web.json_response(message)
        stream = as_stream(call.path, message, call.body or {})
        return _sse(stream) if stream is not None else None

    def _to_cache(self, key: str, call: Incoming, answer: Answer) -> None:
        assert self.cache is not None
        entry = {"body": answer.body.decode(errors="replace"), "content_type": "application/json"}
        if call.streaming:
            message = final_message(call.path, answer.body)
            if message is not None and as_stream(call.path, message, call.body or {}) is not None:
                entry["body"] = json.dumps(message)
            else:
                entry["content_type"] = "text/event-stream"
        self.cache.put(key, call.provider, call.model, entry)


def sim_model(settings: GatewaySettings, model: str) -> str:
    """Who plays a model on the simulator: the mapping's, a simulator model asked for by its name (the
    built-in agents do), else the default."""
    assert settings.sim_models is not None
    return settings.sim_models.get(model, model if model.startswith("sim-") else SIM_DEFAULT)


def batch_endpoint(settings: GatewaySettings, provider: str, headers: dict[str, str], path: str = "") -> Endpoint:
    """Where a batch of this provider goes, with what of a caller's headers it carries; a batch left by an
    earlier gateway is polled with the environment's key (keys are never journaled), or on the simulator
    with a stand-in."""
    carried = {k: v for k, v in headers.items() if k.lower() in CARRIED}
    key = api_key(provider) or ("sim-key" if settings.sim_models is not None else None)
    if not any(k.lower() in ("x-api-key", "authorization") for k in carried) and key:
        carried.update({"x-api-key": key} if provider == "anthropic" else {"authorization": f"Bearer {key}"})
    if provider == "anthropic":
        carried.setdefault("anthropic-version", "2023-06-01")
    return Endpoint(provider, settings.upstreams[provider], carried, path)


def error_words(body: bytes) -> str:
    """A refusal's own words (its error body's message, no request id), else its first bytes."""
    parsed = _json(body)
    inner = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(inner, dict) and inner.get("message"):
        return str(inner["message"])[:500]
    return body[:300].decode(errors="replace")


def refused_unsent(provider: str, words: str) -> web.Response:
    """The answer to a call its run's gate refused: the provider's own refusal, marked not sent."""
    message = f"not sent: {words}" if words.startswith("stopped at budget") else \
        f"not sent: this run's requests are refused ({words})"
    body: dict[str, Any] = {"type": "error", "error": {"type": "invalid_request_error", "message": message}} \
        if provider == "anthropic" else {"error": {"message": message, "type": "invalid_request_error",
                                                   "param": None, "code": "run_refused"}}
    return web.json_response(body, status=400, headers={NOT_SENT_HEADER: "1"})


def _sse(body: bytes) -> web.Response:
    return web.Response(body=body, headers={"content-type": "text/event-stream", "cache-control": "no-cache"})


def _split(path: str) -> tuple[str, str | None, str]:
    """`run/<run>/worker/<n>/v1/...` -> (run, n, /v1/...); a bare `/v1/...` counts to run "-"."""
    parts = path.strip("/").split("/")
    if len(parts) > 4 and parts[0] == "run" and parts[2] == "worker":
        return parts[1], parts[3], "/" + "/".join(parts[4:])
    return "-", None, "/" + "/".join(parts)


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def serve(gateway: Gateway, host: str = "127.0.0.1", port: int = 0, *, listen_fd: int | None = None,
          token_line: str | None = None) -> None:
    """Run until killed; prints 'listening on http://HOST:PORT' once it serves (`listen_fd`: on that
    inherited listening socket instead of binding one), then `token_line` if given."""
    async def main() -> None:
        runner = web.AppRunner(gateway.app(), access_log=None)
        await runner.setup()
        site = site_for(runner, host, port, listen_fd)
        await site.start()
        bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        print(f"listening on http://{host}:{bound}", flush=True)
        if token_line:
            print(token_line, flush=True)
        logger.info("gateway listening on {}:{}", host, bound)
        await asyncio.Event().wait()

    asyncio.run(main())
