"""Which run's records to start first when the runs draw on different rate-limit budgets.

The plan interleaves the runs so that all progress together. Under rate limits the job's end is set
by its tightest budget (in the seeds' job GPT-5.4's input tokens), and that run must keep its budget
spent from start to end; with an even share of the slots it fell behind, sat under its limit mid-run
and caught up alone at the end (wall 1.28 x the floor). So a free slot goes to the run with the most
records left to finish, once it is more than 5 % behind, unless its budget is spent (a record of
that run would only wait in the limiter): then to the next such run. Runs even, or no limits
configured: plan order. (Tried and measured worse: the run whose budget has the most left, 1.21 x,
which favours runs whose budgets never bind; the run whose budget is most used but not spent, 1.27 x,
which fed GPT-5.4's burst and left Atlas's long conversations for the end. This rule: 1.18 x with
the fixed 10 s concurrency windows of then; 1.11 x with today's round-trip windows, docs/benchmarks.md.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from runner.budget.ratelimit import SharedLimiter, limiter_key
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

    def prefer(left: Mapping[str, int]) -> str | None:
        counts = [left.get(r, 0) for r in keys if left.get(r, 0)]
        if not counts:
            return None
        behind = min(counts) * AHEAD + 2  # within this of the leader: even, plan order decides
        for run in sorted(keys, key=lambda r: -left.get(r, 0)):
            if left.get(run, 0) <= behind:
                return None
            if min((limiter.headroom(k) for k in keys[run]), default=1.0) > SPENT:
                return run
        return None

    return prefer
