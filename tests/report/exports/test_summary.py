"""`runner report --summary`: the markdown a CI job's page shows, against snapshots read by eye once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from runner.report.build import analyse
from runner.report.compare import compare
from runner.report.exports.summary import summary_markdown
from tests.report.exports.outputs import PLAN, write_output

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"


def _matches(snapshot: str, text: str) -> None:
    """Equal to the committed snapshot; REGENERATE=1 rewrites it (then read the diff before committing)."""
    path = SNAPSHOTS / snapshot
    if os.environ.get("REGENERATE"):
        path.write_text(text)
    assert text == path.read_text(), f"{snapshot} differs; REGENERATE=1 rewrites it:\n{text}"


def test_the_summary_of_an_output_with_every_outcome(tmp_path: Path) -> None:
    out = write_output(tmp_path / "out")
    _matches("summary.md", summary_markdown(analyse(out), "pgsandbox-runner: out"))


def test_the_summary_against_a_baseline_output_compares_each_run_with_itself(tmp_path: Path) -> None:
    before = write_output(tmp_path / "before", {"mini": ["success", "success", "success", "failure", "failure",
                                                         "failure"]})
    now = write_output(tmp_path / "now", {"mini": PLAN["mini"]})
    doc = compare(before, now)
    text = summary_markdown(analyse(now), "pgsandbox-runner: now", doc).replace(str(tmp_path), "TMP")
    _matches("summary-baseline.md", text)


def test_repeated_trials_get_their_table(tmp_path: Path) -> None:
    out = write_output(tmp_path / "out", {"r": ["success", "success", "failure", "failure", "success", "success"]},
                       epochs=2, mode="real")
    text = summary_markdown(analyse(out), "t")
    assert "### Repeated trials" in text and "| 2 x 3 records |" in text and "simulated" not in text


def test_runner_report_a_b_writes_b_s_summary_with_the_comparison(tmp_path: Path) -> None:
    before = write_output(tmp_path / "before", {"mini": ["success"] * 6})
    now = write_output(tmp_path / "now", {"mini": PLAN["mini"]})
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    p = subprocess.run([sys.executable, "-m", "runner", "report", str(before), str(now), "--summary",
                        str(tmp_path / "s.md")], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    text = (tmp_path / "s.md").read_text()
    assert text.startswith(f"## pgsandbox-runner: {now}\n")
    assert f"### Against the earlier output {before}, each run against itself" in text
    # how it compares, by how much and how sure first; then the pairs and the rates
    assert "| mini | too few records to tell | -50.0% (" in text and "| 0/2 | 4 | 100.0% -> 50.0% |" in text


def test_summary_dash_is_standard_output(tmp_path: Path) -> None:
    out = write_output(tmp_path / "out", {"r": ["success", "failure"]})
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    p = subprocess.run([sys.executable, "-m", "runner", "report", str(out), "--json", "--summary", "-"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    report, markdown = p.stdout.split("\n## ", 1)  # report.json, then the summary
    assert json.loads(report)["runs"]["r"]["records"] == 2
    assert markdown.startswith(f"pgsandbox-runner: {out}") and "| r | 2 | 50.0%" in markdown
