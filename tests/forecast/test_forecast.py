"""A job's forecast from its records, from what an earlier output measured, or none (a user's harness)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runner.config import Config, load_config
from runner.forecast.forecast import Foresight, forecast, gather
from runner.harness.crm.estimate import expected_calls
from runner.plan import make_plan
from runner.results.result import Result, Usage
from tests.runs import SAMPLE, toy_config

DEFAULT = Path(__file__).resolve().parents[2] / "configs" / "default.yaml"


def _default(tmp_path: Path, **kw: Any) -> Config:
    cfg = load_config(str(DEFAULT))
    return cfg.model_copy(update={"output_dir": tmp_path / "out", **kw})


def _records() -> list[dict[str, Any]]:
    return [json.loads(line) for line in SAMPLE.read_text().splitlines()]


def test_from_the_records_each_turn_is_a_call_per_gold_call_and_one_to_answer(tmp_path: Path) -> None:
    cfg = _default(tmp_path)
    f = forecast(cfg, gather(cfg))
    gold = sum(len(t.get("gold_calls") or []) + 1 for r in _records() for t in r["turns"])
    by_run = {r.run: r for r in f.runs}
    assert {r.source for r in f.runs} == {"records"} and all(r.items == 60 for r in f.runs)
    assert by_run["gpt-large"].need().calls == gold
    assert by_run["atlas"].need().calls == 2 * gold  # the student proposes, the teacher reviews
    assert [p.role for p in by_run["atlas"].parts] == ["agent", "teacher"]
    for r in f.runs:
        low, mid, high = (r.cost(band=b) for b in ("low", "expected", "high"))
        assert low is not None and mid is not None and high is not None and low < mid < high
        half = r.cost("cached") / 2  # type: ignore[operator]
        if {p.provider for p in r.parts} == {"openai"}:
            assert r.cost("batch") == pytest.approx(half)
        else:  # Claude's cache entries are written for an hour in batches, at twice the input price
            assert half < r.cost("batch") < 2 * half  # type: ignore[operator]
        assert r.cost("interactive") > r.cost("cached")  # type: ignore[operator]
    assert not (tmp_path / "out").exists()  # a plan writes nothing
    assert f.floor is not None and f.floor.key == "openai" and f.floor.bound_by == "input tokens"


def _result(run: str, rid: str, calls: list[dict[str, Any]], cost: float | None = 0.01, latency: float = 2.0) -> str:
    usage = Usage(llm_calls=len(calls) or 3, cost_usd=cost, latency_seconds=latency, input_tokens=1000,
                  output_tokens=100)
    r = Result(run=run, record_id=rid, index=0, status="ok", success=True, usage=usage, started_at="t", finished_at="t",
               output={"model_calls": calls} if calls else {"answer": 1})
    return r.model_dump_json() + "\n"


def test_a_pilot_scales_the_rest_by_how_its_records_compared_with_their_foresight(tmp_path: Path) -> None:
    """Two records measured at exactly twice the prompt and three times the output their foresight says: the
    other 58 are forecast so too."""
    cfg = _default(tmp_path).model_copy(update={"runs": [_default(tmp_path).runs[1]]})  # gpt-large alone
    run = cfg.runs[0]
    pilot = _records()[:2]
    lines = []
    for rec in pilot:
        calls = [{"role": "agent", "input_tokens": 2 * c.prompt_tokens, "cache_read_tokens": 0,
                  "cache_write_tokens": 0, "output_tokens": 3 * c.answer_tokens, "cached": False}
                 for c in expected_calls(rec, run)]
        lines.append(_result(run.name, rec["id"], calls))
    (tmp_path / "out" / "results").mkdir(parents=True)
    (tmp_path / "out" / "results" / f"{run.name}.jsonl").write_text("".join(lines))
    f = forecast(cfg, gather(cfg))
    r = f.runs[0]
    assert (r.source, r.items) == ("measured", 58)
    rest = [rec for rec in _records()[2:]]
    foreseen = [c for rec in rest for c in expected_calls(rec, run)]
    n = r.need()
    assert n.calls == pytest.approx(len(foreseen))
    assert n.prompt_tokens == pytest.approx(2 * sum(c.prompt_tokens for c in foreseen))
    assert n.cache_read_tokens == 0  # split as measured: nothing was read from a cache
    assert n.output_tokens == pytest.approx(3 * sum(c.answer_tokens for c in foreseen))
    assert r.seconds_per_call == pytest.approx(2.0 * 2 / sum(len(expected_calls(rec, run)) for rec in pilot))


def test_a_users_harness_is_unknown_until_measured_then_its_mean_per_record(tmp_path: Path) -> None:
    records = [{"id": f"r{i}", "n": i} for i in range(10)]
    cfg = load_config(str(toy_config(tmp_path, "  kind: python\n  entrypoint: toy.toyharness:play\n", records)))
    cfg = cfg.model_copy(update={"output_dir": tmp_path / "out"})
    f = forecast(cfg, gather(cfg))
    assert [r.source for r in f.runs] == ["unknown"] and f.wall_seconds is None and f.cost() is None
    assert "runner run --limit 10 --runs a" in f.notes[0]
    out = cfg.output_dir.resolve() / "results"
    out.mkdir(parents=True)
    (out / "a.jsonl").write_text("".join(_result("a", f"r{i}", [], cost=0.02 + 0.01 * i) for i in range(3)))
    f = forecast(cfg, gather(cfg))
    r = f.runs[0]
    assert (r.source, r.items) == ("measured", 7)
    assert r.cost() == pytest.approx(7 * 0.03)
    low, high = r.cost(band="low"), r.cost(band="high")
    assert low is not None and high is not None and low < 0.21 < high
    assert r.need().calls == pytest.approx(7 * 3)


def test_the_plan_starts_the_longest_records_first_and_keeps_dataset_positions(tmp_path: Path) -> None:
    cfg = _default(tmp_path)
    records = {r["id"]: r for r in _records()}
    length = Foresight(cfg, records).work()
    assert length is not None
    plan = make_plan(cfg, list(records), work=length)
    firsts = [w.record_id for w in plan if w.run == "claude-sonnet"]
    assert [length[r] for r in firsts] == sorted(length.values(), reverse=True)
    order = list(records)
    assert all(w.index == order.index(w.record_id) for w in plan)
    toy = load_config(str(toy_config(tmp_path, "  kind: python\n  entrypoint: toy.toyharness:play\n", [{"id": "x"}])))
    assert Foresight(toy, {"x": {"id": "x"}}).work() is None


def test_per_item_demand_is_keyed_by_the_runs_budgets(tmp_path: Path) -> None:
    cfg = _default(tmp_path)
    f = forecast(cfg, gather(cfg))
    per = f.per_item(lambda provider, model: provider)
    assert set(per["atlas"]) == {"openai", "anthropic"} and set(per["claude-sonnet"]) == {"anthropic"}
    calls, inp, out = per["gpt-large"]["openai"]
    assert calls == pytest.approx(f.runs[1].need().calls / 60) and inp > 1000 * calls and out > 0
