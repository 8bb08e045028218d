"""The statistics a comparison of two runs needs, in plain Python (no scipy for two formulas)."""

from __future__ import annotations

import math

Z95 = 1.959963984540054


def wilson(successes: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a success rate (good at small n and near 0 or 1, unlike p ± 2·se)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # at 0 or n successes the bound is exactly 0 or 1; floating point would leave 1e-16 off
    return (0.0 if successes == 0 else max(0.0, centre - half)), (
        1.0 if successes == n else min(1.0, centre + half)
    )


def mcnemar(only_a: int, only_b: int) -> float:
    """Exact two-sided McNemar p-value for paired outcomes: only_a records succeeded in A alone, only_b
    in B alone. Records with the same outcome in both runs carry no information about a difference."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(only_a, only_b) + 1)) / 2**n
    return min(1.0, 2 * tail)


Z80 = 0.8416212335729143  # one-sided: 80 % power


def paired_difference(
    both: int, only_first: int, only_second: int, neither: int, z: float = Z95
) -> tuple[float, float, float]:
    """p_first - p_second for two success rates measured on the same records, with Newcombe's (1998)
    method 10 interval: the two Wilson intervals combined, corrected for the pairs' correlation ("square
    and add"). Good coverage at small n and near 0 or 1, and never outside -1..1, unlike the Wald interval."""
    n = both + only_first + only_second + neither
    if n == 0:
        return 0.0, -1.0, 1.0
    p1, p2 = (both + only_first) / n, (both + only_second) / n
    l1, u1 = wilson(both + only_first, n, z)
    l2, u2 = wilson(both + only_second, n, z)
    margins = (both + only_first) * (only_second + neither) * (both + only_second) * (only_first + neither)
    cross = both * neither - only_first * only_second
    # the correlation's numerator, shrunk towards 0 by n/2 on the positive side (Newcombe's continuity choice)
    c = cross - n / 2 if cross > n / 2 else min(cross, 0)
    phi = c / math.sqrt(margins) if margins else 0.0
    d = p1 - p2
    lower = d - math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    upper = d + math.sqrt(max(0.0, (p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2))
    return d, max(-1.0, lower), min(1.0, upper)


def paired_records_needed(
    delta: float, discordant: float, z_alpha: float = Z95, z_beta: float = Z80
) -> float:
    """Records a paired comparison needs to detect a difference `delta` in success (McNemar, two-sided 5 %,
    80 % power) when a share `discordant` of records differ in outcome between the runs (Connor 1987)."""
    return (
        z_alpha * math.sqrt(discordant) + z_beta * math.sqrt(max(0.0, discordant - delta**2))
    ) ** 2 / delta**2


def paired_mde(n: int, discordant: float) -> float | None:
    """The smallest difference in success n paired records detect at 80 % power, given the share of
    records whose outcome differs between the two runs; None when no difference up to that share can be
    (too few records) or nothing varies. Solved from `paired_records_needed` by bisection: it falls as
    delta grows, and delta can never exceed the discordant share."""
    if n <= 0 or discordant <= 0 or paired_records_needed(discordant, discordant) > n:
        return None
    lo, hi = 0.0, discordant
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if paired_records_needed(mid, discordant) > n else (lo, mid)
    return hi


def clustered_se(clusters: list[list[float]]) -> float:
    """Standard error of the mean of every value, the values grouped in clusters (a record's repeated
    trials): sqrt(sum over clusters of (sum of deviations from the grand mean)^2) / N ("Adding Error Bars to
    Evals", Miller 2024, eq. 4, with no small-sample correction). With one value per cluster it is the usual
    sqrt(sum((x - mean)^2)) / N."""
    values = [v for c in clusters for v in c]
    if not values:
        return 0.0
    mean = sum(values) / len(values)
    return math.sqrt(sum(sum(v - mean for v in c) ** 2 for c in clusters)) / len(values)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chance that at least one of k trials drawn from n (c of them successes) succeeds, the unbiased
    estimator of Chen et al. (2021): 1 - C(n-c, k) / C(n, k)."""
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Chance that all of k trials drawn from n succeed (tau-bench's pass^k, consistency): C(c, k) /
    C(n, k)."""
    return math.comb(c, k) / math.comb(n, k)
