"""Two runs compared on the same records: the job's question (is this run better than the reference, by
how much, how sure), for the runs of one job and for `runner report A B`.

Every number is computed on the records both runs have, never on each run's own set: success on the
records both *finished* (a success or a failure in each; an error or a cut turn in either leaves the pair
out, and is counted), the harness's metrics, cost and latency on those same pairs. Records in only one run
are counted and named, never silently dropped.

The difference in success comes with Newcombe's paired interval, the exact McNemar p-value (it uses only
the records whose outcome differs: won and lost), and the smallest difference these many records could
detect at 80 % power given how often the two runs disagree.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from runner.analysis.stats import Z80, Z95, mcnemar, paired_difference, paired_mde
from runner.analysis.trials import by_record, repeated
from runner.results.result import Result, outcome


@dataclass(frozen=True)
class Delta:
    """One quantity in the reference and in the run; None where unknown (no price, no records)."""

    reference: float | None
    run: float | None

    @property
    def difference(self) -> float | None:
        return None if self.reference is None or self.run is None else self.run - self.reference


@dataclass(frozen=True)
class Paired:
    reference: str
    run: str
    shared: int  # records present in both runs
    paired: int  # ... that both finished: the success comparison's n
    both: int  # succeeded in both
    neither: int
    won: list[str]  # succeeded in the run, failed in the reference
    lost: list[str]  # the other way round
    difference: float  # success rate of the run minus the reference's, on the paired records
    ci95: tuple[float, float]
    p_value: float
    mde: float | None  # smallest difference detectable at 80 % power; None: too few records, or no variation
    success: Delta
    cost_per_record: Delta
    cost_per_success: Delta
    latency_s: Delta  # mean seconds per record
    metrics: dict[str, Delta] = field(default_factory=dict)
    only_in_reference: list[str] = field(default_factory=list)
    only_in_run: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)  # shared, but an error or cut turn in one of them
    cached: bool = False  # some of the pairs' model calls were answered by the response cache
    # newcombe-mcnemar: one trial per record; paired-means: repeated trials, each record's share of
    # successes compared (both then counts the records where the shares are equal)
    method: str = "newcombe-mcnemar"

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        for key in ("success", "cost_per_record", "cost_per_success", "latency_s"):
            doc[key]["difference"] = getattr(self, key).difference
        for name, d in self.metrics.items():
            doc["metrics"][name]["difference"] = d.difference
        return doc


FINISHED = ("success", "failure")


def _cost(rows: list[Result]) -> float | None:
    costs = [r.usage.cost_usd for r in rows]
    return None if any(c is None for c in costs) else sum(c or 0.0 for c in costs)


def _per(total: float | None, n: int) -> float | None:
    return None if total is None or not n else total / n


def _metric(rows: list[Result], name: str) -> float | None:
    vals = [v for r in rows if (v := r.metrics.get(name)) is not None]
    return statistics.fmean(vals) if vals else None


def pair(reference: str, ref_rows: list[Result], run: str, run_rows: list[Result]) -> Paired:
    """`run` against `reference`, record by record (a record's last result in each; with repeated
    trials, its trials together)."""
    if repeated(ref_rows) or repeated(run_rows):
        return _pair_trials(reference, ref_rows, run, run_rows)
    a, b = {r.record_id: r for r in ref_rows}, {r.record_id: r for r in run_rows}
    shared = [i for i in a if i in b]
    done = [i for i in shared if outcome(a[i]) in FINISHED and outcome(b[i]) in FINISHED]
    finished = set(done)
    won = [i for i in done if b[i].success and not a[i].success]
    lost = [i for i in done if a[i].success and not b[i].success]
    both = sum(1 for i in done if a[i].success and b[i].success)
    neither = len(done) - both - len(won) - len(lost)
    diff, lo, hi = paired_difference(both, len(won), len(lost), neither)
    n = len(done)
    sa, sb = both + len(lost), both + len(won)
    return Paired(
        reference=reference, run=run, shared=len(shared), paired=n, both=both, neither=neither, won=won, lost=lost,
        difference=diff, ci95=(lo, hi), p_value=mcnemar(len(lost), len(won)), mde=paired_mde(n, _discordance(
            n, len(won) + len(lost), sa, sb)),
        **_sides([a[i] for i in done], [b[i] for i in done]),
        only_in_reference=[i for i in a if i not in b], only_in_run=[i for i in b if i not in a],
        unfinished=[i for i in shared if i not in finished])


def _sides(ra: list[Result], rb: list[Result]) -> dict[str, Any]:
    """What both ways of pairing report alike, from the finished results they compare (one per record, or
    every trial): success, cost per result and per success, mean latency, the harness's metrics."""
    sa, sb = sum(1 for r in ra if r.success), sum(1 for r in rb if r.success)
    names = [k for k in dict.fromkeys(k for r in ra for k in r.metrics) if any(k in r.metrics for r in rb)]
    return {"success": Delta(sa / len(ra) if ra else None, sb / len(rb) if rb else None),
            "cost_per_record": Delta(_per(_cost(ra), len(ra)), _per(_cost(rb), len(rb))),
            "cost_per_success": Delta(_per(_cost(ra), sa), _per(_cost(rb), sb)),
            "latency_s": Delta(statistics.fmean(r.wall_seconds for r in ra) if ra else None,
                               statistics.fmean(r.wall_seconds for r in rb) if rb else None),
            "metrics": {k: Delta(_metric(ra, k), _metric(rb, k)) for k in names},
            "cached": any(r.usage.cache_hits for r in (*ra, *rb))}


