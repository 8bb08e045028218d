"""The model gateway: one local HTTP endpoint every worker's SDK calls go through.

Speaks Anthropic `POST /v1/messages` (+ `/v1/messages/count_tokens`) and OpenAI
`POST /v1/chat/completions` and `POST /v1/responses`, and the clouds' paths to the same APIs (Bedrock's
InvokeModel, Vertex AI's rawPredict, Azure OpenAI's deployments: routes.py), optionally under
`/run/<run>/worker/<n>` so a call is counted to its run and worker. Each call: the response cache (the
canonical request, whether streamed or not; see replay.py), then out (outbound.py): a batch, or the
upstream through the shared budget with retries (upstream.py). Counts per run at `GET /stats`; a worker
takes its own since its last record with `POST /workers/<n>/take`, which is how each result gets its calls,
tokens and cost.
API keys come from the caller's headers or the gateway's environment and are never logged or
keyed on; a cloud is called with the gateway's own credentials (cloud_auth.py: Bedrock calls signed anew).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from typing import Any

import aiohttp
from aiohttp import web
from loguru import logger

from runner.budget.gates import Gates, Refused
from runner.budget.ratelimit import Budget
from runner.budget.spend import JOB, Spend, Spent
from runner.cache import ResponseCache
from runner.config import API_OF
from runner.gateway.answers import Answers
from runner.gateway.incoming import Incoming
from runner.gateway.outbound import Outbound
from runner.gateway.request import upstream_url
from runner.gateway.routes import Route, route_of
from runner.gateway.settings import GatewaySettings
from runner.gateway.spending import Spending
from runner.gateway.upstream import UpstreamAnswer
from runner.models.capabilities import Prices, lookup
from runner.models.usage import Counts
from runner.serving import site_for

GATE_POLL_SECONDS = 0.05
NOT_SENT_HEADER = "x-runner-not-sent"  # on a refusal the run's gate gave without sending the call


def presented(headers: Any, token: str) -> bool:
    """The caller shows the token: as its API key (x-api-key, or a bearer token), or as x-runner-token."""
    bearer = (headers.get("authorization") or "").removeprefix("Bearer ").strip()
    return any(
        hmac.compare_digest(value, token)
        for value in (
            headers.get("x-api-key") or "",
            bearer,
            headers.get("api-key") or "",
            headers.get("x-runner-token") or "",
        )
        if value
    )


class Gateway:
    """One run's gateway: admits its callers, answers from the response cache, passes each call its run's
    gate and spending cap, sends it (outbound.py) and counts it to its run and worker."""

    def __init__(
        self,
        settings: GatewaySettings,
        *,
        limiter: Budget | None = None,
        cache: ResponseCache | None = None,
        token: str | None = None,
        gates: Gates | None = None,
        spend: Spend | None = None,
    ) -> None:
        self.settings, self.limiter, self.cache = settings, limiter, cache
        self.answers = Answers(cache)
        self.token = token  # what a caller must present (as its API key, or x-runner-token): None admits all
        self.gates = gates
        batched = settings.batch_runs
        self.spending = Spending(
            spend, self._price, lambda run: bool(batched) and ("*" in batched or run in batched)
        )
        self.runs: dict[str, Counts] = {}
        self.workers: dict[str, Counts] = {}
        self.trials: dict[str, int] = {}  # the trial each worker (slot) runs now, where a job has epochs
        # each worker's (slot's) calls being answered, by id (a request is not hashable)
        self.in_flight: dict[str, dict[int, web.Request]] = {}
        self.outbound = Outbound(settings, limiter, token, self.trials)
        self._prices: dict[tuple[str, str], Prices | None] = {}

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[self._admit])
        app.router.add_get("/health", self.health)
        app.router.add_get("/stats", self.get_stats)
        app.router.add_get("/batches", self.get_batches)
        app.router.add_post("/workers/{worker}/take", self.take)
        app.router.add_post("/workers/{worker}/trial/{trial:[0-9]+}", self.set_trial)
        app.router.add_post("/workers/{worker}/abort", self.abort)
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
        route = route_of(_split(path)[2])  # a cloud of Anthropic's API is answered in its shape
        if (
            path.endswith("/v1/messages")
            or "/v1/messages/" in path
            or (route is not None and API_OF[route.provider] == "anthropic")
        ):
            body: dict[str, Any] = {
                "type": "error",
                "error": {"type": "authentication_error", "message": message},
            }
        else:
            body = {
                "error": {
                    "message": message,
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_api_key",
                }
            }
        return web.json_response(body, status=401)

    async def _open(self, app: web.Application) -> None:
        timeout = aiohttp.ClientTimeout(total=self.settings.timeout_seconds, sock_connect=10)
        # Upstreams compress their answers (aiohttp asks for gzip and deflate): decoded here, since what
        # goes back to the caller, its usage counts and the cache are the plain bytes (no Content-Encoding).
        # As the SDKs reach the providers: proxies from the environment (HTTPS_PROXY, NO_PROXY), and the trust
        # store their HTTP client builds (certifi, or SSL_CERT_FILE).
        import httpx2

        session = aiohttp.ClientSession(
            timeout=timeout,
            auto_decompress=True,
            trust_env=True,
            connector=aiohttp.TCPConnector(limit=0, ssl=httpx2.create_ssl_context()),
        )
        self.outbound.open(session)

    async def _close(self, app: web.Application) -> None:
        await self.outbound.close()

    async def health(self, request: web.Request) -> web.Response:
        """Whether it serves: the one answer without the token, which says nothing else."""
        return web.json_response({"ok": True})

    async def get_stats(self, request: web.Request) -> web.Response:
        return web.json_response({run: t.as_dict() for run, t in self.runs.items()})

    async def get_batches(self, request: web.Request) -> web.Response:
        """Batch mode's counts: batches out and ended, requests held, answered, retried, given up."""
        b = self.outbound.batcher
        return web.json_response(
            {**b.stats, **b.now(), "waited_seconds": round(b.waited, 3)} if b is not None else {}
        )

    async def set_trial(self, request: web.Request) -> web.Response:
        """The trial a worker's next calls belong to (config epochs): their own cache keys, and the
        simulator told which sample to draw."""
        self.trials[request.match_info["worker"]] = int(request.match_info["trial"])
        return web.json_response({})

    async def abort(self, request: web.Request) -> web.Response:
        """A worker's (slot's) record was cut at its time limit: the connections of its calls in flight are
        closed, so a thread of its blocked reading an answer gets an error at once and takes its cut (an
        exception raised into a thread lands only once its socket read returns; before, the slot stayed
        blocked until the model answered, and its worker retired). The calls themselves are answered and
        counted as ever: their cost was incurred."""
        calls = list(self.in_flight.get(request.match_info["worker"], {}).values())
        for call in calls:
            if call.transport is not None:
                call.transport.close()
        return web.json_response({"aborted": len(calls)})

    async def take(self, request: web.Request) -> web.Response:
        """A worker's counts since it last asked (its last record), and a fresh start."""
        tally = self.workers.pop(request.match_info["worker"], Counts())
        return web.json_response(tally.as_dict())

    async def models(self, request: web.Request) -> web.StreamResponse:
        """The providers' models endpoints, passed through (the run's start asks them, as may a harness): no
        budget, no cache, the caller's key swapped as for any call."""
        run, worker, path = _split(request.match_info["path"])
        if not (path == "/v1/models" or path.startswith("/v1/models/")):
            return web.json_response(
                {"error": {"type": "not_found_error", "message": f"no route {path}"}}, status=404
            )
        provider = "anthropic" if request.headers.get("anthropic-version") else "openai"
        call = Incoming(run, worker, Route(provider, path, path, path), b"", None)
        url = upstream_url(self.settings.upstreams[provider], provider, path) + (
            f"?{request.query_string}" if request.query_string else ""
        )
        async with self.outbound.session().get(url, headers=await self.outbound.headers(request, call)) as up:
            body = await up.read()
            return web.Response(status=up.status, body=body, content_type=up.content_type)

    # ------------------------------------------------------------------ one call
    async def handle(self, request: web.Request) -> web.StreamResponse:
        run, worker, path = _split(request.match_info["path"])
        route = route_of(path)
        if route is None:
            return web.json_response(
                {"error": {"type": "not_found_error", "message": f"no route {path}"}}, status=404
            )
        provider, raw = route.provider, await request.read()
        body, plays = _json(raw), request.headers.get("x-sim-plays", "")
        call = Incoming(
            run,
            worker,
            route,
            raw,
            body if isinstance(body, dict) else None,
            plays,
            request.query_string,
            self.settings.deployments,
        )
        flying = self.in_flight.setdefault(worker or "", {})
        flying[id(request)] = request
        try:
            return await self._answer(request, call, run, worker, provider)
        finally:
            flying.pop(id(request), None)

    async def _answer(
        self, request: web.Request, call: Incoming, run: str, worker: str | None, provider: str
    ) -> web.StreamResponse:
        tallies = [self.runs.setdefault(run, Counts())]
        tallies += [self.workers.setdefault(worker, Counts())] if worker else []
        key = self.answers.key(call, self.trials.get(worker or "", 1))
        if key is not None and (hit := self.answers.get(key, call)) is not None:
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
            answer = await self.outbound.forward(request, call)
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
            self.answers.put(key, call, answer)
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

    def _judge(self, key: str, probing: bool, answer: UpstreamAnswer, call: Incoming) -> None:
        """What a call's answer says of its run: answered, refused as every request of it would be, or no
        verdict (a 5xx, a 429 past the retries, a cut stream)."""
        assert self.gates is not None
        if answer.status == 200:
            self.gates.answered(key)
        elif answer.status in (400, 422):
            words = error_words(answer.body)
            self.gates.refused(
                key,
                f"{call.provider} {call.priced_as} answered HTTP {answer.status}: {words}",
                probing=probing,
            )
        else:
            self.gates.no_verdict(key, probing)

    def _price(self, provider: str, model: str) -> Prices | None:
        if (provider, model) not in self._prices:
            self._prices[provider, model] = lookup(model, provider, self.settings.model_overrides).prices
        return self._prices[provider, model]


