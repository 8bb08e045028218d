"""Two runs compared record by record: the verdict agrees with its interval and its p-value, small jobs say
they cannot tell, "detectable" says why it has no value, and "best" needs a run better than every other."""

from __future__ import annotations

import itertools

import pytest

from runner.analysis.paired import ALPHA, NOTHING_VARIES, TOO_FEW, best, pair
from runner.results.result import Result


def _runs(outcomes: dict[str, list[bool]], epochs: int = 1) -> dict[str, list[Result]]:
    return {run: [Result(run=run, record_id=f"r{i:03d}", index=i, epoch=e, status="ok", success=ok, started_at="t",
                         finished_at="t") for i, ok in enumerate(rows) for e in range(1, epochs + 1)]
            for run, rows in outcomes.items()}


def _table(both: int, won: int, lost: int, neither: int) -> tuple[list[bool], list[bool]]:
    """The reference's and the run's outcomes for a 2x2 table of pairs."""
    ref = [True] * both + [False] * won + [True] * lost + [False] * neither
    run = [True] * both + [True] * won + [False] * lost + [False] * neither
    return ref, run


def test_worse_beside_p_0_062_is_now_borderline() -> None:
    """The study's merged 20-record job: 5 records lost, none won. Newcombe's interval leaves out 0, the exact
    McNemar p is 0.0625: the verdict was "worse"."""
    ref, run = _table(15, 0, 5, 0)
    runs = _runs({"ref": ref, "run": run})
    c = pair("ref", runs["ref"], "run", runs["run"])
    assert c.ci95 is not None and c.ci95[1] < 0 and c.p_value == pytest.approx(0.0625)
    assert c.verdict == "borderline"


def test_no_verdict_contradicts_its_interval_or_its_p_value() -> None:
    """Every 2x2 table of up to 16 pairs."""
    seen = set()
    for both, won, lost, neither in itertools.product(range(7), range(7), range(7), range(4)):
        if not both + won + lost + neither:
            continue
        ref, run = _table(both, won, lost, neither)
        runs = _runs({"ref": ref, "run": run})
        c = pair("ref", runs["ref"], "run", runs["run"])
        assert c.ci95 is not None and c.p_value is not None
        lo, hi = c.ci95
        seen.add(c.verdict)
        if c.verdict == "better":
            assert lo > 0 and c.p_value < ALPHA, (both, won, lost, neither)
        elif c.verdict == "worse":
            assert hi < 0 and c.p_value < ALPHA, (both, won, lost, neither)
        elif c.verdict == "no clear difference":
            assert lo <= 0 <= hi and c.p_value >= ALPHA, (both, won, lost, neither)
            assert c.mde is not None or c.mde_note == NOTHING_VARIES, (both, won, lost, neither)
        elif c.verdict == "too few records to tell":
            assert c.mde is None and c.mde_note == TOO_FEW and c.p_value >= ALPHA, (both, won, lost, neither)
        else:
            assert c.verdict == "borderline" and (lo > 0 or hi < 0) != (c.p_value < ALPHA)
    assert seen == {"better", "worse", "no clear difference", "too few records to tell", "borderline"}


def test_two_records_with_trials_say_they_cannot_tell() -> None:
    """--epochs on 2 records gave "+0.0% (+0.0% to +0.0%)", an interval of no width."""
    runs = _runs({"ref": [True, False], "run": [True, False]}, epochs=3)
    c = pair("ref", runs["ref"], "run", runs["run"])
    assert c.method == "paired-means" and c.paired == 2
    assert c.ci95 is None and c.p_value is None and c.mde is None and c.mde_note == TOO_FEW
    assert c.verdict == "too few records to tell"


def test_trials_that_do_not_spread_give_no_interval_but_an_exact_test() -> None:
    alike = _runs({"ref": [True] * 12, "run": [True] * 12}, epochs=2)
    c = pair("ref", alike["ref"], "run", alike["run"])
    assert c.ci95 is None and c.mde_note == NOTHING_VARIES and c.verdict == "no clear difference"
    moved = _runs({"ref": [False] * 12, "run": [True] * 12}, epochs=2)  # every record +100 points
    c = pair("ref", moved["ref"], "run", moved["run"])
    assert c.ci95 is None and c.p_value is not None and c.p_value < ALPHA and c.verdict == "better"


def test_detectable_says_why_it_has_no_value() -> None:
    few = _runs({"ref": [True, True, True], "run": [True, True, False]})
    c = pair("ref", few["ref"], "run", few["run"])
    assert c.mde is None and c.mde_note == TOO_FEW and c.verdict == "too few records to tell"
    perfect = _runs({"ref": [True] * 200, "run": [True] * 200})  # nothing to detect with: every record alike
    c = pair("ref", perfect["ref"], "run", perfect["run"])
    assert c.mde is None and c.mde_note == NOTHING_VARIES and c.verdict == "no clear difference"
    plenty = _runs({"ref": [i % 2 == 0 for i in range(60)], "run": [i % 3 == 0 for i in range(60)]})
    c = pair("ref", plenty["ref"], "run", plenty["run"])
    assert c.mde is not None and c.mde_note is None


def test_best_is_a_run_better_than_every_other_not_the_top_of_one_record() -> None:
    one = _runs({"a": [True], "b": [False]})
    assert best(one, {"a": 1.0, "b": 0.0}) is None  # before: "a (best)", on one record
    clear = _runs({"a": [True] * 40, "b": [i % 2 == 0 for i in range(40)], "c": [i % 4 == 0 for i in range(40)]})
    assert best(clear, {"a": 1.0, "b": 0.5, "c": 0.25}) == "a"
    close = _runs({"a": [True] * 40, "b": [True] * 39 + [False], "c": [False] * 40})
    assert best(close, {"a": 1.0, "b": 39 / 40, "c": 0.0}) is None  # not better than b
    assert best(_runs({"a": [True] * 40}), {"a": 1.0}) is None  # one run: nothing to be best among
