"""The time limit's cut never lands in the runner's own critical sections: a thread cut again and again
while it spends a shared budget leaves no lock held and no reservation counted as in flight.

Before, a cut could fall between the budget's lock being taken and the `try` that releases it (every
worker then stalled until the lock was broken) or between a reservation's admission and the `try` that
settles it (a call counted in flight for good)."""

from __future__ import annotations

import threading
import time
from typing import Any

from runner.budget.ratelimit import SharedLimiter
from runner.config import Limits, RetrySettings
from runner.interrupts import Alarm, shielded, shielded_now
from runner.models.base import Completion, Request
from runner.models.client import ModelClient
from runner.worker.clock import WatchedClock

CUTS = 300


class _Instant:
    """A provider that answers at once: the thread spends nearly all its time in the runner's code."""

    name = "anthropic"

    def generate(self, req: Request) -> Completion:
        return Completion("ok", [], 10, 5, 0.0, "end_turn", None, req.model)


def test_a_thread_cut_again_and_again_inside_the_budget_leaves_it_whole() -> None:
    limiter = SharedLimiter({"anthropic": Limits(rpm=10**9, itpm=10**12, otpm=10**12)}, {}, lanes=1)
    provider: Any = _Instant()
    client = ModelClient(provider, wire_model="m", logical_model="claude-sonnet-5-5", limiter=limiter,
                         limiter_slot=limiter.slot("anthropic"), cache=None, retry=RetrySettings())
    req = Request(model="m", system="", messages=[{"role": "user", "content": "x"}], tools=[])
    clock = WatchedClock(lambda: None)
    calls = [0]

    def harness(ready: threading.Event) -> None:
        clock.start(3600)
        try:
            with clock.running():
                ready.set()
                while True:
                    client._budgeted(req, 10, deadline=time.monotonic() + 60)
                    calls[0] += 1
        except Alarm:
            pass

    for _ in range(CUTS):
        ready = threading.Event()
        t = threading.Thread(target=harness, args=(ready,))
        t.start()
        assert ready.wait(10)
        clock.deadline = 0.0  # past: the next check cuts, wherever the thread is
        while not clock.check(time.monotonic()):
            pass
        t.join(10)
        assert not t.is_alive()
        held = limiter._lock._threads  # the process's own hold on the budget's file lock
        assert held.acquire(timeout=1.0), "a cut left the budget's lock held"
        held.release()
    assert calls[0] > CUTS  # the cuts fell all over the calls, not only between them
    assert limiter.snapshot(limiter.slot("anthropic"))["in_flight"] == 0


def test_a_cut_decided_while_a_shield_is_up_waits_for_it() -> None:
    clock = WatchedClock(lambda: None)
    inside, release, out = threading.Event(), threading.Event(), []

    def harness() -> None:
        clock.start(3600)
        try:
            with clock.running():
                with shielded():
                    inside.set()
                    release.wait(10)
                    out.append("shield finished whole")
                while True:
                    time.sleep(0.001)
        except Alarm:
            out.append("cut after it")

    t = threading.Thread(target=harness)
    t.start()
    assert inside.wait(10) and shielded_now(t.ident or 0)
    clock.deadline = 0.0
    assert clock.check(time.monotonic()) is False  # not inside the shield
    release.set()
    while not clock.check(time.monotonic()):
        time.sleep(0.001)
    t.join(10)
    assert out == ["shield finished whole", "cut after it"]
