"""One budget shared by processes: never over it in any window; a pause stops every process."""

from __future__ import annotations

import threading
import time
from typing import Any

import multiprocess as mp
import pytest

from runner.budget.ratelimit import Reservation, SharedLimiter
from runner.config import Limits


def _hammer(limiter: SharedLimiter, n: int, ready: Any, go: Any, out: Any) -> None:
    ready.put(1)
    go.wait()
    for _ in range(n):
        r = limiter.acquire(0, 10, 0)
        assert r is not None
        out.put(time.monotonic())  # CLOCK_MONOTONIC: one clock for every process on the machine
        limiter.settle(r, 10, 0)


def _in_processes(procs: int, expect: int, target: Any, args: tuple[Any, ...], start: Any) -> list[float]:
    """Run target in spawned processes; once all are up (spawn time must not count), call start()
    and let them go. Returns the expect stamps they put on the queue, sorted."""
    ctx = mp.get_context("spawn")
    ready, go, out = ctx.Queue(), ctx.Event(), ctx.Queue()
    ps = [ctx.Process(target=target, args=(*args, ready, go, out)) for _ in range(procs)]
    for p in ps:
        p.start()
    for _ in ps:
        ready.get(timeout=60)
    start()
    go.set()
    stamps = [out.get(timeout=60) for _ in range(expect)]
    for p in ps:
        p.join(10)
    return sorted(stamps)


def test_processes_sharing_a_limiter_never_exceed_the_budget() -> None:
    """From an empty bucket at t0, the k-th request of all processes together leaves no earlier than
    t0 + (k - 1) / rate: the token-bucket budget, in every window since t0."""
    rpm = 600.0  # 10 requests/s
    limiter = SharedLimiter({"p": Limits(rpm=rpm)}, {})
    t0 = 0.0

    def empty_bucket() -> None:
        nonlocal t0
        while isinstance(r := limiter.try_acquire(0, 0, 0), Reservation):
            limiter.settle(r, 0, 0)
        t0 = time.monotonic()

    stamps = _in_processes(4, 40, _hammer, (limiter, 10), empty_bucket)
    rate = rpm / 60
    for k, t in enumerate(stamps, 1):
        assert t - t0 >= (k - 1) / rate - 1e-3, (k, t - t0)
    # and the budget is used: no share is left idle (40 requests at 10/s take 3.9 s)
    assert stamps[-1] - t0 <= len(stamps) / rate + 1.0


def test_token_budgets_reserve_and_settle() -> None:
    limiter = SharedLimiter({"p": Limits(itpm=1000, otpm=100)}, {})
    r = limiter.try_acquire(0, 900, 50)
    assert isinstance(r, Reservation)
    assert isinstance(limiter.try_acquire(0, 200, 10), float)  # 100 input tokens left: must wait
    limiter.settle(r, 100, 10)  # it used far less than reserved: the rest comes back
    assert isinstance(limiter.try_acquire(0, 200, 10), Reservation)


def _blocked_until_pause_ends(limiter: SharedLimiter, ready: Any, go: Any, out: Any) -> None:
    ready.put(1)
    go.wait()
    r = limiter.acquire(0, 1, 0)
    assert r is not None
    out.put(time.monotonic())


def test_a_pause_set_by_one_process_holds_every_process() -> None:
    limiter = SharedLimiter({"p": Limits(rpm=10_000)}, {})
    paused_at = 0.0

    def pause() -> None:
        nonlocal paused_at
        paused_at = time.monotonic()
        limiter.pause(0, 1.0)  # as after a 429 with retry-after: 1 seen by one worker

    through = _in_processes(3, 3, _blocked_until_pause_ends, (limiter,), pause)
    assert all(1.0 - 1e-3 <= t - paused_at < 3.0 for t in through), [t - paused_at for t in through]


