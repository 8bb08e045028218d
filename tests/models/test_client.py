"""The retry layer: transient errors retried, fatal ones not, cache hits make no call."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.cache import ResponseCache
from runner.config import RetrySettings
from runner.errors import ProviderFatal, ProviderGaveUp
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
    assert c.cost_usd == pytest.approx((10 * 2.0 + 2 * 8.0) / 1e6)


def test_fatal_is_not_retried() -> None:
    p = Scripted([ProviderError("fatal", "invalid x-api-key", status=401)])
    with pytest.raises(ProviderFatal, match="401"):
        _client(p).complete(REQ)
    assert p.calls == 1


def test_attempts_are_bounded() -> None:
    p = Scripted([ProviderError("transient", "500")] * 10)
    with pytest.raises(ProviderGaveUp):
        _client(p, max_attempts=3).complete(REQ)
    assert p.calls == 3


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