def _pair_trials(reference: str, ref_rows: list[Result], run: str, run_rows: list[Result]) -> Paired:
    """With repeated trials: each record's share of successful trials, run minus reference, averaged over
    the records both finished at least once; its interval and test from the spread of those per-record
    differences (a paired comparison clustered by record, Miller 2024 section 4; normal approximation)."""
    ta, tb = by_record(ref_rows), by_record(run_rows)
    ids_a, ids_b = dict.fromkeys(r.record_id for r in ref_rows), dict.fromkeys(r.record_id for r in run_rows)
    done = [i for i in ta if i in tb]
    diffs = [sum(tb[i]) / len(tb[i]) - sum(ta[i]) / len(ta[i]) for i in done]
    n = len(done)
    mean = statistics.fmean(diffs) if diffs else 0.0
    sd = statistics.stdev(diffs) if n > 1 else 0.0
    se = sd / math.sqrt(n) if n else 0.0
    p = math.erfc(abs(mean) / se / math.sqrt(2)) if se else (1.0 if mean == 0 else 0.0)
    ra = [r for r in ref_rows if r.record_id in tb and outcome(r) in FINISHED]
    rb = [r for r in run_rows if r.record_id in ta and outcome(r) in FINISHED]
    shared = [i for i in ids_a if i in ids_b]
    return Paired(
        reference=reference, run=run, shared=len(shared), paired=n, both=sum(1 for d in diffs if d == 0), neither=0,
        won=[i for i, d in zip(done, diffs, strict=True) if d > 0],
        lost=[i for i, d in zip(done, diffs, strict=True) if d < 0],
        difference=mean, ci95=(max(-1.0, mean - Z95 * se), min(1.0, mean + Z95 * se)), p_value=min(1.0, p),
        mde=(Z95 + Z80) * se if se else None, **_sides(ra, rb),  # cost per record: per trial here
        only_in_reference=[i for i in ids_a if i not in ids_b], only_in_run=[i for i in ids_b if i not in ids_a],
        unfinished=[i for i in shared if i not in tb or i not in ta], method="paired-means")


def _discordance(n: int, discordant: int, sa: int, sb: int) -> float:
    """The share of records whose outcome differs between the runs, for the detectable difference: the
    observed share, or where none differ (two identical runs) what two independent runs at these rates
    would give, so a job of identical runs still learns how small a change it could see."""
    if not n:
        return 0.0
    if discordant:
        return discordant / n
    pa, pb = sa / n, sb / n
    return pa * (1 - pb) + pb * (1 - pa)


def against(runs: dict[str, list[Result]], reference: str) -> list[Paired]:
    """Every other run of a job against its reference run, in the runs' order."""
    return [pair(reference, runs[reference], name, rows) for name, rows in runs.items() if name != reference]
