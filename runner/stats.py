"""The statistics a comparison of two runs needs, in plain Python (no scipy for two formulas)."""

from __future__ import annotations

import math

Z95 = 1.959963984540054


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a success rate (good at small n and near 0 or 1, unlike p ± 2·se)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # at 0 or n successes the bound is exactly 0 or 1; floating point would leave 1e-16 off
    return (0.0 if successes == 0 else max(0.0, centre - half)), (1.0 if successes == n else min(1.0, centre + half))


def mcnemar(only_a: int, only_b: int) -> float:
    """Exact two-sided McNemar p-value for paired outcomes: only_a records succeeded in A alone, only_b
    in B alone. Records with the same outcome in both runs carry no information about a difference."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(only_a, only_b) + 1)) / 2 ** n
    return min(1.0, 2 * tail)
