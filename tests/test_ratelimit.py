"""One budget shared by processes: never over it in any window; a pause stops every process."""

from __future__ import annotations

import time
from typing import Any

import multiprocess as mp

from runner.config import Limits
from runner.ratelimit import Reservation, SharedLimiter


def _hammer(limiter: SharedLimiter, n: int, out: Any) -> None:
    for _ in range(n):
        r = limiter.acquire(0, 10, 0)
        assert r is not None
        out.put(time.monotonic())
        limiter.settle(r, 10, 0)


def _stamps(limiter: SharedLimiter, procs: int, per: int) -> list[float]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=_hammer, args=(limiter, per, q)) for _ in range(procs)]
    for p in ps:
        p.start()
    stamps = [q.get(timeout=60) for _ in range(procs * per)]
    for p in ps:
        p.join(10)
    return sorted(stamps)


def test_processes_sharing_a_limiter_never_exceed_the_budget() -> None:
    """From an empty bucket at t0, the k-th request of all processes together leaves no earlier than
    t0 + (k - 1) / rate: the token-bucket budget, in every window since t0."""
    rpm = 600.0  # 10 requests/s
    limiter = SharedLimiter({"p": Limits(rpm=rpm)}, {})
    while isinstance(r := limiter.try_acquire(0, 0, 0), Reservation):
        limiter.settle(r, 0, 0)
    t0 = time.monotonic()
    stamps = _stamps(limiter, procs=4, per=10)
    rate = rpm / 60
    for k, t in enumerate(stamps, 1):
        assert t - t0 >= (k - 1) / rate - 1e-3, (k, t - t0)
    # and the budget is used: an idle share is not wasted (spawning takes part of the time)
    assert stamps[-1] - t0 <= len(stamps) / rate + 3.0


def test_token_budgets_reserve_and_settle() -> None:
    limiter = SharedLimiter({"p": Limits(itpm=1000, otpm=100)}, {})
    r = limiter.try_acquire(0, 900, 50)
    assert isinstance(r, Reservation)
    assert isinstance(limiter.try_acquire(0, 200, 10), float)  # 100 input tokens left: must wait
    limiter.settle(r, 100, 10)  # it used far less than reserved: the rest comes back
    assert isinstance(limiter.try_acquire(0, 200, 10), Reservation)


def _blocked_until_pause_ends(limiter: SharedLimiter, out: Any) -> None:
    t0 = time.monotonic()
    r = limiter.acquire(0, 1, 0)
    assert r is not None
    out.put(time.monotonic() - t0)


def test_a_pause_set_by_one_process_holds_every_process() -> None:
    limiter = SharedLimiter({"p": Limits(rpm=10_000)}, {})
    limiter.pause(0, 1.0)  # as after a 429 with retry-after: 1 seen by one worker
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=_blocked_until_pause_ends, args=(limiter, q)) for _ in range(3)]
    for p in ps:
        p.start()
    waits = [q.get(timeout=30) for _ in ps]
    for p in ps:
        p.join(10)
    assert all(w >= 0.3 for w in waits), waits  # spawn start-up eats part of the second


def test_adaptive_window_halves_on_429_and_grows_on_success() -> None:
    limiter = SharedLimiter({"p": Limits()}, {"p": True}, start_concurrency=8)
    limiter.pause(0, 0.0)
    assert limiter.snapshot(0)["concurrency"] == 4
    for _ in range(8):
        r = limiter.try_acquire(0, 1, 0)
        if isinstance(r, Reservation):
            limiter.settle(r, 1, 0)
    assert limiter.snapshot(0)["concurrency"] > 4
    held = [limiter.try_acquire(0, 1, 0) for _ in range(10)]
    assert sum(isinstance(h, Reservation) for h in held) == int(limiter.snapshot(0)["concurrency"])
