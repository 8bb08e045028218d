"""The batch-mode benchmark's section: its verdicts from a result (its runs happen in `make bench`)."""

from __future__ import annotations

from typing import Any

from bench.batch import render


def _result(concurrency: int, share: float, mib: float | None) -> dict[str, Any]:
    run = {"wall_s": 100.0, "conversations": 16, "errors": 0, "cost_usd": 1.0, "calls": 80, "solved": 12,
           "samples": [], "batches": {"batches_submitted": 7, "requests_answered": 80}}
    memory = {"total": (mib or 0) * concurrency, "in_flight": concurrency} if mib is not None else None
    return {"n": 4, "concurrency": concurrency, "scale": 1 / 60, "median_s": 10, "p95_s": 60,
            "interactive": run, "batch": {**run, "cost_usd": share}, "memory": memory, "mib_per_waiting": mib,
            "cost_share": share}


def test_the_verdicts_follow_the_targets() -> None:
    assert "**0.500** (target 0.5: met)" in render(_result(1024, 0.5, 7.5))
    assert "7.5 MiB each** (target 8 at 1,024: met)" in render(_result(1024, 0.5, 7.5))
    assert "(target 8 at 1,024: missed)" in render(_result(1024, 0.5, 9.0))
    assert "not judged: 128 waiting at the fullest sample, below 1,024" in render(_result(128, 0.5, 9.0))
    assert "(target 0.5: missed)" in render(_result(1024, 0.6, 7.0))
    assert "no sample with conversations waiting" in render(_result(8, 0.5, None))
