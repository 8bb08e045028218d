"""Which run's records to start first when the runs draw on different rate-limit budgets.

The plan interleaves the runs so that all progress together. Under rate limits that wastes the job's
slowest budget: in the seeds' job GPT-5.4's input tokens force the longest time, yet it got a fourth
of the slots, sat under its limit mid-run while the other runs' budgets were spent, and had to catch
up at the end (wall 1.28 x the floor). A record of a run whose budget is spent only waits in the
limiter; one of a run with budget unspent uses it. So a free slot goes to the run whose tightest
budget has the most left, read from the shared budget; with no limits configured, nothing changes.
"""

from __future__ import annotations

from collections.abc import Callable

from runner.config import Config
from runner.ratelimit import SharedLimiter, limiter_key

# Runs whose headroom differs by less than this are equal: plan order decides (no churn on noise).
MARGIN = 0.05


def run_keys(cfg: Config, limiter: SharedLimiter) -> dict[str, list[int]]:
    """Each model run's budget slots (its model's, and its teacher's for Atlas)."""
    keys: dict[str, list[int]] = {}
    for r in cfg.model_runs():
        refs = [r.model_ref()] + ([r.teacher] if r.teacher else [])
        ks = {limiter_key(cfg, ref.provider, ref.model) for ref in refs}
        keys[r.name] = [limiter.slot(k) for k in sorted(ks) if k in limiter.keys]
    return keys


def budget_preference(cfg: Config, limiter: object) -> Callable[[], str | None] | None:
    """The run to start next (None: plan order), or None when no budget has limits to weigh."""
    if not isinstance(limiter, SharedLimiter) or not cfg.rate_limits:
        return None
    keys = run_keys(cfg, limiter)
    if len(keys) < 2:
        return None

    def prefer() -> str | None:
        room = {run: min((limiter.headroom(k) for k in ks), default=1.0) for run, ks in keys.items()}
        best = max(room, key=room.__getitem__)
        return best if room[best] - min(room.values()) > MARGIN else None

    return prefer
