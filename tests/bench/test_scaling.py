"""bench.scaling's slots section: the top level's repeated runs are shown, not only their median."""

from __future__ import annotations

from typing import Any

from bench.scaling import render_slots


def _row(c: int, speedup: float, **extra: Any) -> dict[str, Any]:
    parts = {"runner": 10.0, "postgres": 5.0, "simulator": 6.0, "engine": 3.0, "other": 1.0}
    return {"C": c, "layout": "4 x 16", "runner_conv_s": 1.0, "runner_p50": 1.3, "runner_p95": 1.6,
            "speedup": speedup, "target": 0.9 * c, "met": speedup >= 0.9 * c, "cpu_ms": 25.0, "cpu_parts_ms": parts,
            "cpu_utilisation": 0.6, "call_ms": 210.0, "replay_ms": 5.0, **extra}


def test_the_top_levels_runs_are_listed_with_how_many_met() -> None:
    s = {"p50_ms": 200, "seeds_conv_s": 0.8, "seeds_n": 16,
         "rows": [_row(1, 1.0), _row(64, 58.0, speedups=[55.1, 58.0, 59.9])]}
    text = render_slots(s)
    assert "C=64 ran 3 times: 55.1x, 58.0x, 59.9x" in text and "(2 of 3 at or above the target)" in text
    one = render_slots({**s, "rows": [_row(1, 1.0), _row(64, 58.0, speedups=[58.0])]})
    assert "ran" not in one.split("|")[-1]
