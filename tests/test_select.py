"""Picking records: -k over ids, tags and fields, --ids, --lf (the last results that were not successes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.config import Config
from runner.errors import ConfigError
from runner.plan import make_plan
from runner.select import chosen, keyword
from tests.runs import TOY_PYTHON, finish, rows_of, start_run, toy_config

RECORDS = [("crm-7-00004", {"tags": ["refund", "hard"], "user": "Refund the Acme order"}),
           ("crm-7-00005", {"tags": ["refund"], "user": "Refund Globex"}),
           ("crm-7-00006", {"tags": ["quote"], "meta": {"size": "big"}})]


@pytest.mark.parametrize(("expr", "ids"), [
    ("refund", {"crm-7-00004", "crm-7-00005"}),
    ("refund and not hard", {"crm-7-00005"}),
    ("00006 or (refund and acme)", {"crm-7-00004", "crm-7-00006"}),
    ("BIG", {"crm-7-00006"}),  # case-insensitive, one level into a field's dict
    ("nothing-like-it", set()),
])
def test_k_matches_ids_tags_and_fields(expr: str, ids: set[str]) -> None:
    assert chosen(RECORDS, expr, None) == ids


def test_k_and_ids_together_and_a_bad_expression() -> None:
    assert chosen(RECORDS, "refund", ["crm-7-00005", "crm-7-00006"]) == {"crm-7-00005"}
    assert chosen(RECORDS, None, None) is None
    for bad in ("refund and", "(refund", "not", "refund (hard)", "__import__('os')"):
        with pytest.raises(ConfigError, match="pytest's -k"):
            keyword(bad)
    assert keyword("__import__")("x", {"note": "__import__"})  # words are data, never code
    assert not keyword("__import__")("x", {})


def test_the_plan_takes_only_what_was_chosen() -> None:
    cfg = Config(dataset="x.jsonl", harness={"kind": "python", "entrypoint": "m:f"},
                 runs=[{"name": "a"}, {"name": "b"}])
    ids = ["r1", "r2", "r3"]
    assert [(w.run, w.record_id) for w in make_plan(cfg, ids, chosen={"r2"})] == [("a", "r2"), ("b", "r2")]
    assert [(w.run, w.record_id) for w in make_plan(cfg, ids, chosen={("b", "r3")})] == [("b", "r3")]


@pytest.mark.local
def test_k_then_lf_runs_again_only_what_did_not_succeed(tmp_path: Path, local_bindir: str) -> None:
    records = [{"id": "r1"}, {"id": "r2"}, {"id": "boom", "do": "raise"}, {"id": "r3"}]
    cfg = toy_config(tmp_path, TOY_PYTHON, records)
    out = tmp_path / "out"
    code, log = finish(start_run(cfg, out, "--sandbox", "local", "-k", "r1 or boom", "--no-fail-on-error"))
    assert code == 0, log[-3000:]
    assert {r["record_id"] for r in rows_of(out, "a")} == {"r1", "boom"}
    first = {r["record_id"]: r["finished_at"] for r in rows_of(out, "a")}
    code, log = finish(start_run(cfg, out, "--sandbox", "local", "--lf", "--no-fail-on-error"))
    assert code == 0, log[-3000:]
    again = {r["record_id"]: r for r in rows_of(out, "a")}
    assert set(again) == {"r1", "boom"}  # --lf runs no record that never ran
    assert again["r1"]["finished_at"] == first["r1"]  # a success is kept as it was
    assert again["boom"]["finished_at"] != first["boom"] and again["boom"]["error_kind"] == "harness_error"
    assert json.loads((out / "manifest.json").read_text())["counts"]["a"] == 2


@pytest.mark.local
def test_maxfail_starts_no_more_records_and_exits_1(tmp_path: Path, local_bindir: str) -> None:
    records = [{"id": "boom", "do": "raise"}, *({"id": f"r{i}"} for i in range(6))]
    cfg = toy_config(tmp_path, TOY_PYTHON, records, extra="workers: 1")
    out = tmp_path / "out"
    code, log = finish(start_run(cfg, out, "--sandbox", "local", "-x", "--no-fail-on-error"))
    assert code == 1 and "stopped early (--maxfail 1)" in log, log[-3000:]
    # one label and one instruction, said alike (before: "INCOMPLETE (interrupted) ... run the same command
    # again", then "the same command without it runs the rest")
    assert "INCOMPLETE (stopped at --maxfail 1)" in log and "interrupted" not in log, log[-3000:]
    assert "run the same command again" not in log and log.count("without -x/--maxfail runs the rest") == 2
    assert [r["record_id"] for r in rows_of(out, "a")] == ["boom"]  # the first record failed: nothing after it
    code, log = finish(start_run(cfg, out, "--sandbox", "local", "--no-fail-on-error"))  # the rest, as it says
    assert code == 0 and len(rows_of(out, "a")) == len(records), log[-3000:]


@pytest.mark.local
def test_lf_asks_the_models_again_and_keeps_the_results_it_replaces(tmp_path: Path, local_bindir: str) -> None:
    """Before, --lf replayed the response cache: 14 calls answered at $0, the same failures back, the originals
    replaced (the run's cost fell from $0.1965 to $0.1902)."""
    from tests.runs import SAMPLE

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"dataset: {SAMPLE}\nproviders: sim\ncache_dir: {tmp_path / 'cache'}\nworkers: 2\n"
                   "runs:\n  - {name: mini, provider: openai, model: gpt-5.4-mini, sim_model: sim-mini}\n")
    out = tmp_path / "out"
    code, log = finish(start_run(cfg, out, "--sandbox", "local", "--limit", "10"))
    assert code == 0, log[-3000:]
    failed = {r["record_id"]: r for r in rows_of(out, "mini") if not r["success"]}
    assert failed, "sim-mini failed no record of these ten: pick others"
    cost = json.loads((out / "report.json").read_text())["runs"]["mini"]["cost_usd"]
    code, log = finish(start_run(cfg, out, "--sandbox", "local", "--limit", "10", "--lf"))
    assert code == 0, log[-3000:]
    assert f"--lf: {len(failed)} result(s) that did not succeed last time, the models asked again" in log
    again = {r["record_id"]: r for r in rows_of(out, "mini")}
    assert len(again) == 10
    for rid, before in failed.items():
        now = again[rid]
        assert now["usage"]["cache_hits"] == 0 and now["usage"]["llm_calls"] > 0  # asked, not replayed
        assert now["usage"]["cost_usd"] > 0
        assert [e["finished_at"] for e in now["earlier"]] == [before["finished_at"]]  # the first attempt kept
    report = json.loads((out / "report.json").read_text())["runs"]["mini"]
    assert report["cost_usd"] > cost and report["reruns"] == len(failed)  # both attempts are in the bill