def _round(limiter: SharedLimiter) -> int:
    """One round trip: as many calls as the window admits, all in flight at once, then all answered."""
    held = []
    while isinstance(r := limiter.try_acquire(0, 1, 0), Reservation):
        held.append(r)
    for r in held:
        limiter.settle(r, 1, 0)
    return len(held)


def test_adaptive_window_doubles_each_round_until_a_429_then_grows_by_one() -> None:
    limiter = SharedLimiter({"p": Limits()}, {"p": True}, start_concurrency=8, max_concurrency=256)
    assert [_round(limiter) for _ in range(4)] == [8, 16, 32, 64]  # slow start: 8 to 64 in three rounds
    limiter.pause(0, 0.0)  # a 429
    assert limiter.snapshot(0)["concurrency"] == 64  # 128 after the last round, halved
    for _ in range(3):  # additive from here: about one more per full window
        before = limiter.snapshot(0)["concurrency"]
        assert _round(limiter) == int(before)
        assert 0.95 < limiter.snapshot(0)["concurrency"] - before <= 1.0
    limiter.pause(0, 0.0)
    assert 33 < limiter.snapshot(0)["concurrency"] < 34


def test_a_window_that_was_not_full_does_not_grow() -> None:
    limiter = SharedLimiter({"p": Limits()}, {"p": True}, start_concurrency=8)
    for _ in range(100):  # one call at a time: the window never limited anything
        r = limiter.try_acquire(0, 1, 0)
        assert isinstance(r, Reservation)
        limiter.settle(r, 1, 0)
    assert limiter.snapshot(0)["concurrency"] == 8
    r = limiter.try_acquire(0, 1, 0)
    assert isinstance(r, Reservation)
    limiter.settle(r, 1, 0, ok=False)  # a failed call never grows it
    assert limiter.snapshot(0)["concurrency"] == 8


def test_round_trip_is_the_slowest_keys_smoothed_call_time_from_admission_to_settle(monkeypatch: Any) -> None:
    limiter = SharedLimiter({"fast": Limits(), "slow": Limits()}, {"fast": False, "slow": False})
    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    assert limiter.round_trip() is None  # nothing timed yet

    def call(key: str, seconds: float, ok: bool = True) -> None:
        r = limiter.try_acquire(limiter.slot(key), 1, 0)
        assert isinstance(r, Reservation)
        clock[0] += seconds
        limiter.settle(r, 1, 0, ok=ok)

    call("fast", 0.2)
    call("slow", 4.0)
    assert limiter.round_trip() == 4.0  # the first call sets it
    call("slow", 20.0)  # one outlier moves it by 1/16 of the difference
    assert limiter.round_trip() == 5.0
    call("slow", 60.0, ok=False)  # a failed call (a time limit, a 5xx) times nothing
    assert limiter.round_trip() == 5.0 and limiter.snapshot(limiter.slot("fast"))["round_trip"] == pytest.approx(0.2)


def _take_and_die(limiter: SharedLimiter, lane: int, ready: Any) -> None:
    limiter.lane = lane
    for _ in range(3):
        assert limiter.acquire(0, 10, 0) is not None
    ready.put(1)
    time.sleep(60)  # killed here, holding three reservations it will never settle


def test_a_dead_workers_reservations_are_reclaimed_by_its_lane() -> None:
    ctx = mp.get_context("spawn")
    limiter = SharedLimiter({"p": Limits()}, {"p": True}, start_concurrency=4, lanes=2)
    limiter.lane = 0
    mine = limiter.acquire(0, 10, 0)
    ready = ctx.Queue()
    p = ctx.Process(target=_take_and_die, args=(limiter, 1, ready))
    p.start()
    ready.get(timeout=60)
    assert limiter.snapshot(0)["in_flight"] == 4  # the window is full: nobody else gets in
    assert isinstance(limiter.try_acquire(0, 10, 0), float)
    p.kill()
    p.join()
    assert limiter.reclaim(1) == 3
    assert limiter.snapshot(0)["in_flight"] == 1  # only this process's own, still held
    assert mine is not None and isinstance(limiter.try_acquire(0, 10, 0), Reservation)


