"""The one retry policy (client and gateway): what it retries, how long it waits, when it gives up."""

from __future__ import annotations

import random

import pytest

from runner.config import RetrySettings
from runner.models.retry import Retry, RetryPolicy


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def policy(budget: bool = False, **kw: float) -> tuple[RetryPolicy, Clock]:
    clock = Clock()
    settings = RetrySettings(**{"max_attempts": 5, "base_seconds": 1.0, "max_backoff_seconds": 8.0,
                                "total_cap_seconds": 60.0, **kw})
    return RetryPolicy(settings, budget=budget, clock=clock), clock


@pytest.mark.parametrize("kind", ["fatal", "rejected", "bad_request"])
def test_an_error_that_is_the_callers_is_not_retried(kind: str) -> None:
    p, _ = policy()
    assert p.after(kind, 1.0) is None
    assert (p.retries, p.rate_limited) == (0, 0)


def test_transient_waits_are_jittered_below_the_capped_exponential() -> None:
    random.seed(7)
    p, _ = policy(max_attempts=10)
    waits = [r.wait for _ in range(6) if (r := p.after("transient", None)) is not None]
    assert len(waits) == 6 and p.retries == 6
    caps = [1, 2, 4, 8, 8, 8]
    assert all(0 <= w <= c for w, c in zip(waits, caps, strict=True))
    assert len(set(waits)) == 6  # jittered, not the same for every caller


def test_a_transient_retry_after_is_a_floor_under_the_backoff() -> None:
    p, _ = policy()
    r = p.after("transient", 30.0)
    assert r == Retry(30.0, None)


def test_a_rate_limit_pauses_the_shared_budget_instead_of_sleeping() -> None:
    shared, _ = policy(budget=True)
    assert shared.after("rate_limited", 12.0) == Retry(0.0, 12.0)
    alone, _ = policy(budget=False)
    assert alone.after("rate_limited", 12.0) == Retry(12.0, None)
    assert shared.rate_limited == alone.rate_limited == 1


def test_the_last_attempt_and_the_total_time_end_it() -> None:
    p, _ = policy(max_attempts=3)
    assert p.after("transient", None) is not None
    assert p.after("transient", None) is not None
    assert p.after("rate_limited", None) is None  # the third attempt was the last: counted, not retried
    assert (p.attempts, p.retries, p.rate_limited) == (3, 2, 1)
    late, clock = policy()
    clock.now += 55.0
    assert late.after("transient", 10.0) is None  # 10 s more would pass the 60 s cap
    assert late.after("transient", 4.0) is not None
