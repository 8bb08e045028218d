"""The forecast against real runs on the simulator: the default job (interactive and batch) and a user's
harness calling a model through the gateway; and the spending cap stopping a run and a higher one resuming it."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.runs import finish, start_run, toy_config

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "configs" / "default.yaml"
pytestmark = pytest.mark.docker


def _plan(cfg: Path, out: Path, *args: str) -> dict[str, Any]:
    p = subprocess.run([sys.executable, "-m", "runner", "plan", str(cfg), "--out", str(out), "--json", *args],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    doc: dict[str, Any] = json.loads(p.stdout)
    return doc


def _report(out: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((out / "report.json").read_text())
    return doc


def _rows(out: Path, run: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results" / f"{run}.jsonl").read_text().splitlines()]


def _close(report: dict[str, Any], tolerance: float = 0.15) -> None:
    """Each run's forecast within `tolerance` of what it spent, and what it spent within the forecast's band."""
    runs = report["forecast"]["runs"]
    assert runs
    for run, r in runs.items():
        forecast, spent = r["forecast"]["cost_usd"]["expected"], r["actual"]["cost_usd"]
        assert spent == pytest.approx(forecast, rel=tolerance), (run, forecast, spent)
        assert r["within"], (run, r)


def _quick(tmp_path: Path, **extra: Any) -> Path:
    """The default job, on the simulator without its response cache; its batches turn around in a fraction of a
    second."""
    cfg = yaml.safe_load(DEFAULT.read_text())
    cfg["dataset"] = str((DEFAULT.parent / cfg["dataset"]).resolve())
    cfg.update({"providers": "sim", "cache": False, **extra})
    cfg["batch"] = {"window_seconds": 0.2, "poll_min_seconds": 0.1, "poll_max_seconds": 0.5}
    cfg.setdefault("simulator", {})["batches"] = {"median_seconds": 0.2}
    path = tmp_path / "default.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_a_budget_at_half_the_forecast_stops_the_job_there_and_a_higher_one_finishes_it(tmp_path: Path,
                                                                                        sandbox_image: str) -> None:
    cfg, out = _quick(tmp_path), tmp_path / "out"
    plan = _plan(cfg, out, "--limit", "12")
    expected = plan["cost_expected_usd"]
    assert {r["source"] for r in plan["runs"]} == {"records"} and expected > 0
    cap = round(expected / 2, 4)
    code, log = finish(start_run(cfg, out, "--limit", "12", "--budget", str(cap)))
    assert code == 6, log[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    spent = manifest["spent"]["job"][0]
    # what it spent: within the cap, but for what the calls in flight cost over their reservations
    assert 0.5 * cap < spent <= cap * 1.05
    assert manifest["stopped_at_budget"].startswith("stopped at budget: $")
    assert manifest["complete"] is False
    recorded = sum(r["usage"]["cost_usd"] for run in manifest["counts"] for r in _rows(out, run))
    assert recorded <= spent  # no record half-counted: what a refused call cut is not recorded
    assert "stopped at budget" in (out / "report.html").read_text()
    code, log = finish(start_run(cfg, out, "--limit", "12", "--budget", str(round(expected * 4, 2))))
    assert code == 0, log[-3000:]
    for run in ("claude-sonnet", "gpt-large", "gpt-mini", "atlas"):
        ids = [r["record_id"] for r in _rows(out, run)]
        assert len(ids) == len(set(ids)) == 12
    _close(_report(out))  # the first invocation's forecast of the whole job, against the whole job


def test_the_forecast_of_the_default_job_in_batch_mode_is_its_cost_at_batch_prices(tmp_path: Path,
                                                                                  sandbox_image: str) -> None:
    cfg, out = _quick(tmp_path), tmp_path / "out"
    code, log = finish(start_run(cfg, out, "--runs", "claude-sonnet,gpt-mini", "--limit", "6", "--batch"))
    assert code == 0, log[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert {r["mode"] for r in manifest["forecasts"][0]["runs"]} == {"batch"}
    _close(_report(out))


def test_a_users_harness_is_forecast_from_a_pilot_of_a_few_of_its_records(tmp_path: Path,
                                                                          sandbox_image: str) -> None:
    """Its harness cannot foresee its calls: before any run the plan says so; after a pilot of 10 records, the
    rest is forecast from their mean, and the rest then costs what was forecast."""
    rng = random.Random(3)
    records = [{"id": f"r{i:02d}", "asks": rng.choice([1, 2, 3]), "text": "word " * rng.randint(200, 600)}
               for i in range(30)]
    cfg = toy_config(tmp_path, "  kind: python\n  entrypoint: toy.toyharness:ask_times\n  pythonpath: ["
                     f"{ROOT / 'tests' / 'harness'}]\n", records,
                     extra="providers: sim\ngateway: true\ncache: false\nconversation_timeout_seconds: 60")
    out = tmp_path / "out"
    before = _plan(cfg, out)
    assert [r["source"] for r in before["runs"]] == ["unknown"] and before["cost_expected_usd"] is None
    code, log = finish(start_run(cfg, out, "--limit", "10"))
    assert code == 0, log[-3000:]
    plan = _plan(cfg, out)
    run = plan["runs"][0]
    assert (run["source"], run["items"]) == ("measured", 20)
    pilot_cost = sum(r["usage"]["cost_usd"] for r in _rows(out, "a"))
    code, log = finish(start_run(cfg, out))
    assert code == 0, log[-3000:]
    rest = sum(r["usage"]["cost_usd"] for r in _rows(out, "a")) - pilot_cost
    assert rest == pytest.approx(run["cost_usd"]["cached"]["expected"], rel=0.15)
    assert run["cost_usd"]["cached"]["low"] <= rest <= run["cost_usd"]["cached"]["high"]