def _die_holding_the_lock(limiter: SharedLimiter) -> None:
    import os

    with limiter._locked():
        os._exit(9)  # as a worker killed (or exiting) while one of its slot threads was inside the budget


def test_a_process_that_died_holding_the_budgets_lock_does_not_hang_everyone() -> None:
    """The kernel releases the lock with its dead holder's last descriptor: nobody waits, nobody guesses."""
    limiter = SharedLimiter({"p": Limits(rpm=10_000)}, {}, lanes=1)
    p = mp.get_context("spawn").Process(target=_die_holding_the_lock, args=(limiter,))
    p.start()
    p.join(30)
    assert p.exitcode == 9
    t0 = time.monotonic()
    assert isinstance(limiter.try_acquire(limiter.slot("p"), 10), Reservation)
    assert time.monotonic() - t0 < 5  # no stale wait (a lower bound of load, not of a timer)
    assert limiter.snapshot(limiter.slot("p"))["in_flight"] == 1  # the counts whole: only this call


def _hold_the_lock_alive(limiter: SharedLimiter, ready: Any, seconds: float) -> None:
    import os

    try:
        with limiter._locked():
            ready.set()
            time.sleep(seconds)  # a live holder that is slow (a process stopped by a debugger, a swapped page)
    except ValueError:  # "semaphore or lock released too many times": someone broke it meanwhile
        os._exit(3)


def test_a_live_holder_keeps_the_budgets_lock_however_long_it_holds_it() -> None:
    """Before, the lock was broken after a stale time whoever held it: a second process got in while the holder
    lived, and the holder then failed releasing it."""
    limiter = SharedLimiter({"p": Limits(rpm=10_000)}, {}, lanes=1)
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    p = ctx.Process(target=_hold_the_lock_alive, args=(limiter, ready, 1.5))
    p.start()
    try:
        assert ready.wait(30)
        t0 = time.monotonic()
        assert limiter.try_acquire(limiter.slot("p"), 10) is not None
        assert time.monotonic() - t0 > 1.0  # admitted only once the holder let go (a lower bound: load lengthens it)
        p.join(30)
        assert p.exitcode == 0  # and its own release went through
    finally:
        p.kill()


def test_a_large_request_is_not_starved_by_smaller_ones_that_came_after_it() -> None:
    """First come, first served: callers asking for 500 tokens again and again, as fast as the budget lets
    them, and one asking for 3,000 after them. Whoever asked when enough had come back used to take it: the
    small ones every time, and the large one waited for as long as they kept asking (a conversation's last,
    largest turns were left to the end of a run). Now what comes back is kept for the oldest waiter."""
    limiter = SharedLimiter({"k": Limits(itpm=600_000)}, {"k": False})  # 10,000 tokens a second
    assert isinstance(limiter.try_acquire(0, 600_000), Reservation)  # the bucket drained: every call waits
    stop = threading.Event()
    small: list[float] = []

    def asking() -> None:
        while not stop.is_set():
            res = limiter.acquire(0, 500, 0, deadline=time.monotonic() + 30)
            if res is not None:
                small.append(time.monotonic())
                limiter.settle(res, 500, 0)

    threads = [threading.Thread(target=asking, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.5)  # the small ones asking, the budget spent as it comes back
    asked = time.monotonic()
    big = limiter.acquire(0, 3_000, 0, deadline=asked + 20)
    waited = time.monotonic() - asked
    stop.set()
    for t in threads:
        t.join(35)
    assert big is not None, "the large request was never admitted while the small ones kept asking"
    # ahead of it: at most the four small ones already waiting (2,000 tokens), then its own 3,000 (0.5 s of
    # refill); the bound leaves a loaded machine's scheduling room
    assert waited < 10, waited
    assert len(small) > 10  # and the small ones were served meanwhile too
