"""Two runs compared on the same records: the job's question (is this run better than the reference, by
how much, how sure), for the runs of one job and for `runner report A B`.

Every number is computed on the records both runs have, never on each run's own set: success on the
records both *finished* (a success or a failure in each; an error or a cut turn in either leaves the pair
out, and is counted), the harness's metrics, cost and latency on those same pairs. Records in only one run
are counted and named, never silently dropped.

The difference in success comes with Newcombe's paired interval, the exact McNemar p-value (it uses only
the records whose outcome differs: won and lost), and the smallest difference these many records could
detect at 80 % power given how often the two runs disagree. The verdict reads all three and never
contradicts one: better or worse only where the interval leaves out 0 *and* p < 0.05 (on a small job the
two can disagree: "borderline"), and "too few records to tell" where no difference these records could
show would be detected.
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
    # None: too few records for one (repeated trials), or no spread to make one
    ci95: tuple[float, float] | None
    p_value: float | None  # None: too few records (repeated trials)
    mde: float | None  # smallest difference detectable at 80 % power; None: `mde_note` says why
    mde_note: str | None  # why there is no detectable difference: TOO_FEW, or NOTHING_VARIES
    verdict: str  # what the interval, p and detectable say together (`verdict()`)
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
ALPHA = 0.05
# Repeated trials compare records by a normal approximation of their differences' spread: below this many
# records it is not one (2 records gave "+0.0% (+0.0% to +0.0%)")
MIN_RECORDS_FOR_TRIALS = 10
# Fewer pairs than this could never show a difference: the exact test needs 6 records that differ, all one
# way, to reach p < 0.05 (2 x 0.5^6 = 0.031)
MIN_PAIRS = 6
TOO_FEW = "too few records"  # no difference up to the largest these records could show would be seen
NOTHING_VARIES = "nothing varies"  # every record came out the same in both runs, at 0 % or 100 %
VERDICTS = {
    "better": "the interval lies above 0 and p < 0.05",
    "worse": "the interval lies below 0 and p < 0.05",
    "borderline": "the interval and the test disagree (one says different, the other not): too close to call",
    "no clear difference": "the interval takes in 0 and p >= 0.05, on records enough to see the detectable "
    "difference",
    "too few records to tell": "these records could not show a difference at all (see detectable)",
    "no records both finished": "nothing to compare",
}


def verdict(
    difference: float, paired: int, ci95: tuple[float, float] | None, p: float | None, mde_note: str | None
) -> str:
    """One word for the comparison that agrees with its interval, its p-value and its detectable difference
    (VERDICTS says what each means). Before, "worse" stood beside p = 0.062 on a merged 20-record job."""
    if not paired:
        return "no records both finished"
    if p is None:
        return "too few records to tell"
    way, significant = ("better" if difference > 0 else "worse"), p < ALPHA
    if ci95 is None:  # no spread between records to draw an interval from: the test alone
        return way if significant and difference else "no clear difference"
    apart = ci95[0] > 0 or ci95[1] < 0
    if apart and significant:
        return way
    if apart or significant:
        return "borderline"
    return "too few records to tell" if mde_note == TOO_FEW else "no clear difference"


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
    discordance = _discordance(n, len(won) + len(lost), both + len(lost), both + len(won))
    mde, p = paired_mde(n, discordance), mcnemar(len(lost), len(won))
    note = None if mde is not None else NOTHING_VARIES if n >= MIN_PAIRS and discordance <= 0 else TOO_FEW
    return Paired(
        reference=reference,
        run=run,
        shared=len(shared),
        paired=n,
        both=both,
        neither=neither,
        won=won,
        lost=lost,
        difference=diff,
        ci95=(lo, hi),
        p_value=p,
        mde=mde,
        mde_note=note,
        verdict=verdict(diff, n, (lo, hi), p, note),
        **_sides([a[i] for i in done], [b[i] for i in done]),
        only_in_reference=[i for i in a if i not in b],
        only_in_run=[i for i in b if i not in a],
        unfinished=[i for i in shared if i not in finished],
    )


def _sides(ra: list[Result], rb: list[Result]) -> dict[str, Any]:
    """What both ways of pairing report alike, from the finished results they compare (one per record, or
    every trial): success, cost per result and per success, mean latency, the harness's metrics."""
    sa, sb = sum(1 for r in ra if r.success), sum(1 for r in rb if r.success)
    names = [k for k in dict.fromkeys(k for r in ra for k in r.metrics) if any(k in r.metrics for r in rb)]
    return {
        "success": Delta(sa / len(ra) if ra else None, sb / len(rb) if rb else None),
        "cost_per_record": Delta(_per(_cost(ra), len(ra)), _per(_cost(rb), len(rb))),
        "cost_per_success": Delta(_per(_cost(ra), sa), _per(_cost(rb), sb)),
        "latency_s": Delta(
            statistics.fmean(r.wall_seconds for r in ra) if ra else None,
            statistics.fmean(r.wall_seconds for r in rb) if rb else None,
        ),
        "metrics": {k: Delta(_metric(ra, k), _metric(rb, k)) for k in names},
        "cached": any(r.usage.cache_hits for r in (*ra, *rb)),
    }


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
    won = [i for i, d in zip(done, diffs, strict=True) if d > 0]
    lost = [i for i, d in zip(done, diffs, strict=True) if d < 0]
    ci, p, mde, note = _spread(diffs, won, lost)
    ra = [r for r in ref_rows if r.record_id in tb and outcome(r) in FINISHED]
    rb = [r for r in run_rows if r.record_id in ta and outcome(r) in FINISHED]
    shared = [i for i in ids_a if i in ids_b]
    return Paired(
        reference=reference,
        run=run,
        shared=len(shared),
        paired=n,
        both=sum(1 for d in diffs if d == 0),
        neither=0,
        won=won,
        lost=lost,
        difference=mean,
        ci95=ci,
        p_value=p,
        mde=mde,
        mde_note=note,
        verdict=verdict(mean, n, ci, p, note),
        **_sides(ra, rb),  # cost per record: per trial here
        only_in_reference=[i for i in ids_a if i not in ids_b],
        only_in_run=[i for i in ids_b if i not in ids_a],
        unfinished=[i for i in shared if i not in tb or i not in ta],
        method="paired-means",
    )


