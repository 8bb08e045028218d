"""`runner report A B`: records paired by id, changed outcomes listed, live calls compared apart from
cached ones, different datasets refused. Before, a fully cached rerun showed a cost and latency
'change' for identical behaviour and two datasets were compared without a word."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from runner.errors import ConfigError
from runner.report.compare import compare
from runner.results.result import Result, Usage


def _result(rid: str, success: bool, *, cached: bool = False) -> Result:
    usage = Usage(llm_calls=4, cache_hits=4 if cached else 0, cost_usd=0.0 if cached else 0.02)
    return Result(run="r", record_id=rid, index=0, status="ok", success=success, started_at="t", finished_at="t",
                  wall_seconds=0.009 if cached else 2.0, usage=usage, metrics={"state_match": float(success)})


def _out(path: Path, rows: list[Result], dataset: str = "d1", mode: str = "real") -> Path:
    (path / "results").mkdir(parents=True)
    (path / "results" / "r.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in rows))
    (path / "manifest.json").write_text(json.dumps({"dataset_sha256": dataset, "mode": mode}))
    return path


def test_a_cached_rerun_shows_no_cost_or_latency_change(tmp_path: Path) -> None:
    rows = [_result(f"c{i}", i % 3 != 0) for i in range(9)]
    a = _out(tmp_path / "a", rows)
    b = _out(tmp_path / "b", [_result(r.record_id, bool(r.success), cached=True) for r in rows])
    console = Console(record=True, width=200)
    r = compare(a, b, console=console)["runs"]["r"]
    assert r["won"] == r["lost"] == [] and r["p_value"] == 1.0 and r["difference"] == 0.0
    assert r["cached"] is True  # its cost and latency columns say so
    live = r["live"]
    assert live["cost_per_live_call_usd"]["a"] == pytest.approx(0.005) and live["cost_per_live_call_usd"]["b"] is None
    assert live["cost_per_live_call_usd"]["delta"] is None and live["latency_p50_live_s"]["delta"] is None
    text = console.export_text()
    assert "not comparable" in text and "cost/record (cache)" in text


def test_changed_outcomes_are_listed_with_a_paired_test(tmp_path: Path) -> None:
    a = _out(tmp_path / "a", [_result("x", True), _result("y", False)] + [_result(f"s{i}", False) for i in range(8)])
    b = _out(tmp_path / "b", [_result("x", False), _result("y", True)] + [_result(f"s{i}", True) for i in range(8)]
             + [_result("new", True)])
    console = Console(record=True, width=200)
    r = compare(a, b, console=console)["runs"]["r"]
    assert r["lost"] == ["x"] and sorted(r["won"]) == sorted(["y", *(f"s{i}" for i in range(8))])
    assert (r["paired"], r["only_in_run"], r["only_in_reference"]) == (10, ["new"], [])
    assert r["p_value"] == pytest.approx(2 * (1 + 10) / 1024)  # 9 one way, 1 the other: P(X <= 1), twice
    lo, hi = r["ci95"]
    assert r["difference"] == pytest.approx(0.8) and lo < 0.8 < hi
    text = console.export_text()
    assert "r: 1 now fail: x" in text and "9 now succeed" in text and "1 record(s) only in r (left out): new" in text


def test_every_metric_is_compared_on_the_records_both_outputs_have(tmp_path: Path) -> None:
    """The issue's case: A has 60 records, B the first 30 with the same outcomes. Before, success used the
    shared 30 and the other metrics A's 60 against B's 30 (state_match 0.6667 -> 0.6333, delta -0.033)."""
    rows = [_result(f"c{i:02d}", i % 3 != 0 if i < 30 else True) for i in range(60)]
    a = _out(tmp_path / "a", rows)
    b = _out(tmp_path / "b", rows[:30])
    r = compare(a, b, console=Console(record=True, width=200))["runs"]["r"]
    assert r["paired"] == 30 and len(r["only_in_reference"]) == 30 and r["only_in_run"] == []
    m = r["metrics"]["state_match"]
    assert m["reference"] == m["run"] == pytest.approx(20 / 30) and m["difference"] == 0.0
    assert r["success"]["difference"] == 0.0 and r["cost_per_record"]["difference"] == 0.0


def test_the_comparison_is_written_into_b_s_report(tmp_path: Path) -> None:
    a = _out(tmp_path / "a", [_result(f"c{i}", i % 2 == 0) for i in range(10)])
    b = _out(tmp_path / "b", [_result(f"c{i}", True) for i in range(10)])
    done = subprocess.run([sys.executable, "-m", "runner", "report", str(a), str(b)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    page = (b / "report.html").read_text()
    assert f"Against the earlier output {a}" in page and 'class="pick won"' in page
    assert json.loads((b / "report.json").read_text())["comparisons"] == []  # one run: nothing inside the job


def test_different_datasets_are_refused_unless_allowed_and_the_cli_says_where_it_writes(tmp_path: Path) -> None:
    a = _out(tmp_path / "a", [_result("x", True)], dataset="d1")
    b = _out(tmp_path / "b", [_result("x", True)], dataset="d2", mode="sim")
    with pytest.raises(ConfigError, match="different datasets"):
        compare(a, b, console=Console(record=True))
    assert compare(a, b, allow_different_datasets=True, console=Console(record=True))["same_dataset"] is False
    done = subprocess.run([sys.executable, "-m", "runner", "report", str(a), str(b)], capture_output=True, text=True)
    assert done.returncode == 2 and "different datasets" in done.stderr
    done = subprocess.run([sys.executable, "-m", "runner", "report", str(a), str(b), "--allow-different-datasets"],
                          capture_output=True, text=True)
    assert done.returncode == 0 and f"wrote {b / 'compare.json'}" in done.stdout
    assert "B ran on the simulator" in done.stdout
    assert json.loads((b / "compare.json").read_text())["simulated"] == {"a": False, "b": True}
