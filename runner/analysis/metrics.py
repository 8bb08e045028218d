"""A run's numbers from its results: success and its interval, errors by cause, metrics, tokens, cost,
latency, trials. What the terminal summary, report.json and report.html all show (runner/report/build.py and
the report_* modules draw them; this module draws nothing)."""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from runner.analysis.stats import wilson
from runner.analysis.trials import repeated, summary
from runner.results.result import Earlier, Result, flaky, outcome

Attempt = Result | Earlier  # one attempt at a record trial: the result shown, or one a rerun replaced

CACHE_MARKED = {"cost_usd", "latency_p50_s", "latency_p95_s"}  # the cache's numbers where it answered


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in 0..1."""
    if not values:
        return 0.0
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def _cost_sum(attempts: list[Attempt], key: str) -> float | None:
    """The sum, or None (unknown) when an ok attempt's model has no known price."""
    if any(a.ok and getattr(a.usage, key) is None for a in attempts):
        return None
    return round(sum(float(getattr(a.usage, key) or 0) for a in attempts), 6)


def _bill(rows: list[Result]) -> list[Attempt]:
    """Every attempt the results stand for, those a rerun (--lf, --rerun-errors) replaced too: what was
    spent."""
    out: list[Attempt] = []
    for r in rows:
        out += [*r.earlier, r]
    return out


def metric_means(rows: list[Result]) -> dict[str, float | None]:
    """Each metric's mean over the ok records that have it (the harness's own scores)."""
    names = list(dict.fromkeys(k for r in rows for k in r.metrics))
    out: dict[str, float | None] = {}
    for k in names:
        vals = [v for r in rows if r.ok and (v := r.metrics.get(k)) is not None]
        out[k] = round(statistics.fmean(vals), 6) if vals else None
    return out


def run_metrics(rows: list[Result], reducer: str = "mean") -> dict[str, Any]:
    """A run's numbers (report.json). With repeated trials (epochs), success is over records: their trials
    reduced by `reducer`, with an interval clustered by record (runner/analysis/trials.py); `trials` has the
    rest. Success is None where no record finished (nothing measured, not 0 %); usage sums every attempt,
    those a rerun replaced too (the bill), latency the results shown."""
    ok = [r for r in rows if r.ok]
    lat = [r.wall_seconds for r in ok]
    bill = _bill(rows)
    kinds = Counter(outcome(r) for r in rows)
    decided = kinds["success"] + kinds["failure"]

    def total(key: str) -> int:
        return sum(int(getattr(a.usage, key)) for a in bill)

    calls = total("llm_calls")
    return {
        # records, and results: one per record, or one per trial with epochs (errors and the rest count those)
        "records": len({r.record_id for r in rows}),
        "results": len(rows),
        "ok": len(ok),
        "errors": kinds["error"],
        "cut": kinds["cut"],
        "successes": kinds["success"],
        "failures": kinds["failure"],
        "unscored": kinds["unscored"],
        # earlier attempts' results thrown away: their sandbox did not serve the whole record
        "discarded": sum(len(r.discarded) for r in rows),
        # results a rerun replaced (kept under each result's `earlier`), and records that failed, then passed
        "reruns": sum(len(r.earlier) for r in rows),
        "flaky": sum(1 for r in rows if flaky(r)),
        # fields the harness wrote that are not numbers at all (their mean leaves those records out)
        "unreadable": dict(
            Counter(f for r in rows for f, note in r.read_notes.items() if note.startswith("not a number"))
        ),
        "errors_by_kind": dict(Counter(str(r.error_kind) for r in rows if not r.ok)),
        # successes among the records the agent finished (errors and cut turns are shown beside, not in it)
        # ...
        "success_rate": kinds["success"] / decided if decided else None,
        "success_ci95": wilson(kinds["success"], decided) if decided else None,
        # ... and among every record, errors and cut turns counted as failures
        "success_rate_all": kinds["success"] / len(rows) if rows else None,
        "metrics": metric_means(rows),
        # every prompt token, then its split: uncached, read from and written to the provider's prompt cache
        "prompt_tokens": total("input_tokens") + total("cache_read_tokens") + total("cache_write_tokens"),
        "input_tokens": total("input_tokens"),
        "output_tokens": total("output_tokens"),
        "cost_usd": _cost_sum(bill, "cost_usd"),
        "input_cost_usd": _cost_sum(bill, "input_cost_usd"),
        "cache_read_tokens": total("cache_read_tokens"),
        "cache_write_tokens": total("cache_write_tokens"),
        "cache_saved_usd": round(sum(a.usage.cache_saved_usd for a in bill), 6),
        "batched_calls": total("batched_calls"),
        "batch_saved_usd": round(sum(a.usage.batch_saved_usd for a in bill), 6),
        "latency_p50_s": round(percentile(lat, 0.5), 4),
        "latency_p95_s": round(percentile(lat, 0.95), 4),
        "retries": total("retries"),
        "rate_limited": total("rate_limited"),
        "llm_calls": calls,
        "cache_hit_rate": total("cache_hits") / calls if calls else 0.0,
        **(_trials(rows, reducer) if repeated(rows) else {}),
    }


def _trials(rows: list[Result], reducer: str) -> dict[str, Any]:
    trials = summary(rows, reducer)
    rate, ci = trials.pop("headline")
    finished = trials["records"] > 0
    return {
        "success_rate": rate if finished else None,
        "success_ci95": ci if finished else None,
        "trials": trials,
    }
