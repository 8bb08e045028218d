"""Which run's records to start first when the runs draw on different rate-limit budgets.

The plan interleaves the runs so that all progress together. Under rate limits the job's end is set by
its tightest budget (in the seeds' job GPT-5.4's input tokens), and the runs on that budget must keep it
spent from start to end: the slots (a few hundred, set by memory) are shared by every run, and a budget
left idle mid-run is time the job loses at its end. So a free slot goes to the run on the critical path:
for each budget, the time its limits need for what its runs have left (what it settled so far per record
done, times the records left, over its limit per minute, in whichever of requests, input and output
tokens binds), and the run whose budgets need the longest gets the slot, unless its budget is spent now
(a record of that run would only wait in the limiter): then the next such run. Until a budget has
settled anything, the run with the most records left once it is more than 5 % behind (an older rule,
measured at 1.11 x the floor with round-trip windows; the critical path: docs/benchmarks.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from runner.budget.ratelimit import INF, SharedLimiter, limiter_key
from runner.config import Config

SPENT = 0.1  # a budget with less than this share of a minute's worth left is spent for now
AHEAD = 1.05  # runs with records left within 5 % of the run furthest ahead are even (at the start, all)


def run_keys(cfg: Config, limiter: SharedLimiter) -> dict[str, list[int]]:
    """Each model run's budget slots (its model's, and its teacher's for Atlas)."""
    keys: dict[str, list[int]] = {}
    for r in cfg.model_runs():
        refs = [r.model_ref()] + ([r.teacher] if r.teacher else [])
        ks = {limiter_key(cfg, ref.provider, ref.model) for ref in refs}
        keys[r.name] = [limiter.slot(k) for k in sorted(ks) if k in limiter.keys]
    return keys


def budget_preference(cfg: Config, limiter: object) -> Callable[[Mapping[str, int]], str | None] | None:
    """Given each run's records left to finish, the run to start next (None: plan order); None when no
    budget has limits to weigh."""
    if not isinstance(limiter, SharedLimiter) or not cfg.rate_limits:
        return None
    keys = run_keys(cfg, limiter)
    if len(keys) < 2:
        return None
    path = CriticalPath(keys, limiter)

    def prefer(left: Mapping[str, int]) -> str | None:
        counts = [left.get(r, 0) for r in keys if left.get(r, 0)]
        if not counts:
            return None
        order = path.order(left)
        if order is None:  # nothing settled yet: the furthest behind, once it is behind
            behind = min(counts) * AHEAD + 2  # within this of the leader: even, plan order decides
            order = [r for r in sorted(keys, key=lambda r: -left.get(r, 0)) if left.get(r, 0) > behind]
        for run in order:
            if left.get(run, 0) and min((limiter.headroom(k) for k in keys[run]), default=1.0) > SPENT:
                return run
        return None

    return prefer


class CriticalPath:
    """The runs in the order their budgets need time for what they have left, longest first (read from the
    shared budget at most every REFRESH_SECONDS: a free slot asks each time)."""

    REFRESH_SECONDS = 1.0

    def __init__(self, keys: dict[str, list[int]], limiter: SharedLimiter) -> None:
        self.keys, self.limiter = keys, limiter
        self.totals: dict[str, int] | None = None  # each run's records at the start (the first `left`)
        self._order: list[str] | None = None
        self._at = -1e9

    def order(self, left: Mapping[str, int]) -> list[str] | None:
        if self.totals is None:
            self.totals = {r: left.get(r, 0) for r in self.keys}
        now = time.monotonic()
        if now - self._at >= self.REFRESH_SECONDS:
            self._at, self._order = now, self._compute(left)
        return self._order

    def _compute(self, left: Mapping[str, int]) -> list[str] | None:
        assert self.totals is not None
        tally = self.limiter.tally()
        need: dict[int, float] = {}  # budget slot -> minutes its limits need for what is left
        for slot, key in enumerate(self.limiter.keys):
            runs = [r for r, ks in self.keys.items() if slot in ks]
            done = sum(self.totals.get(r, 0) - left.get(r, 0) for r in runs)
            rest = sum(left.get(r, 0) for r in runs)
            t = tally[key]
            if done <= 0 or not any(t.used):
                continue
            need[slot] = max((used * rest / done / cap for used, cap in zip(t.used, t.caps, strict=True)
                              if cap != INF and cap > 0), default=0.0)
        if not need:
            return None
        by_run = {r: max((need.get(k, 0.0) for k in ks), default=0.0) for r, ks in self.keys.items()}
        return sorted(by_run, key=lambda r: (-by_run[r], -left.get(r, 0)))
