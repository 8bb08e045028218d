"""Report numbers on a fixture result set; the HTML parses and holds charts and the drill-down."""

from __future__ import annotations

import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from runner.analysis.metrics import run_metrics
from runner.report.build import load_runs, print_summary, write_reports
from runner.report.compare import compare
from runner.report.lazy import unpack
from runner.results.result import Result, Usage, flaky
from runner.results.sink import ResultSink


def _row(cid: str, success: bool, *, status: str = "ok", wall: float = 1.0, cost: float = 0.01,
         difficulty: str = "easy", tags: list[str] | None = None, cache_hits: int = 0) -> Result:
    ok = status == "ok"
    output = {"transcript": [{"role": "user", "text": "Add <b>Ava</b>"},
                             {"role": "assistant", "text": "", "tool_calls": [{"id": "1", "name": "search_accounts",
                                                                               "args": {"query": "Acme"}}]},
                             {"role": "tool",
                              "results": [{"id": "1", "content": "{\"ok\": true}", "is_error": False}]}]}
    metrics = {"state_match": float(success), "tool_selection": 1.0 if success else 0.5}
    return Result(run="r", record_id=cid, index=0, status=status, success=success and ok, wall_seconds=wall,
                  started_at="t", finished_at="t", error=None if ok else "timeout: x",
                  error_kind=None if ok else "timeout", output=output if ok else None,
                  metrics=metrics if ok else {}, groups={"difficulty": [difficulty], "tag": tags or ["add_contact"]},
                  usage=Usage(cost_usd=cost, input_tokens=100, output_tokens=10, retries=1, llm_calls=4,
                              cache_hits=cache_hits))


ROWS = [_row("a", True, wall=1.0), _row("b", True, wall=2.0, difficulty="hard", tags=["create_quote"]),
        _row("c", False, wall=3.0, difficulty="hard"), _row("d", False, status="error", wall=0, cache_hits=4)]


@pytest.fixture
def out(tmp_path: Path) -> Path:
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "r.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in ROWS))
    return tmp_path


def test_metrics_are_right() -> None:
    m = run_metrics(ROWS)
    assert m["records"] == 4 and m["ok"] == 3 and m["errors"] == 1 and m["cut"] == 0
    assert m["errors_by_kind"] == {"timeout": 1}
    # 2 successes, 1 failure: the error (a time limit) is not the agent's failure; beside it, all records
    assert m["success_rate"] == pytest.approx(2 / 3) and m["success_rate_all"] == 0.5
    assert (m["successes"], m["failures"]) == (2, 1)
    assert m["metrics"]["tool_selection"] == pytest.approx((1 + 1 + 0.5) / 3)  # errors have no scores
    assert m["metrics"]["state_match"] == pytest.approx(2 / 3)
    assert m["latency_p50_s"] == 2.0 and m["latency_p95_s"] == pytest.approx(2.9)
    assert m["cost_usd"] == pytest.approx(0.04) and m["input_tokens"] == 400
    assert m["cache_hit_rate"] == pytest.approx(4 / 16)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)


def test_html_and_json_reports(out: Path) -> None:
    j, h = write_reports(out)
    doc = json.loads(j.read_text())
    assert doc["runs"]["r"]["groups"]["difficulty"] == {"easy": [1, 2], "hard": [1, 2]}
    assert doc["runs"]["r"]["groups"]["tag"] == {"add_contact": [1, 3], "create_quote": [1, 1]}
    page = h.read_text()
    p = _Tags()
    p.feed(page)
    assert p.tags.count("svg") >= 3 and len(_index(page)) == 4  # every record in the list the page draws
    # self-contained: nothing fetched (the inline script draws and filters the records)
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', page) and "<script src" not in page
    bodies = "".join(unpack(page))  # each record's body, packed: drawn when it opens
    assert len(unpack(page)) == 4 and "&lt;b&gt;Ava&lt;/b&gt;" in bodies and "search_accounts" in bodies  # escaped


def test_results_read_once_serve_the_table_and_the_reports(out: Path) -> None:
    runs = load_runs(out)
    for f in (out / "results").glob("*.jsonl"):  # what is given is what is reported: nothing read again
        f.write_text("")
    console = Console(record=True, width=200)
    assert print_summary(out, console, runs=runs)["r"]["records"] == 4 and "50.0%" in console.export_text()
    j, _ = write_reports(out, runs)
    assert json.loads(j.read_text())["runs"]["r"]["records"] == 4