def error_words(body: bytes) -> str:
    """A refusal's own words (its error body's message, no request id), else its first bytes."""
    parsed = _json(body)
    inner = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(inner, dict) and inner.get("message"):
        return str(inner["message"])[:500]
    return body[:300].decode(errors="replace")


def refused_unsent(provider: str, words: str) -> web.Response:
    """The answer to a call its run's gate refused: the provider's own refusal, marked not sent."""
    message = (
        f"not sent: {words}"
        if words.startswith("stopped at budget")
        else f"not sent: this run's requests are refused ({words})"
    )
    body: dict[str, Any] = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    if API_OF[provider] == "openai":
        body = {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": None,
                "code": "run_refused",
            }
        }
    return web.json_response(body, status=400, headers={NOT_SENT_HEADER: "1"})


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


def serve(
    gateway: Gateway,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    listen_fd: int | None = None,
    token_line: str | None = None,
) -> None:
    """Run until killed; prints 'listening on http://HOST:PORT' once it serves (`listen_fd`: on that
    inherited listening socket instead of binding one), then `token_line` if given."""

    async def main() -> None:
        # aiohttp's own SIGINT and SIGTERM handlers (GracefulExit): asyncio.run sets one for SIGINT only
        # where it finds Python's default, and `runner gateway &` in a script starts with SIGINT ignored
        runner = web.AppRunner(gateway.app(), access_log=None, handle_signals=True)
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
