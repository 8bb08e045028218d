"""Which run's records to start first when the runs draw on different rate-limit budgets.

The plan interleaves the runs so that all progress together. Under rate limits the job's end is set by
its tightest budget (in the seeds' job GPT-5.4's input tokens), and the runs on that budget must keep it
spent from start to end: the slots (a few hundred, set by memory) are shared by every run, and a budget
left idle mid-run is time the job loses at its end. So a free slot goes to the run on the critical path:
for each budget, the time its limits need for what its runs have left, over its limit per minute in
whichever of requests, input and output tokens binds; the run whose budgets need the longest gets the
slot, unless its budget is spent now (a record of that run would only wait in the limiter): then the next
such run.

What is left is counted in calls: the records left times the calls the forecast (runner/forecast/) expects
of each (a harness that foresees its calls is within a few per cent of them), times what a call of that
run's calls drew from that budget so far (from its first MIN_CALLS settled calls on: a model's thinking,
which no forecast knows well, is then measured; per run, as an Atlas teacher's calls are not its baseline's
on the same model), else the forecast's own tokens per call. So the critical path is known from
the first second: the forecast-less rule, what a budget settled per record done, found it only once
records finished, tens of seconds into the run, and the runs shared the first slots evenly meanwhile
(the seeds' job's floor lost ~15 s at its start to that). Without a forecast (a harness that cannot
foresee its calls) that older rule stands: until a budget has settled anything, the run with the most
records left once it is more than 5 % behind.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from runner.budget.ratelimit import INF, SharedLimiter, limiter_key
from runner.config import Config

SPENT = 0.1  # a budget with less than this share of a minute's worth left is spent for now
AHEAD = 1.05  # runs with records left within 5 % of the run furthest ahead are even (at the start, all)
MIN_CALLS = 10  # a run's settled calls on a budget before their tokens per call are measured, not forecast
# while a budget's need is forecast, not measured, runs within this share of the top need take turns
HEDGE = 0.5
# run -> budget key -> (calls, input, output)
PerItem = Mapping[str, Mapping[str, tuple[float, float, float]]]


def run_keys(cfg: Config, limiter: SharedLimiter) -> dict[str, list[int]]:
    """Each model run's budget slots (its model's, and its teacher's for Atlas)."""
    keys: dict[str, list[int]] = {}
    for r in cfg.model_runs():
        refs = [r.model_ref()] + ([r.teacher] if r.teacher else [])
        ks = {limiter_key(cfg, ref.provider, ref.model) for ref in refs}
        keys[r.name] = [limiter.slot(k) for k in sorted(ks) if k in limiter.keys]
    return keys


def budget_preference(
    cfg: Config, limiter: object, per_item: PerItem | None = None
) -> Callable[[Mapping[str, int]], str | None] | None:
    """Given each run's records left to finish, the run to start next (None: plan order); None when no
    budget has limits to weigh. `per_item`: what the forecast expects an item of each run to ask of each
    budget key."""
    if not isinstance(limiter, SharedLimiter) or not cfg.rate_limits:
        return None
    keys = run_keys(cfg, limiter)
    if len(keys) < 2:
        return None
    path = CriticalPath(keys, limiter, per_item)

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

    def __init__(
        self, keys: dict[str, list[int]], limiter: SharedLimiter, per_item: PerItem | None = None
    ) -> None:
        self.keys, self.limiter = keys, limiter
        self.per_item = per_item
        self.totals: dict[str, int] | None = None  # each run's records at the start (the first `left`)
        self._order: list[str] | None = None
        self._at = -1e9
        self._hedged = 0  # the leading runs whose order is uncertain (forecast, close): they take turns
        self._turn = 0

    def order(self, left: Mapping[str, int]) -> list[str] | None:
        if self.totals is None:
            self.totals = {r: left.get(r, 0) for r in self.keys}
        now = time.monotonic()
        if now - self._at >= self.REFRESH_SECONDS:
            self._at, self._order = now, self._compute(left)
        if self._order is None or self._hedged < 2:
            return self._order
        k = self._turn % self._hedged  # a free slot each: runs whose needs are not yet known apart take turns
        self._turn += 1
        return self._order[k : self._hedged] + self._order[:k] + self._order[self._hedged :]

    def _compute(self, left: Mapping[str, int]) -> list[str] | None:
        if self.per_item is not None:
            return self._by_calls(left)
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
            need[slot] = max(
                (
                    used * rest / done / cap
                    for used, cap in zip(t.used, t.caps, strict=True)
                    if cap != INF and cap > 0
                ),
                default=0.0,
            )
        return self._ranked(need, left)

    def _ranked(
        self, need: Mapping[int, float], left: Mapping[str, int], guessed: frozenset[int] = frozenset()
    ) -> list[str] | None:
        """The runs by the need of their neediest budget; `guessed`: budgets whose need is a forecast's (the
        leading runs within HEDGE of the top, where one such budget leads, take turns)."""
        self._hedged = 0
        if not need:
            return None
        by_run = {r: max((need.get(k, 0.0) for k in ks), default=0.0) for r, ks in self.keys.items()}
        order = sorted(by_run, key=lambda r: (-by_run[r], -left.get(r, 0)))
        top = by_run[order[0]]
        close = [r for r in order if by_run[r] >= HEDGE * top]
        if any(k in guessed for r in close for k in self.keys[r] if need.get(k, 0.0) >= HEDGE * top):
            self._hedged = len(close)
        return order

    def _by_calls(self, left: Mapping[str, int]) -> list[str] | None:
        """Minutes each budget needs: per run on it, the forecast's calls left times the run's tokens per call
        there (measured once MIN_CALLS of its calls settled, else the forecast's)."""
        assert self.per_item is not None
        tally, usage = self.limiter.tally(), self.limiter.per_run()
        need: dict[int, float] = {}
        guessed: set[int] = set()
        for slot, key in enumerate(self.limiter.keys):
            asked = [0.0, 0.0, 0.0]  # calls, input and output tokens its runs have left
            for run, per in self.per_item.items():
                calls, inp, out = per.get(key, (0.0, 0.0, 0.0))
                if not calls:
                    continue
                done, used_in, used_out = usage.get(run, {}).get(key, (0.0, 0.0, 0.0))
                each = (used_in / done, used_out / done) if done >= MIN_CALLS else (inp / calls, out / calls)
                if done < MIN_CALLS:
                    guessed.add(slot)
                n = calls * left.get(run, 0)
                asked = [asked[0] + n, asked[1] + n * each[0], asked[2] + n * each[1]]
            if asked[0] <= 0:
                continue
            need[slot] = max(
                (a / cap for a, cap in zip(asked, tally[key].caps, strict=True) if cap != INF and cap > 0),
                default=0.0,
            )
        return self._ranked(need, left, frozenset(guessed))