def _spread(
    diffs: list[float], won: list[str], lost: list[str]
) -> tuple[tuple[float, float] | None, float | None, float | None, str | None]:
    """Interval, p, detectable difference and why none, from the records' differences: by their spread (a
    normal approximation) from MIN_RECORDS_FOR_TRIALS records on; where they do not spread at all (every
    record moved alike), no interval and the exact sign test on the records that moved."""
    n = len(diffs)
    if n < MIN_RECORDS_FOR_TRIALS:
        return None, None, None, TOO_FEW
    mean = statistics.fmean(diffs)
    se = statistics.stdev(diffs) / math.sqrt(n)
    if not se:
        return None, mcnemar(len(lost), len(won)), None, NOTHING_VARIES
    ci = (max(-1.0, mean - Z95 * se), min(1.0, mean + Z95 * se))
    return ci, min(1.0, math.erfc(abs(mean) / se / math.sqrt(2))), (Z95 + Z80) * se, None


def best(runs: dict[str, list[Result]], rates: dict[str, float | None]) -> str | None:
    """The run with the highest success rate, where it is better than every other run on the records both
    finished (verdict "better"); else none. Before, one run alone at the top was "best", on one record."""
    known = {name: rate for name, rate in rates.items() if rate is not None and name in runs}
    if len(runs) < 2 or not known:
        return None
    leader = max(known, key=lambda name: known[name])
    if any(
        pair(other, rows, leader, runs[leader]).verdict != "better"
        for other, rows in runs.items()
        if other != leader
    ):
        return None
    return leader


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
