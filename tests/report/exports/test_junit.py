"""`runner report --junit`: the XML read back by junitparser, the JUnit reader of EnricoMi's
publish-unit-test-result-action (GitHub's most used test-report action), as that action reads it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import junitparser
from junitparser import Error, Failure, JUnitXml, Skipped

from runner.report.build import analyse
from runner.report.exports.junit import junit_xml
from tests.report.exports.outputs import PLAN, write_output


def _suites(xml: bytes, tmp_path: Path) -> dict[str, junitparser.TestSuite]:
    path = tmp_path / "junit.xml"
    path.write_bytes(xml)
    doc = JUnitXml.fromfile(str(path))
    return {s.name: s for s in doc}


def test_a_testsuite_per_run_and_a_testcase_per_record_each_outcome_as_junit_says_it(tmp_path: Path) -> None:
    out = write_output(tmp_path / "out")
    suites = _suites(junit_xml(analyse(out), "t"), tmp_path)
    assert list(suites) == ["strong", "mini"]
    mini = suites["mini"]
    cases = {c.name: c for c in mini}
    assert list(cases) == [f"rec-{i}" for i in range(1, 7)]
    assert {c.classname for c in mini} == {"mini"}  # a CI groups the records by run
    kinds = {name: type(c.result[0]).__name__ if c.result else "passed" for name, c in cases.items()}
    assert kinds == {"rec-1": "passed", "rec-2": "Failure", "rec-3": "Skipped", "rec-4": "Error",
                     "rec-5": "Failure", "rec-6": "passed"}
    assert (mini.tests, mini.failures, mini.errors, mini.skipped) == (6, 2, 1, 1)
    # a failure says why, in `runner show`'s words: the wrong argument and the row that differs
    failure = cases["rec-2"].result[0]
    assert isinstance(failure, Failure)
    assert "wrong arguments to create_contact: account_id expected 3, got 2" in (failure.text or "")
    assert "contacts row 1001 changed" in (failure.text or "")
    # a cut turn is an error of its own kind, not a failure of the agent
    cut = cases["rec-4"].result[0]
    assert isinstance(cut, Error) and cut.type == "cut:max_tokens" and "output limit" in (cut.message or "")
    assert isinstance(cases["rec-3"].result[0], Skipped)
    # an error names its cause and carries the harness's traceback
    error = {c.name: c for c in suites["strong"]}["rec-4"].result[0]
    assert isinstance(error, Error) and error.type == "harness_error"
    assert "line 12, in run" in (error.text or "") and error.message == "harness_error: KeyError: 'account_id'"
    # the metrics and the model usage of each record, where a CI shows a test's output
    assert "state_match 100.0%" in (cases["rec-1"].system_out or "")
    assert "3 model call(s)" in (cases["rec-1"].system_out or "")


def test_repeated_trials_are_one_testcase_saying_how_many_passed(tmp_path: Path) -> None:
    plan = {"r": ["success", "success", "success", "success", "failure", "success", "error", "failure", "failure"]}
    out = write_output(tmp_path / "out", plan, epochs=3)
    cases = {c.name: c for c in _suites(junit_xml(analyse(out), "t"), tmp_path)["r"]}
    assert not cases["rec-1"].result and "3 of 3 trials passed" in (cases["rec-1"].system_out or "")
    flaky = cases["rec-2"].result[0]  # mean: a record passes when every finished trial passed
    assert isinstance(flaky, Failure) and flaky.message == "2 of 3 trials passed"
    worst = cases["rec-3"].result[0]
    assert isinstance(worst, Failure) and worst.message == "0 of 3 trials passed; error (harness_error)"


def test_a_reducer_that_asks_for_any_trial_passes_a_flaky_record(tmp_path: Path) -> None:
    out = write_output(tmp_path / "out", {"r": ["failure", "success"]}, epochs=2)
    manifest = (out / "manifest.json").read_text().replace('"epochs": 2', '"epochs": 2, "reducer": "any"')
    (out / "manifest.json").write_text(manifest)
    case = next(iter(_suites(junit_xml(analyse(out), "t"), tmp_path)["r"]))
    assert not case.result and "1 of 2 trials passed" in (case.system_out or "")


def test_runner_report_writes_junit_and_the_summary_and_appends_it_to_the_step_summary(tmp_path: Path) -> None:
    out = write_output(tmp_path / "out")
    step = tmp_path / "step-summary.md"
    step.write_text("earlier step\n")
    env = {**os.environ, "GITHUB_STEP_SUMMARY": str(step), "COLUMNS": "200"}
    p = subprocess.run([sys.executable, "-m", "runner", "report", str(out), "--junit", str(tmp_path / "j.xml"),
                        "--summary", str(tmp_path / "s.md")], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    suites = _suites((tmp_path / "j.xml").read_bytes(), tmp_path)
    assert sum(s.tests for s in suites.values()) == sum(len(v) for v in PLAN.values())
    summary = (tmp_path / "s.md").read_text()
    assert step.read_text() == "earlier step\n" + summary + "\n"  # appended, as GitHub's steps do
    assert "wrote $GITHUB_STEP_SUMMARY" in p.stderr
