"""Batch mode: calls held for a short window, sent upstream as one batch per provider and model, each
caller answered when its own result arrives.

An agent's conversation is a loop, so one batch holds one step of many conversations: every caller waits
on its own HTTP request while the batch is out (a worker's slot, nothing more). A batch is sent when
`max_requests` calls are held or `window_seconds` after the first, polled with backoff from
`poll_min_seconds` to `poll_max_seconds`, and its results matched to callers by custom_id. A request that
came back worth another try (a provider error, expired, cancelled) goes into the next batch, up to
`retries` times; then the caller gets an error as an interactive call would.

Resume without paying twice: which request (its canonical key) each custom_id stands for is journaled
before the batch is submitted, its id once it is (journal.py). A gateway started on the same output
watches the batches its predecessor left pending, and a caller asking the same request again is answered
from them instead of a new batch. A batch its predecessor was creating when it was killed (journaled as
intended, never as submitted) may exist all the same: the provider's list of batches is searched for it
(OpenAI's carry the intent in their metadata; an Anthropic batch made since is watched to its end and
claimed if its results hold the intent's custom ids) before its requests go out again.

What it does, said: a batch API that answers 429 or is overloaded is asked again after its `retry-after`
(the try is not spent); every call that leaves batch mode for an interactive call is counted under its
reason (`interactive: <why>`, in /batches, the manifest and the report) and the reason logged once; an
OpenAI batch refused for the model's enqueued-token limit teaches the queue that limit and waits for
the batches ahead to end; a results file that stays unreachable ends the batch's watch (its requests go
again). Claude requests in a batch use the one-hour prompt cache, as Anthropic's batch docs advise (a batch
takes longer than the five-minute cache lives), and are priced so.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from loguru import logger

from runner.config import BatchSettings
from runner.gateway.batch_api import BatchEndpoint, BatchFailed
from runner.gateway.courier import Courier, Unmade
from runner.gateway.inherited import Inherited
from runner.gateway.journal import Intent, Journal
from runner.gateway.request import canonical, unstreamed
from runner.gateway.succession import Succession
from runner.results.manifest import INTERACTIVE_PREFIX

# The answer meaning "not through a batch: send it interactively" (batch.then: interactive).
INTERACTIVE: tuple[int, dict[str, Any]] = (0, {})

# A batch's size on the wire at most: OpenAI takes an input file of 200 MB, Anthropic a batch of 256 MB.
MAX_BATCH_BYTES = 150 * 2**20

# What of a caller's headers a batch carries upstream: its key and API version, the simulator's markers.
CARRIED = (
    "x-api-key",
    "authorization",
    "api-key",
    "anthropic-version",
    "anthropic-beta",
    "openai-organization",
    "openai-project",
    "x-sim-plays",
    "x-sim-trial",
)


def request_key(provider: str, body: dict[str, Any], salt: str = "") -> str:
    """A request's identity across runs of the gateway: its canonical JSON, `stream` aside; `salt` sets
    apart what must not share an answer (another trial of the same record)."""
    return hashlib.sha256(provider.encode() + b"\0" + canonical(body) + b"\0" + salt.encode()).hexdigest()


def hour_cache(body: dict[str, Any]) -> dict[str, Any]:
    """A Claude request's prompt-cache breakpoints with the one-hour lifetime ("Since batches can take longer
    than 5 minutes to process, consider using the 1-hour cache duration", Anthropic's batch processing page,
    read 2026-11-26); a breakpoint that names its lifetime keeps it."""

    def marked(value: Any) -> Any:
        if isinstance(value, dict):
            out = {k: marked(v) for k, v in value.items()}
            cc = out.get("cache_control")
            if isinstance(cc, dict) and cc.get("type") == "ephemeral" and "ttl" not in cc:
                out["cache_control"] = {**cc, "ttl": "1h"}
            return out
        if isinstance(value, list):
            return [marked(v) for v in value]
        return value

    return {k: marked(v) if k in ("system", "messages", "tools") else v for k, v in body.items()}


def tokens_of(held: Waiting) -> int:
    """A held request's input tokens, estimated as the gateway's budget does before a call: a quarter of
    its bytes (the provider counts its own; this only has to keep the queue under its limit)."""
    return held.size // 4


@dataclass
class Waiting:
    key: str
    body: dict[str, Any]
    size: int  # its JSON's bytes
    done: asyncio.Future[tuple[int, dict[str, Any]]]
    since: float = field(default_factory=time.monotonic)
    tries: int = 0
    waiting: list[Callable[[], bool]] = field(default_factory=list)  # its callers: has each hung up?

    def abandoned(self) -> bool:
        """Whether every caller waiting on it has hung up (one asking the same now is one of them again)."""
        return all(gone() for gone in self.waiting)


async def wait_on(held: Waiting, gone: Callable[[], bool]) -> tuple[int, dict[str, Any]]:
    """A caller's wait for a held request's answer (`gone`: whether it has hung up meanwhile)."""
    held.waiting.append(gone)
    try:  # a caller that hangs up leaves it for one that asks again
        return await asyncio.shield(held.done)
    finally:
        held.waiting.remove(gone)


@dataclass
class Group:
    endpoint: BatchEndpoint
    model: str
    held: list[Waiting] = field(default_factory=list)
    size: int = 0  # the held requests' bytes
    timer: asyncio.TimerHandle | None = None
    counted: int = 0  # held when a flush last found too few for a batch (Bedrock's minimum)


class ProviderQueue:
    """What the providers' batch queues hold of ours, against their limits: requests per provider
    (Anthropic's queue limit, `max_queued`) and input tokens per model (OpenAI's enqueued-token limit,
    `max_queued_tokens`)."""

    def __init__(self, settings: BatchSettings) -> None:
        self.settings = settings
        self.requests: Counter[str] = Counter()
        self.tokens: Counter[tuple[str, str]] = Counter()  # by (provider, model)
        self.learned: dict[tuple[str, str], int] = {}  # enqueued-token limits a provider's refusal taught

    def room(self, group: Group) -> int:
        """How many of the group's first held requests the next batch takes: within the batch's own bounds
        and the queue limits. A request alone larger than the tokens limit goes once nothing else of its
        model is queued (the provider judges)."""
        provider, s = group.endpoint.provider, self.settings
        limit = s.max_queued.get(provider)
        room = s.max_requests if limit is None else min(s.max_requests, limit - self.requests[provider])
        tokens_limit = s.max_queued_tokens.get(f"{provider}/{group.model}", s.max_queued_tokens.get(provider))
        if (taught := self.learned.get((provider, group.model))) is not None:
            tokens_limit = taught if tokens_limit is None else min(tokens_limit, taught)
        queued_tokens = self.tokens[(provider, group.model)]
        take, size, tokens = 0, 0, 0
        while take < min(room, len(group.held)):
            h = group.held[take]
            if take and size + h.size > MAX_BATCH_BYTES:
                break
            if (
                tokens_limit is not None
                and queued_tokens + tokens + tokens_of(h) > tokens_limit
                and (take or queued_tokens)
            ):
                break
            size, tokens, take = size + h.size, tokens + tokens_of(h), take + 1
        return take

    def learn(self, provider: str, model: str, batch: list[Waiting]) -> bool:
        """The provider refused a batch for its model's enqueued-token limit: the limit is at most what else
        of ours is queued. False when nothing else is (then waiting for the queue to drain cannot help)."""
        others = self.tokens[(provider, model)] - sum(map(tokens_of, batch))
        if others <= 0:
            return False
        self.learned[(provider, model)] = min(self.learned.get((provider, model), others), others)
        return True

    def count(self, group: Group, batch: list[Waiting], sign: int) -> None:
        """A batch into (+1) or out of (-1) the queues."""
        self.requests[group.endpoint.provider] += sign * len(batch)
        self.tokens[(group.endpoint.provider, group.model)] += sign * sum(map(tokens_of, batch))


class Batcher:
    """Batch mode's calls: held by (provider, base, model, path, headers), flushed as batches within the
    providers' queue limits, each caller answered from its batch's results or sent on (interactive)."""

    def __init__(
        self, session: aiohttp.ClientSession, settings: BatchSettings, journal: Journal | None = None
    ) -> None:
        self.session, self.settings, self.journal = session, settings, journal
        self.groups: dict[tuple[str, ...], Group] = {}
        self.inherited = Inherited()  # what a gateway before this one left out
        self.holding: dict[str, Waiting] = {}  # by request key: held or out in a batch of ours
        self.ids = itertools.count(1)
        self.stats: Counter[str] = Counter()
        self.waited = 0.0  # seconds callers spent waiting on batches, summed
        self.out = 0  # requests in batches submitted and not yet collected
        self.queue = ProviderQueue(settings)  # the same, against the providers' batch queue limits
        self.tasks: set[asyncio.Task[None]] = set()
        self.said: set[str] = set()  # reasons for leaving batch mode already logged
        self.courier = Courier(session, settings, journal, self.stats)  # each batch's life at its provider

    async def send(
        self,
        endpoint: BatchEndpoint,
        model: str,
        body: dict[str, Any],
        salt: str = "",
        gone: Callable[[], bool] = lambda: False,
    ) -> tuple[int, dict[str, Any]]:
        """The caller's answer (status, body), once its batch has it; `gone` says whether this caller has
        hung up. The same request asked again once its caller hung up (an SDK that timed out waiting and
        tried again) joins the one held, and is one request in one batch; the same request from another
        caller still waiting (two conversations that ask alike) is a request of its own, as it would be
        interactively: each pays, each gets its own answer."""
        key = self._key(endpoint.provider, body, salt)
        if (same := self.holding.get(key)) is not None:
            self.stats["requests_joined"] += 1
            return await wait_on(same, gone)
        if (found := await self.inherited.answer(key)) is not None:  # paid for already: not again
            self.stats["answered_from_resumed"] += 1
            return found
        loop = asyncio.get_running_loop()
        body = unstreamed(body)  # a batch answers whole: the gateway streams it to a caller that asked so
        if endpoint.provider == "anthropic":
            body = hour_cache(body)
        held = Waiting(key, body, len(json.dumps(body)), loop.create_future())
        self.holding[key] = held
        held.done.add_done_callback(lambda _: self._done(held))
        self._hold(endpoint, model, held)
        status, answer = await wait_on(held, gone)
        self.waited += time.monotonic() - held.since
        return status, answer

    def _key(self, provider: str, body: dict[str, Any], salt: str) -> str:
        """The request's key: the n-th caller asking the same while the ones before still wait gets
        occurrence n (the first keeps the plain key, as journals of earlier versions hold it). A
        predecessor's answer or batch for an occurrence nobody has taken comes first; then the first
        occurrence not in use (one whose callers all hung up is free: a retry joins it)."""
        free = None
        for n in itertools.count():
            key = request_key(provider, body, salt if n == 0 else f"{salt}\0#{n}")
            if self.inherited.claimable(key):
                return key
            same, inherited = self.holding.get(key), self.inherited.taken(key)
            if free is None and not inherited and (same is None or same.abandoned()):
                free = key
            # past every occurrence in use
            if same is None and not inherited and not self.inherited.holds(key):
                assert free is not None
                return free
        raise AssertionError("unreachable")

    def _done(self, held: Waiting) -> None:
        """Its answer is in: an answer whose every caller hung up (an SDK that timed out waiting) is kept for
        the one that asks again, paid once."""
        self.holding.pop(held.key, None)
        if not held.done.cancelled() and held.done.exception() is None and held.abandoned():
            self.inherited.ready[held.key] = held.done.result()
            self.stats["answers_kept_for_a_retry"] += 1

    def _hold(self, endpoint: BatchEndpoint, model: str, held: Waiting) -> None:
        gkey = (
            endpoint.provider,
            endpoint.base,
            model,
            endpoint.path,
            *(f"{k}:{v}" for k, v in sorted(endpoint.headers.items())),
        )
        group = self.groups.setdefault(gkey, Group(endpoint, model))
        group.held.append(held)
        group.size += held.size
        self.stats["requests_held"] += 1
        if len(group.held) >= self.settings.max_requests or group.size >= MAX_BATCH_BYTES:
            self._flush(gkey)
        elif group.timer is None:
            group.timer = asyncio.get_running_loop().call_later(
                self.settings.window_seconds, self._flush, gkey
            )

    def _flush(self, gkey: tuple[str, ...]) -> None:
        group = self.groups.get(gkey)
        if group is None or not group.held:
            return
        if group.timer is not None:
            group.timer.cancel()
            group.timer = None
        if len(group.held) < (least := group.endpoint.min_requests):  # Bedrock's jobs: at least 100 records
            if len(group.held) > group.counted:  # still growing: another window
                group.counted = len(group.held)
                group.timer = asyncio.get_running_loop().call_later(
                    self.settings.window_seconds, self._flush, gkey
                )
                return
            held, group.held, group.size, group.counted = group.held, [], 0, 0
            for h in held:  # a window with no new call: they will not make a batch
                self._leave(
                    group.endpoint,
                    h,
                    f"fewer than the {least} requests a {group.endpoint.provider} batch takes were held",
                )
            return
        group.counted = 0
        take = self.queue.room(group)
        if take == 0:  # the provider's queue is full: try again once a batch may have ended
            self.stats["flushes_waiting_for_queue"] += 1
            group.timer = asyncio.get_running_loop().call_later(
                self.settings.poll_min_seconds, self._flush, gkey
            )
            return
        batch, group.held = group.held[:take], group.held[take:]
        group.size -= sum(h.size for h in batch)
        self.queue.count(group, batch, +1)
        if group.held:
            group.timer = asyncio.get_running_loop().call_later(0, self._flush, gkey)
        self._spawn(self._out(group, gkey, batch))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _out(self, group: Group, gkey: tuple[str, ...], batch: list[Waiting]) -> None:
        """Submit one batch, watch it, answer or requeue each of its requests."""
        try:
            await self._submit_and_answer(group.endpoint, gkey, batch)
        finally:
            self.queue.count(group, batch, -1)

    async def _submit_and_answer(
        self, ep: BatchEndpoint, gkey: tuple[str, ...], batch: list[Waiting]
    ) -> None:
        # alphanumeric: each API's custom ids take it (Bedrock's record ids take nothing else)
        by_id = {f"r{next(self.ids)}k{h.key[:16]}": h for h in batch}
        keys = {cid: h.key for cid, h in by_id.items()}
        intent = Intent(uuid.uuid4().hex, ep.provider, ep.path, time.time(), keys)
        if self.journal is not None:
            self.journal.intend(intent)
        try:
            batch_id = await self.courier.create(ep, intent, [(cid, h.body) for cid, h in by_id.items()])
        except Unmade as e:
            if self.journal is not None:
                self.journal.settled(intent.id)
            self._again(ep, gkey, list(by_id.values()), why=str(e))
            return
        if self.journal is not None:
            self.journal.submitted(intent.id, ep.provider, batch_id, keys)
        self.stats["batches_submitted"] += 1
        logger.info("batch {} out: {} request(s) to {}", batch_id, len(batch), ep.provider)
        self.out += len(batch)
        try:
            outcomes = await self.courier.watch(ep, batch_id)
        except BatchFailed as e:
            self._failed_whole(ep, gkey, batch_id, list(by_id.values()), str(e))
            return
        finally:
            self.out -= len(batch)
        retry = []
        for cid, h in by_id.items():
            outcome = outcomes.get(cid)
            if outcome is None:
                retry.append(h)
            elif not h.done.done():
                h.done.set_result(outcome)
                self.stats["requests_answered"] += 1
        self._again(ep, gkey, retry, why="errored, expired or cancelled in a batch")

    def _failed_whole(
        self, ep: BatchEndpoint, gkey: tuple[str, ...], batch_id: str, held: list[Waiting], words: str
    ) -> None:
        """A batch that failed as a whole: over the model's enqueued-token limit, its requests wait for the
        batches ahead of them (the limit learned, the tries not spent); else they go again, the reason
        kept."""
        model = gkey[2]
        if "enqueued token limit" in words.lower() and self.queue.learn(ep.provider, model, held):
            self.stats["batches_over_token_limit"] += 1
            logger.info(
                "batch {} refused for {}'s enqueued-token limit ({}): its {} request(s) wait for the "
                "batches ahead",
                batch_id,
                model,
                words[:160],
                len(held),
            )
            self._requeue(ep, gkey, held)
            return
        self._again(ep, gkey, held, why=f"a batch failed whole ({words[:160]})")

    def _again(self, ep: BatchEndpoint, gkey: tuple[str, ...], held: list[Waiting], *, why: str) -> None:
        """Requests worth another try: into the next batch, or past `retries` out of batch mode (interactive,
        counted under `why` and said once, or the caller's error)."""
        again = []
        for h in held:
            h.tries += 1
            if h.tries <= self.settings.retries:
                again.append(h)
                continue
            self._leave(ep, h, why)
        self.stats["requests_retried"] += len(again)
        self._requeue(ep, gkey, again)

    def _leave(self, ep: BatchEndpoint, h: Waiting, why: str) -> None:
        """A request out of batch mode: interactive (counted under `why` and said once), or the caller's error
        (batch.then: error)."""
        interactive = self.settings.then == "interactive"
        self.stats["requests_sent_interactive" if interactive else "requests_given_up"] += 1
        if interactive:
            self.stats[f"{INTERACTIVE_PREFIX}{why}"] += 1
            if why not in self.said:
                self.said.add(why)
                logger.warning(
                    "calls leave batch mode for interactive ones (full price, the per-minute budget): {}", why
                )
        if not h.done.done():
            h.done.set_result(
                INTERACTIVE
                if interactive
                else (500, _error(ep.provider, f"gave up after {h.tries} batch(es): {why}"))
            )

    def _requeue(self, ep: BatchEndpoint, gkey: tuple[str, ...], held: list[Waiting]) -> None:
        if not held:
            return
        group = self.groups.setdefault(gkey, Group(ep, gkey[2]))  # (provider, base, model, path, ...)
        group.held.extend(held)
        group.size += sum(h.size for h in held)
        if group.timer is None:
            group.timer = asyncio.get_running_loop().call_later(
                self.settings.window_seconds, self._flush, gkey
            )

    # ------------------------------------------------------------------ a predecessor's batches
    def resume(
        self,
        pending: list[tuple[BatchEndpoint, str, dict[str, str]]],
        unknown: list[tuple[BatchEndpoint, Intent]] | None = None,
    ) -> None:
        """Watch the batches a gateway before this one left out (succession.py): their answers go to whoever
        asks again. Look for the ones it was creating when it died (`unknown`): their requests wait for the
        search."""
        heir = Succession(self.courier, self.journal, self.inherited, self.stats)
        for ep, batch_id, keys in pending:
            self.inherited.out |= set(keys.values())
            self.stats["batches_resumed"] += 1
            self._spawn(heir.collect(ep, batch_id, keys))
        for ep, intent in unknown or []:
            self.inherited.out |= set(intent.keys.values())
            self._spawn(heir.recover(ep, intent))

    def now(self) -> dict[str, int]:
        """What is waiting right now: calls held for the next batch, calls in batches out, and those batches
        (an earlier gateway's, being collected, among them)."""
        out = self.stats["batches_submitted"] + self.stats["batches_resumed"] - self.stats["batches_ended"]
        return {
            "held_now": sum(len(g.held) for g in self.groups.values()),
            "out_now": self.out,
            "batches_out": max(0, out),
        }

    async def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _error(provider: str, message: str) -> dict[str, Any]:
    if provider == "anthropic":
        return {"type": "error", "error": {"type": "api_error", "message": message}}
    return {"error": {"message": message, "type": "server_error", "param": None, "code": None}}
