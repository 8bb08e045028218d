"""`runner show`: a record's outcome in every run and why, in the terminal (what report.html's drill-down
shows); `runner debug` ends with the same words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from click.testing import CliRunner

from runner.cli import cli
from runner.errors import ConfigError
from runner.results.result import Result, Usage, error_result

ANATOMY = {"turns": [{"turn": 1, "user": "Log a deal for Vertex Foods", "right": False, "expected": [
    {"tool": "search_accounts", "args": {"query": "Vertex Foods"}, "made": False},
    {"tool": "create_opportunity", "args": {"account_id": 2}, "made": True,
     "wrong_args": [{"arg": "account_id", "expected": 2, "got": 1}]}],
    "unexpected": [{"tool": "delete_contact", "args": {"contact_id": 9}, "ok": True, "writes": True}]}],
    "state": {"opportunities": {"changed": [{"id": 1001, "columns": {"account_id": {"expected": 2, "got": 1}}}],
                                "missing": [], "extra": [{"id": 1002, "name": "dup"}]}}}


def _ok(run: str, rid: str, success: bool, **output: Any) -> Result:
    return Result(run=run, record_id=rid, index=0, status="ok", success=success, started_at="t", finished_at="t",
                  wall_seconds=1.0, output={"transcript": [{"role": "user", "text": "Log a deal for Vertex Foods"}],
                                            "model_calls": [{"cached": True}, {"cached": False}], **output},
                  metrics={"state_match": float(success), "turns_used": 3.0}, usage=Usage(llm_calls=2),
                  groups={"difficulty": ["hard"]})


def _output(tmp_path: Path) -> Path:
    (tmp_path / "results").mkdir()
    rows = {"strong": [_ok("strong", "crm-7-00001", True), _ok("strong", "crm-7-00002", True)],
            "mini": [_ok("mini", "crm-7-00001", False, anatomy=ANATOMY), _ok("mini", "crm-7-00002", True)],
            "flaky": [error_result("flaky", "crm-7-00001", 0, "529 overloaded after 6 attempts",
                                   kind="provider_gave_up")]}
    for run, rs in rows.items():
        (tmp_path / "results" / f"{run}.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in rs))
    return tmp_path


def test_show_says_every_runs_outcome_and_why_the_failure_failed(tmp_path: Path) -> None:
    out = _output(tmp_path)
    res = CliRunner().invoke(cli, ["show", "crm-7-00001", str(out)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    text = res.output
    assert "\x1b[" not in text  # no colour codes into a pipe
    assert "user 1  Log a deal for Vertex Foods" in text and "(hard)" in text
    assert "strong: solved  state match 100.0%, turns used 3" in text  # a share as a percentage, a count as is
    assert "mini: failed" in text and "flaky: error (provider_gave_up)" in text
    assert "529 overloaded after 6 attempts" in text
    for said in ('not made: search_accounts({"query": "Vertex Foods"})',
                 "wrong arguments to create_opportunity: account_id expected 2, got 1",
                 'not expected (writes): delete_contact({"contact_id": 9})',
                 "opportunities row 1001 changed: account_id expected 2, got 1",
                 'opportunities row 1002 extra: {"id": 1002, "name": "dup"}',
                 "1 of 2 model call(s) replayed from the response cache"):
        assert said in text, said
    only = CliRunner().invoke(cli, ["show", "crm-7-00001", str(out), "--run", "strong"], env={"COLUMNS": "200"}).output
    assert "strong: solved" in only and "mini" not in only


def test_show_names_what_it_cannot_find(tmp_path: Path) -> None:
    out = _output(tmp_path)
    def refusal(*args: str) -> str:  # a ConfigError: `runner` prints its one line and exits 2 (runner.cli.main)
        res = CliRunner().invoke(cli, ["show", *args])
        assert isinstance(res.exception, ConfigError), res.output
        return str(res.exception)

    typo = refusal("crm-7-0001", str(out))
    assert "crm-7-0001: no result for this record" in typo and "did you mean crm-7-00001" in typo
    run = refusal("crm-7-00001", str(out), "--run", "weak")
    assert "--run weak: no such run" in run and "flaky, mini, strong" in run
    assert "no results here" in refusal("crm-7-00001", str(tmp_path / "nowhere"))


def test_show_names_a_flaky_record_and_the_attempt_a_rerun_replaced(tmp_path: Path) -> None:
    (tmp_path / "results").mkdir()
    before = _ok("mini", "crm-7-00001", False, anatomy=ANATOMY)
    after = _ok("mini", "crm-7-00001", True).model_copy(update={"attempt": 2}).replacing(before)
    (tmp_path / "results" / "mini.jsonl").write_text(after.model_dump_json() + "\n")
    res = CliRunner().invoke(cli, ["show", "crm-7-00001", str(tmp_path)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "solved (flaky: it failed before, and succeeded asked again)" in res.output
    assert "attempt 1, replaced by a rerun: failed" in res.output
