"""Which run's records to start first when the runs draw on different rate-limit budgets.

The plan interleaves the runs so that all progress together. Under rate limits the job's end is set
by its tightest budget (in the seeds' job GPT-5.4's input tokens), and that run must keep its budget
spent from start to end; with an even share of the slots it sat under its limit mid-run and caught
up alone at the end (wall 1.28 x the floor). So a free slot goes to the run whose budget is the most
used but not yet spent (the binding one, being fed): a record of a run whose budget is spent would
only wait in the limiter, and one whose budget is barely used finishes in time on its plan share.
Budgets within 5 % of each other (the start: all full), or no limits configured: plan order.
(Preferring the run with the most records left gave Atlas's long conversations the slots while
GPT-5.4's budget went unused: 1.18 x.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from runner.config import Config
from runner.ratelimit import SharedLimiter, limiter_key

SPENT = 0.1  # a budget with less than this share of a minute's worth left is spent for now
MARGIN = 0.05  # budgets used within this of each other are even: plan order decides


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
        room = {run: min((limiter.headroom(k) for k in ks), default=1.0) for run, ks in keys.items() if left.get(run)}
        if not room:
            return None
        unspent = [run for run in room if room[run] > SPENT]
        if not unspent:
            return None
        busiest = min(unspent, key=room.__getitem__)
        others = [room[run] for run in unspent if run != busiest]
        return busiest if not others or max(others) - room[busiest] > MARGIN else None

    return prefer
