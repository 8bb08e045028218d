"""Call times as a histogram with logarithmic buckets: fixed size (it lives in the shared budget's array,
one per model), summed by every process at settle, and read as a difference between two moments, so
the throttle gets the median of exactly the calls that ended in its window, not of the records that
ended in it (a window's first records are its fastest: a conversation's calls all had to end).

Bucket i holds [FIRST * RATIO**i, FIRST * RATIO**(i+1)); the first holds everything shorter, the last
everything longer. At RATIO 1.25 a median is known within 12 %, finer than a window's noise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

BUCKETS = 48
FIRST = 0.01  # seconds: bucket 0's upper edge is FIRST * RATIO
RATIO = 1.25  # 48 buckets reach 0.01 * 1.25**48 = 450 s


def bucket(seconds: float) -> int:
    if seconds <= FIRST:
        return 0
    return min(BUCKETS - 1, int(math.log(seconds / FIRST) / math.log(RATIO)))


def since(now: Sequence[float], then: Sequence[float] | None) -> list[float]:
    """The calls counted between two readings of the same histogram."""
    if then is None:
        return list(now)
    return [a - b for a, b in zip(now, then, strict=True)]


def median(counts: Sequence[float]) -> float | None:
    """The median call time, geometric within its bucket (None for no calls)."""
    total = sum(counts)
    if total <= 0:
        return None
    half, seen = total / 2, 0.0
    for i, n in enumerate(counts):
        if n > 0 and seen + n >= half:
            share = (half - seen) / n
            return FIRST * RATIO ** (i + share)
        seen += n
    return FIRST * RATIO**BUCKETS
