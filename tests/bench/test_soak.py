"""The fault campaign's own bookkeeping (bench/soak.py): what it counts as lost, duplicated and differing, and
the verdict it writes. Its faults run in `make soak` and `make bench`."""

from __future__ import annotations

import json
from pathlib import Path

from bench.soak import FAULTS, Round, _summary, outcomes, render


def _write(out: Path, run: str, rows: list[tuple[str, int, str, bool | None]]) -> None:
    (out / "results").mkdir(parents=True, exist_ok=True)
    (out / "results" / f"{run}.jsonl").write_text("".join(
        json.dumps({"record_id": rid, "epoch": epoch, "status": status, "success": ok, "error_kind": None}) + "\n"
        for rid, epoch, status, ok in rows))


def test_a_repeated_trial_counts_as_a_duplicate_and_another_trial_does_not(tmp_path: Path) -> None:
    _write(tmp_path, "a", [("r1", 1, "ok", True), ("r1", 2, "ok", False), ("r2", 1, "ok", True),
                           ("r2", 1, "ok", True)])
    got, repeated = outcomes(tmp_path, ("a", "missing-run"))
    assert repeated == 1
    assert got == {("a", "r1", 1): ("ok", True, None), ("a", "r1", 2): ("ok", False, None),
                   ("a", "r2", 1): ("ok", True, None)}


def test_the_verdict_is_met_only_with_nothing_lost_repeated_changed_or_left() -> None:
    clean = Round("crm", seconds=60.0)
    clean.faults.update({"worker_kill": 2, "sigint_resume": 1})
    s = _summary([clean, Round("helpdesk", seconds=30.0)], seed=3, minutes=1, wall=95.0, items={"crm": 24,
                                                                                                "helpdesk": 60})
    text = render(s)
    assert "verdict: met" in text and "| worker_kill | 2 | 0 |" in text
    assert all(f"| {kind} |" in text for kind in FAULTS)
    bad = Round("crm", differing=1, notes=["('strong', 'r1', 1): clean ('ok', True, None), here ('error', None, "
                                            "'sandbox_lost')"])
    s = _summary([clean, bad], seed=3, minutes=1, wall=95.0, items={"crm": 24})
    assert "verdict: MISSED" in render(s) and "sandbox_lost" in render(s)


def test_a_directory_left_in_the_temporary_directory_misses_the_verdict() -> None:
    leaky = Round("crm", dirs_left=1, notes=["left: /tmp/pgsr-socket-f4befe7a-w2g1-3bcefc-qp1i9zqg"])
    text = render(_summary([leaky], seed=3, minutes=1, wall=95.0, items={"crm": 24}))
    assert "verdict: MISSED" in text and "**1** directories" in text and "pgsr-socket-f4befe7a" in text
