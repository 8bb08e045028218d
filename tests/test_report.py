"""Report numbers on a fixture result set; the HTML parses and holds charts and the drill-down."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
from rich.console import Console

from runner.report import compare, print_summary, run_metrics, write_reports
from runner.result import Result, Usage


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
    assert m["records"] == 4 and m["ok"] == 3 and m["errors"] == 1
    assert m["errors_by_kind"] == {"timeout": 1}
    assert m["success_rate"] == 0.5
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
    assert p.tags.count("svg") >= 3 and p.tags.count("details") == 4
    assert "<script" not in page and "http" not in page.split("<body>")[1]  # self-contained
    assert "&lt;b&gt;Ava&lt;/b&gt;" in page and "search_accounts" in page  # escaped drill-down


def test_terminal_table_and_compare(out: Path, tmp_path: Path) -> None:
    console = Console(record=True, width=200)
    print_summary(out, console)
    assert "50.0%" in console.export_text()
    other = tmp_path / "other"
    (other / "results").mkdir(parents=True)
    (other / "results" / "r.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in ROWS[:2]))
    deltas = compare(out, other, Console(record=True, width=200))
    assert deltas["r"]["success_rate"] == {"a": 0.5, "b": 1.0, "delta": 0.5}
    # the harness's own metrics compare too
    assert deltas["r"]["state_match"]["delta"] == pytest.approx(1 - 2 / 3, abs=1e-5)


def test_a_harness_whose_calls_the_runner_did_not_see_shows_no_usage_columns(tmp_path: Path) -> None:
    rows = [Result(run="r", record_id=str(i), index=i, status="ok", success=bool(i % 2), started_at="t",
                   finished_at="t", metrics={"state_match": 1.0}, groups={"first_tool": ["add_note"]},
                   output={"overall_success": bool(i % 2)}) for i in range(4)]
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "r.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in rows))
    _, h = write_reports(tmp_path)
    summary = h.read_text().split('<table id="summary">')[1].split("</table>")[0]
    assert "state_match" in summary and "cost_usd" not in summary and "input_tokens" not in summary
    console = Console(record=True, width=200)
    print_summary(tmp_path, console)
    text = console.export_text()
    assert "cost $" not in text and "50.0%" in text
