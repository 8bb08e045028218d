"""The retry layer: transient errors retried, fatal ones not, cache hits make no call."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.cache import ResponseCache
from runner.config import RetrySettings
from runner.errors import ConversationFailed, ProviderFatal, ProviderGaveUp, ProviderRejected, RunStopped
from runner.models.base import Completion, Provider, ProviderError, Request
from runner.models.client import ModelClient


class Scripted(Provider):
    name = "scripted"

    def __init__(self, script: list[ProviderError | None]) -> None:
        self.script, self.calls = list(script), 0

    def generate(self, req: Request) -> Completion:
        self.calls += 1
        step = self.script.pop(0) if self.script else None
        if step is not None:
            raise step
        return Completion("done", [], 10, 2, 0.01, "end_turn", "r1", req.model)


def _client(p: Provider, cache: ResponseCache | None = None, **retry: float) -> ModelClient:
    settings = RetrySettings(**{"base_seconds": 0.01, "max_backoff_seconds": 0.05, **retry})  # type: ignore[arg-type]
    return ModelClient(p, wire_model="m", logical_model="gpt-5.4", limiter=None, limiter_slot=None, cache=cache,
                       retry=settings)


REQ = Request("m", "s", [{"role": "user", "text": "x"}], [])


def test_transient_errors_are_retried_then_succeed() -> None:
    p = Scripted([ProviderError("transient", "503"), ProviderError("rate_limited", "429", retry_after=0.01), None])
    c = _client(p).complete(REQ)
    assert (c.text, c.attempts, p.calls) == ("done", 3, 3)
    assert c.cost_usd == pytest.approx((10 * 2.5 + 2 * 15.0) / 1e6)  # gpt-5.4: $2.50 in, $15 out per 1M


def test_fatal_is_not_retried() -> None:
    p = Scripted([ProviderError("fatal", "invalid x-api-key", status=401)])
    with pytest.raises(ProviderFatal, match="401"):
        _client(p).complete(REQ)
    assert p.calls == 1


def test_attempts_are_bounded() -> None:
    p = Scripted([ProviderError("transient", "500")] * 10)
    with pytest.raises(ProviderGaveUp):
        c = _client(p, max_attempts=3)
        c.complete(REQ)
    assert p.calls == 3 and c.stats.retries == 2  # no wait, no retry counted after the last attempt


def test_cache_hit_makes_no_call_and_errors_are_not_cached(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    failing = Scripted([ProviderError("transient", "500")] * 5)
    with pytest.raises(ProviderGaveUp):
        _client(failing, cache, max_attempts=2).complete(REQ)
    assert cache.stats()["entries"] == 0
    ok = Scripted([])
    first = _client(ok, cache).complete(REQ)
    again = _client(ok, cache)
    second = again.complete(REQ)
    assert ok.calls == 1 and second.cached and not first.cached and second.text == "done"
    assert again.stats.cache_hits == 1


def test_rejected_request_fails_the_conversation_not_the_run() -> None:
    p = Scripted([ProviderError("rejected", "messages.1: text content blocks must be non-empty", status=400)])
    with pytest.raises(ProviderRejected, match="non-empty") as info:
        _client(p).complete(REQ)
    assert isinstance(info.value, ConversationFailed) and not isinstance(info.value, RunStopped)
    assert p.calls == 1  # never retried: the same request gets the same answer


def test_cache_tokens_are_priced_and_counted() -> None:
    class Cached(Scripted):
        def generate(self, req: Request) -> Completion:
            return Completion("ok", [], 100, 10, 0.01, "end_turn", "r", req.model, cache_read_tokens=9000,
                              cache_write_tokens=1000)

    client = ModelClient(Cached([]), wire_model="m", logical_model="claude-sonnet-5-5", limiter=None,
                         limiter_slot=None, cache=None, retry=RetrySettings())
    c = client.complete(REQ)
    # Sonnet 5.5: $2 input, $2.50 cache write, $0.10 cache read (since 2026-10-07), $10 output per 1M tokens
    assert c.input_cost_usd == pytest.approx((100 * 2.0 + 1000 * 2.5 + 9000 * 0.1) / 1e6)
    assert c.cost_usd == pytest.approx(c.input_cost_usd + 10 * 10.0 / 1e6)
    assert c.cache_saved_usd == pytest.approx(9000 * (2.0 - 0.1) / 1e6)
    assert (client.stats.cache_read_tokens, client.stats.cache_write_tokens) == (9000, 1000)


def test_a_model_without_a_price_costs_unknown_not_zero() -> None:
    client = ModelClient(Scripted([]), wire_model="m", logical_model="some-new-model", limiter=None,
                         limiter_slot=None, cache=None, retry=RetrySettings())
    c = client.complete(REQ)
    assert c.cost_usd is None and client.stats.unpriced_calls == 1


def test_sampling_follows_the_model() -> None:
    def sent(model: str, provider: str) -> dict[str, float] | None:
        class P(Scripted):
            name = provider

        client = ModelClient(P([]), wire_model="m", logical_model=model, limiter=None, limiter_slot=None,
                             cache=None, retry=RetrySettings())
        return client.wire_request(REQ)[0].sampling

    assert sent("gpt-4.1", "openai") == {"temperature": 0.0}
    assert sent("gpt-5.4", "openai") == {}  # reasoning models take only the default
    assert sent("claude-sonnet-4-5-20250929", "anthropic") == {}  # the SDK's API version has no temperature


class _Cut(BaseException):
    """What the worker's time limit raises inside a call (a BaseException, like its _Alarm)."""


class Interrupted(Provider):
    name = "interrupted"

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def generate(self, req: Request) -> Completion:
        raise self.exc


@pytest.mark.parametrize("exc", [_Cut(), RuntimeError("a bug in our conversion"), ProviderError("transient", "503")])
def test_a_reservation_is_given_back_however_the_call_ends(exc: BaseException) -> None:
    """Before, only a provider error or success settled it: a time limit or a bug left the call counted
    in flight for the rest of the run, and with adaptive concurrency each leak shrank every worker's window."""
    from runner.budget.ratelimit import SharedLimiter
    from runner.config import Limits

    limiter = SharedLimiter({"p": Limits(rpm=6000)}, {"p": True}, start_concurrency=4)
    client = ModelClient(Interrupted(exc), wire_model="m", logical_model="gpt-5.4", limiter=limiter, limiter_slot=0,
                         cache=None, retry=RetrySettings(base_seconds=0.001, max_backoff_seconds=0.002,
                                                         max_attempts=2))
    with pytest.raises((_Cut, RuntimeError, ProviderGaveUp)):
        client.complete(REQ)
    assert limiter.snapshot(0)["in_flight"] == 0
