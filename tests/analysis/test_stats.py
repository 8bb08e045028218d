"""The comparison statistics against published values."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from runner.analysis.stats import (
    clustered_se,
    mcnemar,
    paired_difference,
    paired_mde,
    paired_records_needed,
    pass_at_k,
    pass_hat_k,
    wilson,
)


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


REFERENCE = json.loads((Path(__file__).parents[1] / "fixtures" / "stats_reference.json").read_text())


@pytest.mark.parametrize("case", REFERENCE["mcnemar_exact"], ids=lambda c: f"{c['only_a']}-{c['only_b']}")
def test_mcnemar_equals_statsmodels(case: dict[str, float]) -> None:
    assert mcnemar(int(case["only_a"]), int(case["only_b"])) == pytest.approx(case["p"], rel=1e-12)


@pytest.mark.parametrize("case", REFERENCE["wilson"], ids=lambda c: f"{c['k']}-{c['n']}")
def test_wilson_equals_statsmodels(case: dict[str, Any]) -> None:
    assert wilson(case["k"], case["n"]) == pytest.approx(tuple(case["ci"]), abs=1e-12)


def test_the_paired_difference_matches_the_published_example() -> None:
    # Fagerland, Lydersen & Laake, "Statistical Analysis of Contingency Tables" (2017), ch. 8, the paired
    # table [[59, 6], [16, 80]]: Newcombe square-and-add, estimate -0.0621 (95 % CI -0.1186 to -0.0046)
    d, lo, hi = paired_difference(59, 6, 16, 80)
    assert (d, lo, hi) == pytest.approx((-0.0621, -0.1186, -0.0046), abs=5e-5)
    # swapping the runs mirrors the interval
    assert paired_difference(59, 16, 6, 80) == pytest.approx((-d, -hi, -lo))


def test_the_paired_interval_stays_in_range_and_covers_the_estimate() -> None:
    for table in [(0, 0, 0, 5), (5, 0, 0, 0), (0, 10, 0, 0), (3, 4, 0, 1), (20, 1, 9, 30), (1, 0, 0, 0)]:
        d, lo, hi = paired_difference(*table)
        assert -1.0 <= lo <= d <= hi <= 1.0, table
    assert paired_difference(0, 0, 0, 0) == (0.0, -1.0, 1.0)
    assert paired_difference(10, 0, 0, 10)[1] < 0 < paired_difference(10, 0, 0, 10)[2]  # identical: 0 inside


def test_clustered_se_equals_statsmodels_cluster_robust() -> None:
    ref = REFERENCE["clustered"]
    assert clustered_se(ref["clusters"]) == pytest.approx(ref["se"], rel=1e-12)
    # one trial per record: the plain standard error of the mean (population variance / n)
    plain = [[1.0], [0.0], [1.0], [1.0]]
    assert clustered_se(plain) == pytest.approx(math.sqrt(0.75 * 0.25 / 4))
    # repeated identical trials add no information: the same error as one trial per record
    assert clustered_se([[1.0] * 3, [0.0] * 3, [1.0] * 3, [1.0] * 3]) == pytest.approx(clustered_se(plain))


def test_the_minimum_detectable_difference_inverts_the_sample_size() -> None:
    mde = paired_mde(200, 0.2)
    assert mde is not None and paired_records_needed(mde, 0.2) == pytest.approx(200, rel=1e-6)
    # Connor (1987)'s formula by hand: delta 0.1 with 20 % discordant pairs needs ~155 pairs
    assert paired_records_needed(0.1, 0.2) == pytest.approx(
        (1.959964 * math.sqrt(0.2) + 0.841621 * math.sqrt(0.19)) ** 2 / 0.01, rel=1e-5)
    assert paired_mde(400, 0.2) < mde  # more records, smaller detectable difference
    assert paired_mde(5, 0.2) is None and paired_mde(60, 0.0) is None


def test_pass_at_k_and_pass_hat_k() -> None:
    assert pass_at_k(5, 0, 1) == 0.0 and pass_at_k(5, 5, 3) == 1.0
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4) and pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)
    assert pass_hat_k(5, 2, 1) == pytest.approx(0.4) and pass_hat_k(5, 2, 2) == pytest.approx(1 / 10)
    assert pass_hat_k(5, 2, 3) == 0.0 and pass_hat_k(4, 4, 4) == 1.0
