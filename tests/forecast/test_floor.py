"""The floor: per budget, what its calls ask of each limit over the limit, less a full bucket's minute."""

from __future__ import annotations

from runner.config import Limits
from runner.forecast.floor import floor


def test_the_limit_that_needs_longest_binds() -> None:
    f = floor("openai", (3000.0, 9_000_000.0, 10_000.0), Limits(rpm=1000, itpm=2_000_000, otpm=None), "config")
    assert f.bound_by == "input tokens"
    assert f.seconds == (9_000_000 - 2_000_000) / 2_000_000 * 60  # 210 s; requests need (3000-1000)/1000 min = 120 s


def test_what_a_full_bucket_holds_costs_no_time_and_no_limit_binds_nothing() -> None:
    assert floor("k", (10.0, 100.0, 1.0), Limits(rpm=50), "config").seconds == 0.0
    none = floor("k", (10.0, 100.0, 1.0), Limits(), "none set")
    assert (none.seconds, none.bound_by) == (0.0, None)
