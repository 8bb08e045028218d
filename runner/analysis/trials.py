"""Repeated trials of a record (config `epochs`): how a run's success is summed up when each record ran
N times, and how sure it is.

A model's answers vary from one call to the next, so one pass over the records says nothing about how
much a rate would move on a rerun; and records differ in difficulty, so N trials of one record are not N
independent samples. Following "Adding Error Bars to Evals" (Miller 2024): the mean over every trial with
its standard error clustered by record; and the consistency measures of repeated trials: pass@k (at least
one of k trials succeeds; Chen et al. 2021's unbiased estimator) and pass^k (all k succeed; tau-bench).

Only finished trials count (a success or a failure); errors and cut turns are shown beside, as for one
trial. A record's headline score is its trials reduced as Inspect AI's reducers do: `mean` (the share of
its trials that succeeded), `all`, `any`, or `at_least_K`.
"""

from __future__ import annotations

import statistics
from typing import Any

from runner.analysis.stats import clustered_se, pass_at_k, pass_hat_k, wilson
from runner.results.result import Result, outcome


def by_record(rows: list[Result]) -> dict[str, list[bool]]:
    """Each record's finished trials (True: success), in dataset order."""
    out: dict[str, list[bool]] = {}
    for r in rows:
        if outcome(r) in ("success", "failure"):
            out.setdefault(r.record_id, []).append(bool(r.success))
    return out


def repeated(rows: list[Result]) -> bool:
    """Some record of these results ran more than once."""
    return any(r.epoch > 1 for r in rows)


def reduce(trials: list[bool], reducer: str) -> float:
    """One record's trials as one score in 0..1."""
    if reducer == "mean":
        return sum(trials) / len(trials)
    if reducer == "all":
        return float(all(trials))
    if reducer == "any":
        return float(any(trials))
    return float(sum(trials) >= int(reducer.removeprefix("at_least_")))


def headline(rows: list[Result], reducer: str) -> tuple[float, tuple[float, float]]:
    """The run's success over records and its 95 % interval: for `mean`, the share of all finished trials,
    its interval Wilson's at the sample size the clustering leaves (below); for a yes/no reducer, the share
    of records, with Wilson's interval."""
    return _headline(by_record(rows), reducer)


def _headline(recs: dict[str, list[bool]], reducer: str) -> tuple[float, tuple[float, float]]:
    if not recs:
        return 0.0, (0.0, 1.0)
    if reducer == "mean":
        clusters = [[float(t) for t in ts] for ts in recs.values()]
        n = sum(len(c) for c in clusters)
        mean = sum(map(sum, clusters)) / n
        size = effective_size(clusters)
        return mean, wilson_at(mean, size)
    wins = sum(int(reduce(ts, reducer)) for ts in recs.values())
    return wins / len(recs), wilson(wins, len(recs))


def effective_size(clusters: list[list[float]]) -> float:
    """How many independent trials the clustered ones are worth (Kish): n over the design effect, the
    clustered variance over the independent one; where every trial agreed (no variance to compare), one
    per record, the most the data can claim. A normal interval (mean +- 1.96 SE) would shrink to a point
    at 0 % or 100 %; Wilson's at this size does not."""
    values = [v for c in clusters for v in c]
    naive = statistics.pvariance(values) / len(values) if len(values) > 1 else 0.0
    if naive == 0:
        return float(len(clusters))
    return len(values) / max(1.0, clustered_se(clusters) ** 2 / naive)


def wilson_at(p: float, n: float) -> tuple[float, float]:
    """Wilson's 95 % interval for a share p measured on n (possibly fractional) independent trials."""
    return wilson(p * n, n) if n > 0 else (0.0, 1.0)


def summary(rows: list[Result], reducer: str) -> dict[str, Any]:
    """What repeated trials add to a run's numbers (report.json `trials`), and under `headline` the run's
    success and its interval (as `headline` gives them, from the same reading of the results)."""
    recs = by_record(rows)
    clusters = [[float(t) for t in ts] for ts in recs.values()]
    values = [v for c in clusters for v in c]
    n = max((len(ts) for ts in recs.values()), default=0)
    mean = statistics.fmean(values) if values else 0.0
    naive = statistics.pstdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0
    # pass@k and pass^k over the records with at least k finished trials (a record's errors shorten its n)
    at = {
        k: _mean([pass_at_k(len(ts), sum(ts), k) for ts in recs.values() if len(ts) >= k])
        for k in range(1, n + 1)
    }
    hat = {
        k: _mean([pass_hat_k(len(ts), sum(ts), k) for ts in recs.values() if len(ts) >= k])
        for k in range(1, n + 1)
    }
    several = [ts for ts in recs.values() if len(ts) > 1]
    return {
        "headline": _headline(recs, reducer),
        "reducer": reducer,
        "trials_per_record": n,
        "records": len(recs),
        "finished_trials": len(values),
        "mean": mean,
        "se_clustered": clustered_se(clusters),
        "se_if_independent": naive,
        "pass_at_k": at,
        "pass_hat_k": hat,
        # records whose trials disagree: a success and a failure among them
        "flip_share": sum(1 for ts in several if 0 < sum(ts) < len(ts)) / len(several) if several else 0.0,
    }


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None