def test_terminal_table_and_compare(out: Path, tmp_path: Path) -> None:
    console = Console(record=True, width=200)
    print_summary(out, console)
    assert "50.0%" in console.export_text()
    other = tmp_path / "other"
    (other / "results").mkdir(parents=True)
    (other / "results" / "r.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in ROWS[:2]))
    doc = compare(out, other, console=Console(record=True, width=200))
    r = doc["runs"]["r"]
    assert (r["paired"], r["success"]["reference"], r["success"]["run"]) == (2, 1.0, 1.0)  # a and b, in both
    # the harness's own metrics compare too, on the same records (before: A's mean over all its records)
    assert r["metrics"]["state_match"]["difference"] == 0.0


def test_a_harness_whose_calls_the_runner_did_not_see_shows_no_usage_columns(tmp_path: Path) -> None:
    rows = [Result(run="r", record_id=str(i), index=i, status="ok", success=bool(i % 2), started_at="t",
                   finished_at="t", metrics={"state_match": 1.0}, groups={"first_tool": ["add_note"]},
                   output={"overall_success": bool(i % 2)}) for i in range(4)]
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "r.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in rows))
    _, h = write_reports(tmp_path)
    summary = h.read_text().split('<table id="summary">')[1].split("</table>")[0]
    assert "state match" in summary and "cost" not in summary and "input_tokens" not in summary
    console = Console(record=True, width=200)
    print_summary(tmp_path, console)
    text = console.export_text()
    assert "cost $" not in text and "50.0%" in text


def test_a_failed_records_drill_down_names_the_wrong_argument_and_the_differing_row(tmp_path: Path) -> None:
    from runner.report.html import render

    anatomy = {"turns": [{"turn": 1, "user": "Log a deal for Vertex Foods", "right": False, "expected": [
        {"tool": "search_accounts", "args": {"query": "Vertex Foods"}, "made": False},
        {"tool": "create_opportunity", "args": {"account_id": 2}, "made": True, "ok": True,
         "wrong_args": [{"arg": "account_id", "expected": 2, "got": 1}]}], "unexpected": []}],
        "state": {"opportunities": {"missing": [], "extra": [], "changed": [
            {"id": 1001, "columns": {"account_id": {"expected": 2, "got": 1}}}]}}}
    failed = _row("c", False).model_copy(update={"output": {**(_row("c", False).output or {}), "anatomy": anatomy}})
    drill = "".join(unpack(render("t", {"r": run_metrics([failed])}, {"r": [failed]})))
    assert "why it failed" in drill and "not made: <code>search_accounts" in drill
    assert "<b>account_id</b> expected 2, got 1" in drill  # in the call, and in the row of opportunities
    assert drill.count("<b>account_id</b> expected 2, got 1") == 2 and "<th colspan=\"3\">opportunities</th>" in drill


def test_a_simulated_run_says_so_in_the_terminal_the_json_and_the_html(out: Path) -> None:
    (out / "manifest.json").write_text(json.dumps({"mode": "sim"}))
    console = Console(record=True, width=200)
    print_summary(out, console)
    j, h = write_reports(out)
    assert "simulated" in console.export_text() and json.loads(j.read_text())["simulated"] is True
    assert 'id="simulated"' in h.read_text()
    (out / "manifest.json").write_text(json.dumps({"mode": "real"}))
    j, h = write_reports(out)
    assert json.loads(j.read_text())["simulated"] is False and 'id="simulated"' not in h.read_text()


def test_success_rates_carry_a_95_percent_interval(out: Path) -> None:
    j, h = write_reports(out)
    r = json.loads(j.read_text())["runs"]["r"]
    lo, hi = r["success_ci95"]
    # 2 of the 3 records the agent finished (the fourth is an error: shown beside, not counted as a failure);
    # Wilson's 95 % interval for 2/3, as statsmodels' proportion_confint(2, 3, method="wilson") gives it
    assert lo < r["success_rate"] < hi and r["success_rate"] == pytest.approx(2 / 3)
    assert (round(lo, 3), round(hi, 3)) == (0.208, 0.939)
    assert '<span class="ci">21%-94%</span>' in h.read_text() and r["success_rate_all"] == 0.5


def test_the_terminal_table_stays_readable_at_80_columns(out: Path) -> None:
    console = Console(record=True, width=80, force_terminal=True, color_system=None)
    print_summary(out, console)
    text = console.export_text()
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "…" not in text  # no cell cut short: columns that do not fit are left out and named
    assert "50.0%" in text and "errors" in text and "not shown at this width" in text


def test_atlas_steps_show_the_proposal_the_verdict_and_what_ran() -> None:
    from runner.report.html import render

    steps = [{"turn": 0, "step": 0, "verdict": "revise", "guidance": "look the account up first",
              "proposed": {"text": "", "calls": [{"name": "update_account", "args": {"account_id": 1}}]},
              "executed": {"text": "", "calls": [{"name": "search_accounts", "args": {"query": "Harbor"}}]}},
             {"turn": 0, "step": 1, "verdict": "approve", "guidance": None,
              "proposed": {"text": "Done.", "calls": []}, "executed": {"text": "Done.", "calls": []}}]
    r = _row("a", True).model_copy(update={"output": {"steps": steps}})
    html = "".join(unpack(render("t", {"r": run_metrics([r])}, {"r": [r]})))
    table = html.split('<table class="steps">')[1].split("</table>")[0]
    assert "update_account(" in table and "search_accounts(" in table and "says: Done." in table
    assert '<td class="revise" data-label="teacher">revise - look the account up first</td>' in table
    assert ">approve<" in table


def test_a_large_job_keeps_every_record_whole_and_the_page_draws_them_as_they_open() -> None:
    """Before: past 2,000 results a success showed its metrics only, and still 10.1 MB for 1,800 results were
    parsed into the page at load. Now every body is kept, compressed, outside the DOM until its record opens."""
    from runner.report.html import render
    from runner.report.lazy import CHUNK

    rows = [_row(f"s{i:03d}", i % 4 != 0) for i in range(CHUNK * 2 + 7)]
    page = render("t", {"r": run_metrics(rows)}, {"r": rows})
    bodies = unpack(page)
    assert len(bodies) == len(rows) and all("&lt;b&gt;Ava&lt;/b&gt;" in b for b in bodies)  # successes too
    assert [row[0] for row in _index(page)] == [r.record_id for r in rows]
    assert page.count('class="bodies"') == 3  # packed CHUNK records at a time
    assert "&lt;b&gt;Ava&lt;/b&gt;" not in page  # not in the page itself: it is parsed only when opened
    packed = sum(len(part.split("</script>")[0]) for part in page.split('class="bodies">')[1:])
    assert packed < sum(map(len, bodies)) / 4  # gzip, then base64


def _index(page: str) -> list[list[Any]]:
    """The record list the page's script draws (runner/report/records.py)."""
    data = page.split('<script type="application/json" id="record-index">')[1].split("</script>")[0]
    return json.loads(data)  # type: ignore[no-any-return]


def test_reports_are_rewritten_only_when_the_results_changed(out: Path) -> None:
    """A resume that had nothing left to do keeps the reports (their charts cost most of its time); any
    new or rerun result makes them current again."""
    from runner.report.build import reports_current

    runs = load_runs(out)
    assert not reports_current(out, runs)  # never written
    write_reports(out, runs)
    assert reports_current(out, runs)
    rerun = {name: [r.model_copy(update={"attempt": r.attempt + 1}) if i == 0 else r for i, r in enumerate(rows)]
             for name, rows in runs.items()}
    assert not reports_current(out, rerun)
    (out / "report.html").unlink()
    assert not reports_current(out, runs)


def test_the_discarded_and_unreadable_results_are_counted_in_the_report(tmp_path: Path) -> None:
    ok = Result(run="a", record_id="r1", index=0, status="ok", success=True, started_at="t", finished_at="t",
                discarded=["sandbox_lost: attempt 1"], read_notes={"metrics.score (score)": "not a number: 'x'"})
    m = run_metrics([ok])
    assert m["discarded"] == 1 and m["unreadable"] == {"metrics.score (score)": 1}


def _job(tmp_path: Path, rates: dict[str, list[bool]], compare_to: str | None = None) -> Path:
    (tmp_path / "results").mkdir()
    for run, outcomes in rates.items():
        rows = [Result(run=run, record_id=f"c{i:02d}", index=i, status="ok", success=s, started_at="t",
                       finished_at="t", wall_seconds=1.0 + s, usage=Usage(llm_calls=2, cost_usd=0.01),
                       metrics={"state_match": float(s)}) for i, s in enumerate(outcomes)]
        (tmp_path / "results" / f"{run}.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in rows))
    manifest = {"runs": [{"name": n} for n in rates], **({"compare_to": compare_to} if compare_to else {})}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    return tmp_path


def test_every_run_is_compared_with_the_reference_inside_the_job(tmp_path: Path) -> None:
    base = [i % 2 == 0 for i in range(40)]  # 20 of 40
    better = [True] * 36 + [False] * 4  # 36 of 40: wins 18, loses 2
    out = _job(tmp_path, {"zeta-baseline": base, "atlas": better, "same": base}, compare_to=None)
    console = Console(record=True, width=220)
    print_summary(out, console)
    text = console.export_text()
    # runs in the config's order (not alphabetical), the first the reference, the best marked
    assert text.index("zeta-baseline") < text.index("atlas") < text.index("same")
    assert "against zeta-baseline" in text and "atlas (best)" in text
    doc = json.loads(write_reports(out)[0].read_text())
    assert doc["reference"] == "zeta-baseline"
    atlas, same = doc["comparisons"]
    assert (atlas["run"], len(atlas["won"]), len(atlas["lost"]), atlas["paired"]) == ("atlas", 18, 2, 40)
    assert atlas["difference"] == pytest.approx(0.4) and atlas["ci95"][0] > 0 and atlas["p_value"] < 0.001
    assert atlas["cost_per_success"]["reference"] == pytest.approx(0.4 / 20)
    assert atlas["cost_per_success"]["run"] == pytest.approx(0.4 / 36)
    assert atlas["latency_s"]["difference"] == pytest.approx(0.4)
    assert same["difference"] == 0.0 and same["won"] == same["lost"] == [] and same["mde"] is not None
    assert "better" in text and "no clear difference" in text
    page = (out / "report.html").read_text()
    assert 'aria-label="difference in success against the reference"' in page and "Against zeta-baseline" in page


def test_compare_to_chooses_the_reference(tmp_path: Path) -> None:
    out = _job(tmp_path, {"a": [True, False], "b": [True, True], "c": [False, False]}, compare_to="b")
    doc = json.loads(write_reports(out)[0].read_text())
    assert doc["reference"] == "b" and [c["run"] for c in doc["comparisons"]] == ["a", "c"]


def test_run_colours_belong_to_the_run_name() -> None:
    from runner.report.charts import run_colors

    one = run_colors(["gpt-mini", "atlas", "claude-sonnet"])
    assert one == run_colors(["claude-sonnet", "gpt-mini", "atlas"])  # not the order
    assert run_colors(["atlas", "x"])["atlas"] == run_colors(["atlas", "y"])["atlas"] == one["atlas"]
    names = [f"run-{i}" for i in range(12)]
    assert len(set(run_colors(names).values())) == 12  # distinct within one report


def test_answers_from_the_cache_are_marked_and_tokens_in_counts_every_prompt_token(tmp_path: Path) -> None:
    out = _job(tmp_path, {"a": [True, False], "b": [True, True]})
    path = out / "results" / "b.jsonl"
    rows = [Result.model_validate_json(line) for line in path.read_text().splitlines()]
    for r in rows:  # b answered from the cache; its prompts mostly read from the provider's prompt cache
        r.usage = Usage(llm_calls=2, cache_hits=2, cost_usd=0.0, input_tokens=100, cache_read_tokens=900)
    path.write_text("".join(r.model_dump_json() + "\n" for r in rows))
    console = Console(record=True, width=250)
    metrics = print_summary(out, console)
    text = console.export_text()
    assert metrics["b"]["prompt_tokens"] == 2000 and metrics["b"]["input_tokens"] == 200
    assert "from the response cache: b 100% of model calls" in text and "0.0000*" in text
    assert "0.0200*" not in text  # a's cost is its own
    page = write_reports(out)[1].read_text()
    assert 'id="cached"' in page and "200 new + 1.8k read" in page


def test_piped_output_takes_its_width_from_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = _job(tmp_path, {"a": [True, False], "b": [True, True]})
    monkeypatch.setenv("COLUMNS", "80")
    console = Console(record=True, file=io.StringIO())  # not a terminal, as in `runner run | tee`
    print_summary(out, console)
    assert max(len(line) for line in console.export_text().splitlines()) <= 80
    monkeypatch.delenv("COLUMNS")
    wide = Console(record=True, file=io.StringIO())
    print_summary(out, wide)
    assert wide.width >= 150  # no COLUMNS: wide, the rest of the columns in report.html


def test_report_wide_shows_every_column_and_json_is_report_json(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from runner.cli import cli

    out = _job(tmp_path, {"a": [True, False], "b": [True, True]})
    narrow = CliRunner().invoke(cli, ["report", str(out)], env={"COLUMNS": "60"})
    assert narrow.exit_code == 0 and "not shown at this width" in narrow.output
    wide = CliRunner().invoke(cli, ["report", str(out), "--wide"], env={"COLUMNS": "60"})
    assert wide.exit_code == 0 and "not shown at this width" not in wide.output
    assert "p95 s" in wide.output and "p95 s" not in narrow.output.split("not shown at this width")[0]
    doc = CliRunner().invoke(cli, ["report", str(out), "--json"], env={"COLUMNS": "60"})
    assert doc.exit_code == 0
    assert json.loads(doc.output) == json.loads((out / "report.json").read_text())
    assert json.loads(doc.output)["runs"]["b"]["success_rate"] == 1.0


def test_a_run_with_no_finished_record_has_no_rate_and_none_is_best_on_one_record(tmp_path: Path) -> None:
    """Before: "0.0% (0%-100%)" for a run whose every result errored, and "best" on a single record."""
    out = _job(tmp_path, {"solo": [True], "other": [False]})
    errored = [_row("c00", False, status="error").model_copy(update={"run": "broken"})]
    (out / "results" / "broken.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in errored))
    console = Console(record=True, width=250)
    metrics = print_summary(out, console)
    text = console.export_text()
    assert metrics["broken"]["success_rate"] is None and metrics["broken"]["success_ci95"] is None
    assert "none finished" in text and "0.0% (0%-100%)" not in text
    assert "(best)" not in text  # 1 of 1 against 0 of 1 is no evidence
    page = write_reports(out)[1].read_text()
    assert "none finished" in page and 'class="run best"' not in page


def test_with_trials_the_columns_count_records_and_trials_apart(tmp_path: Path) -> None:
    """--epochs 3 on 12 records: the "records" column said 36."""
    (tmp_path / "results").mkdir()
    rows = [Result(run="r", record_id=f"c{i:02d}", index=i, epoch=e, status="ok", success=(i + e) % 3 != 0,
                   started_at="t", finished_at="t") for i in range(12) for e in (1, 2, 3)]
    (tmp_path / "results" / "r.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in rows))
    console = Console(record=True, width=250)
    m = print_summary(tmp_path, console)["r"]
    assert (m["records"], m["results"]) == (12, 36)
    text = console.export_text()
    header = next(line for line in text.splitlines() if "records" in line and "trials" in line)
    row = next(line for line in text.splitlines() if line.startswith("│ r "))
    cells = [c.strip() for c in row.split("│")[2:4]]
    assert cells == ["12", "36"] and "errored trials" in header
    page = write_reports(tmp_path)[1].read_text()
    assert "<th>trials</th>" in page.split('<table id="summary">')[1].split("</table>")[0]


def test_rerun_results_keep_what_they_replaced_and_a_failure_then_success_is_flaky(tmp_path: Path) -> None:
    """--lf's reruns replaced the originals: the run's cost fell, and a flaky record could not be told apart."""
    first = [_row("a", False, cost=0.01), _row("b", False, cost=0.01), _row("c", True, cost=0.01)]
    again = [_row("a", True, cost=0.02).model_copy(update={"attempt": 2}),
             _row("b", False, cost=0.02).model_copy(update={"attempt": 2})]
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "r.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in first + again))
    sink = ResultSink(tmp_path, ["r"])
    sink.finalize({"a": 0, "b": 1, "c": 2})
    rows = {r.record_id: r for r in load_runs(tmp_path)["r"]}
    assert [e.success for e in rows["a"].earlier] == [False] and rows["a"].success and flaky(rows["a"])
    assert not flaky(rows["b"]) and not rows["c"].earlier
    console = Console(record=True, width=250)
    m = print_summary(tmp_path, console)["r"]
    assert (m["flaky"], m["reruns"]) == (1, 2) and m["cost_usd"] == pytest.approx(0.07)  # every attempt paid
    assert m["success_rate"] == pytest.approx(2 / 3)  # the latest attempt counts
    assert "flaky" in console.export_text()


def test_at_80_columns_the_comparison_keeps_its_verdict_difference_and_p(tmp_path: Path) -> None:
    """Before, p and the verdict were the first columns dropped at 80 columns."""
    out = _job(tmp_path, {"atlas-teacher-student": [True] * 40, "gpt-large-baseline": [i % 2 == 0 for i in range(40)]})
    console = Console(record=True, width=80, force_terminal=True, color_system=None)
    print_summary(out, console)
    text = console.export_text()
    table = text[text.index("against atlas-teacher-student"):]
    header = next(line for line in table.splitlines() if "verdict" in line)
    assert "difference" in header and " p " in header
    assert "better" in table or "worse" in table
    assert all(len(line) <= 80 for line in text.splitlines())


def test_the_forest_plot_of_a_comparison_with_an_earlier_output_says_each_run_is_against_itself(
        tmp_path: Path) -> None:
    """It said "against claude-sonnet in A" for every run."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = _job(tmp_path / "a", {"claude-sonnet": [True] * 20, "gpt-mini": [i % 2 == 0 for i in range(20)]})
    b = _job(tmp_path / "b", {"claude-sonnet": [i % 3 != 0 for i in range(20)], "gpt-mini": [True] * 20})
    (b / "compare.json").write_text(json.dumps(compare(a, b, console=Console(file=io.StringIO()))))
    page = write_reports(b)[1].read_text()
    assert "against the same run in" in page and "against claude-sonnet in A" not in page


def test_batch_mode_claims_no_saving_before_a_batch_answered(out: Path) -> None:
    """It said "$2.3122 saved" after 0 batches: the saving is what the calls batches answered were spared."""
    (out / "manifest.json").write_text(json.dumps({"batch_runs": ["r"], "batches": {"batches_submitted": 0}}))
    console = Console(record=True, width=250)
    print_summary(out, console)
    text = console.export_text()
    assert "nothing saved" in text and "$0.0400 saved" not in text  # not the runs' whole cost
    path = out / "results" / "r.jsonl"
    rows = [r.model_copy(update={"usage": r.usage.model_copy(update={"batched_calls": 3, "batch_saved_usd": 0.005})})
            for r in load_runs(out)["r"]]
    path.write_text("".join(r.model_dump_json() + "\n" for r in rows))
    (out / "manifest.json").write_text(json.dumps({"batch_runs": ["r"], "batches": {"batches_submitted": 1,
                                                                                     "requests_answered": 12}}))
    console = Console(record=True, width=250)
    print_summary(out, console)
    assert "12 call(s) billed at batch prices, $0.0200 saved" in console.export_text()


def test_the_report_names_its_output_as_given_not_by_its_absolute_path(out: Path, monkeypatch: pytest.MonkeyPatch
                                                                       ) -> None:
    monkeypatch.chdir(out.parent)
    page = write_reports(out)[1].read_text()
    assert f"<title>pgsandbox-runner report: {out.name}</title>" in page and str(out.parent) not in page


def test_detectable_says_why_it_has_no_value_beside_a_verdict() -> None:
    """"detectable -" was never explained; on 20 records with 6 lost, a clear "worse" beside it."""
    from runner.analysis.paired import pair
    from runner.report.paired_table import FOOTNOTE, cells

    def rows(run: str, outcomes: list[bool]) -> list[Result]:
        return [Result(run=run, record_id=f"c{i:02d}", index=i, status="ok", success=s, started_at="t",
                       finished_at="t") for i, s in enumerate(outcomes)]

    c = pair("ref", rows("ref", [True] * 20), "run", rows("run", [True] * 14 + [False] * 6)).to_json()
    shown = cells(c)
    assert shown["verdict"] == "worse" and shown["detectable"] == "> 30%" and "'> X%'" in FOOTNOTE
    c = pair("ref", rows("ref", [True] * 20), "run", rows("run", [True] * 20)).to_json()
    assert cells(c)["detectable"] == "nothing varies" and "'nothing varies'" in FOOTNOTE
