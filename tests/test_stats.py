"""The comparison statistics against published values."""

from __future__ import annotations

import pytest

from runner.stats import mcnemar, wilson


def test_wilson_matches_the_textbook_values() -> None:
    # Newcombe (1998), 81/263: 0.2553 .. 0.3662; and the edges stay inside 0..1
    lo, hi = wilson(81, 263)
    assert lo == pytest.approx(0.2553, abs=1e-4) and hi == pytest.approx(0.3662, abs=1e-4)
    assert wilson(0, 10)[0] == 0.0 and wilson(10, 10)[1] == 1.0 and wilson(0, 0) == (0.0, 1.0)
    lo, hi = wilson(10, 10)
    assert lo == pytest.approx(0.7225, abs=1e-4)


def test_mcnemar_exact() -> None:
    assert mcnemar(0, 0) == 1.0
    assert mcnemar(5, 5) == 1.0
    assert mcnemar(0, 6) == pytest.approx(2 / 64)  # six changes, all one way
    assert mcnemar(1, 9) == pytest.approx(2 * 11 / 1024)
    assert mcnemar(9, 1) == mcnemar(1, 9)
