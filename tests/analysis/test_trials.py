"""Repeated trials: reducers, the headline with its clustered interval, pass@k and pass^k over records,
flips, and the paired comparison of two runs' per-record shares."""

from __future__ import annotations

import pytest

from runner.analysis.paired import pair
from runner.analysis.stats import clustered_se, wilson
from runner.analysis.trials import effective_size, headline, reduce, summary
from runner.results.result import Result


def _rows(run: str, trials: dict[str, list[bool | None]]) -> list[Result]:
    """None: a trial that ended in an error (not an outcome of the agent)."""
    out = []
    for i, (rid, outcomes) in enumerate(trials.items()):
        for epoch, ok in enumerate(outcomes, start=1):
            out.append(Result(run=run, record_id=rid, index=i, epoch=epoch, status="error" if ok is None else "ok",
                              success=bool(ok), error_kind="provider_gave_up" if ok is None else None,
                              started_at="t", finished_at="t", wall_seconds=1.0))
    return out


TRIALS: dict[str, list[bool | None]] = {"a": [True, True, True], "b": [True, False, True], "c": [False, False, False],
                                        "d": [True, None, False]}


def test_reducers() -> None:
    assert [reduce([True, False, True], r) for r in ("mean", "all", "any", "at_least_2", "at_least_3")] == \
        pytest.approx([2 / 3, 0.0, 1.0, 1.0, 0.0])


def test_the_headline_and_its_interval_follow_the_reducer() -> None:
    rows = _rows("r", TRIALS)
    rate, (lo, hi) = headline(rows, "mean")
    assert rate == pytest.approx(6 / 11)  # finished trials only: d's error is left out
    assert lo < rate < hi
    assert headline(rows, "all") == (pytest.approx(1 / 4), pytest.approx(wilson(1, 4)))  # only a: every trial
    assert headline(rows, "any")[0] == pytest.approx(3 / 4)
    # every trial agreeing leaves no variance: the interval is one record's worth each, not a point
    rate, ci = headline(_rows("r", {"a": [True] * 3, "b": [True] * 3}), "mean")
    assert rate == 1.0 and ci == pytest.approx(wilson(2, 2))


def test_effective_size_discounts_trials_that_move_together() -> None:
    alike = [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]  # trials repeat their record
    mixed = [[1.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 1.0]]
    assert effective_size(alike) == pytest.approx(4)  # 12 trials worth 4 records
    assert effective_size(mixed) == pytest.approx(12)  # variation inside records: worth them all
    assert clustered_se(alike) > clustered_se(mixed)


def test_pass_at_k_pass_hat_k_and_flips_over_records() -> None:
    t = summary(_rows("r", TRIALS), "mean")
    assert t["trials_per_record"] == 3 and t["records"] == 4 and t["finished_trials"] == 11
    # a: 3/3, b: 2/3, c: 0/3, d: 1/2 (one error)
    assert t["pass_at_k"][1] == pytest.approx((1 + 2 / 3 + 0 + 1 / 2) / 4)
    assert t["pass_at_k"][3] == pytest.approx((1 + 1 + 0) / 3)  # d has 2 finished trials: left out of k=3
    assert t["pass_hat_k"][2] == pytest.approx((1 + 1 / 3 + 0 + 0) / 4)
    assert t["flip_share"] == pytest.approx(2 / 4)  # b and d disagree with themselves


def test_a_paired_comparison_with_trials_compares_each_record_s_share() -> None:
    ref = _rows("ref", {"a": [True, False], "b": [False, False], "c": [True, True], "x": [True, True]})
    run = _rows("run", {"a": [True, True], "b": [True, False], "c": [True, True], "y": [False, False]})
    c = pair("ref", ref, "run", run)
    assert c.method == "paired-means" and c.paired == 3 and c.won == ["a", "b"] and c.lost == []
    assert c.difference == pytest.approx((0.5 + 0.5 + 0) / 3)
    assert c.only_in_reference == ["x"] and c.only_in_run == ["y"]
    # three records are too few for an interval from their spread: none, and no verdict
    assert c.ci95 is None and c.p_value is None and c.verdict == "too few records to tell"
    many_ref = _rows("ref", {f"r{i}": [i % 2 == 0, False] for i in range(12)})
    many_run = _rows("run", {f"r{i}": [True, i % 3 == 0] for i in range(12)})
    c = pair("ref", many_ref, "run", many_run)
    assert c.ci95 is not None and c.ci95[0] < c.difference < c.ci95[1] and c.p_value is not None
