"""The HTML report in a real browser (headless Chromium, Debian's package, driven by playwright): it fits
1,280 px without horizontal scrolling, the charts render, a record opens on click onto every run side by
side with why it failed, and the filters work. The screenshot is kept in out/test-artifacts/. Before,
the summary table alone was ~1,590 px wide."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.report.build import write_reports
from runner.results.result import Result, Usage
from tests.conftest import REQUIRED

ARTIFACTS = Path(__file__).resolve().parents[2] / "out" / "test-artifacts"
# The default job's four runs, with the longer names users give their runs.
RUNS = ["claude-sonnet-4-5-baseline", "gpt-4-1-baseline", "gpt-4-1-mini-baseline", "atlas-gpt-4-1-mini-claude"]
ANATOMY = {"turns": [{"turn": 1, "user": "Log a deal for Vertex Foods", "right": False, "expected": [
    {"tool": "create_opportunity", "args": {"account_id": 2}, "made": True, "ok": True,
     "wrong_args": [{"arg": "account_id", "expected": 2, "got": 1}]}], "unexpected": []}],
    "state": {"opportunities": {"missing": [], "extra": [], "changed": [
        {"id": 1001, "columns": {"account_id": {"expected": 2, "got": 1}}}]}}}


STEPS = [{"turn": 0, "step": s, "proposed": {"calls": [{"name": "search_accounts", "args": {"query": "Vertex Foods"}}]},
          "verdict": "revise" if s else "approve", "guidance": "use the account id from the search" if s else None,
          "executed": {"calls": [{"name": "create_opportunity", "args": {"account_id": 2, "amount": 125000}}]}}
         for s in range(3)]


def _failed(run: str, i: int) -> bool:
    return (i * 7 + len(run)) % 5 == 0


def _result(run: str, i: int) -> Result:
    success = not _failed(run, i)
    output: dict[str, Any] = {"success": success, "transcript": [{"role": "user", "text": f"request {i}"}],
                              "anatomy": None if success else ANATOMY, "final_state_digest": "ab12" * 8,
                              **({"steps": STEPS} if run.startswith("atlas") else {})}
    return Result(run=run, record_id=f"crm-7-{i:05d}", index=i, status="ok", success=success, started_at="t",
                  finished_at="t", wall_seconds=2.0 + (i % 7) * 0.9, output=output,
                  metrics={"args_exact": 0.9, "args_normalized": 0.92, "state_match": float(success),
                           "tool_selection": 0.95},
                  groups={"difficulty": [("easy", "medium", "hard")[i % 3]], "tag": [f"kind_{i % 15}"]},
                  usage=Usage(llm_calls=6, input_tokens=123_456, output_tokens=7_890, cost_usd=0.0123 * (1 + i % 3),
                              cache_read_tokens=456_789, retries=i % 2))


@pytest.fixture(scope="module")
def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if REQUIRED:
            pytest.fail("no chromium (make test installs Debian's package); the browser test is required in CI",
                        pytrace=False)
        pytest.skip("no chromium")
    return path


@pytest.fixture
def report(tmp_path: Path) -> Path:
    (tmp_path / "results").mkdir()
    for run in RUNS:
        (tmp_path / "results" / f"{run}.jsonl").write_text("".join(_result(run, i).model_dump_json() + "\n"
                                                                   for i in range(60)))
    return write_reports(tmp_path)[1]


@pytest.fixture
def browser(chromium: str) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any, report: Path) -> Any:
    pg = browser.new_page(viewport={"width": 1280, "height": 2000})
    pg.goto(report.as_uri())
    return pg


def test_the_report_fits_1280_px_and_its_parts_work(page: Any) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "report-1280.png"))
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    assert page.evaluate("document.getElementById('summary').getBoundingClientRect().right") <= 1280
    # run names on one line each (they wrapped onto three before)
    heights = page.evaluate("[...document.querySelectorAll('#summary th.run')].map(t => t.getBoundingClientRect()"
                            ".height)")
    assert len(heights) == 4 and max(heights) < 50
    charts = page.locator("figure.chart svg")
    assert charts.count() >= 3
    for i in range(charts.count()):
        box = charts.nth(i).bounding_box()
        assert box is not None and box["width"] > 200 and box["height"] > 80
    assert page.locator("figure.chart svg text").count() > 20  # axes with ticks and titles, legends
    record = page.locator("#drilldown > details[data-fail='1']").first
    record.locator("> summary").click()
    assert record.evaluate("d => d.open")
    assert record.locator(".side > .col").count() == 4  # every run side by side
    assert "account_id" in record.locator(".anatomy").first.inner_text()
    total = page.locator("#drilldown > details").count()
    page.check("#failonly")
    visible = page.locator("#drilldown > details:visible").count()
    assert 0 < visible < total and page.locator("#shown").inner_text() == f"{visible} of {total} records"
    page.select_option("select.f[data-g='difficulty']", "hard")
    assert 0 < page.locator("#drilldown > details:visible").count() < visible


def test_the_comparison_draws_its_forest_plot_and_a_won_count_lists_those_records(page: Any) -> None:
    forest = page.locator("figure[aria-label='difference in success against the reference'] svg")
    assert forest.count() == 1 and (forest.bounding_box() or {}).get("height", 0) > 60
    assert page.locator("#paired th.run").count() == 3  # every run but the reference
    button = page.locator("#paired button.pick.won:not([disabled])").first
    wanted = sorted(json.loads(button.get_attribute("data-ids")))
    assert int(button.inner_text()) == len(wanted) > 0
    button.click()
    shown = sorted(page.locator("#drilldown > details:visible").evaluate_all("ds => ds.map(d => d.dataset.id)"))
    assert shown == wanted
    assert page.locator("#picked").is_visible() and "solved" in page.locator("#picked").inner_text()
    page.click("#unpick")
    assert page.locator("#drilldown > details:visible").count() == page.locator("#drilldown > details").count()


@pytest.mark.parametrize("width", [390, 1280, 1920])
def test_at_each_width_nothing_overflows_and_no_word_is_broken_per_letter(browser: Any, report: Path,
                                                                            width: int) -> None:
    page = browser.new_page(viewport={"width": width, "height": 1400})
    page.goto(report.as_uri())
    record = page.locator("#drilldown > details[data-fail='1']").first
    record.locator("> summary").click()
    page.screenshot(path=str(ARTIFACTS / f"report-{width}.png"), full_page=False)
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    # Atlas's steps, one under another in the run's column: every part in view (before: the table's last
    # columns scrolled out of a 4-run column, and its header read `t u r n . s t e p`)
    cut = record.locator(".steps td").evaluate_all("tds => tds.filter(t => t.scrollWidth > t.clientWidth + 1)"
                                                   ".map(t => t.innerText)")
    assert record.locator(".steps td").count() == 12 and not cut, cut
    # no cell taller than a line per word (a cell broken per letter is a line per letter)
    broken = record.locator(".steps td").evaluate_all(
        "tds => tds.filter(t => { const r = document.createRange(); r.selectNodeContents(t);"
        " return r.getBoundingClientRect().height > (t.innerText.split(/\\s+/).filter(Boolean).length + 1)"
        " * (parseFloat(getComputedStyle(t).lineHeight) || 18) + 10; }).map(t => t.innerText)")
    assert not broken, broken
    raw = record.locator("details.raw").first  # the harness's raw fields wait behind a toggle
    assert not raw.evaluate("d => d.open") and "final_state_digest" not in raw.locator("xpath=..").inner_text()
    if width < 760:  # one run under another, each as wide as the page
        cols = record.locator(".side > .col").evaluate_all("cs => cs.map(c => c.getBoundingClientRect().width)")
        assert min(cols) > width * 0.7


def test_search_a_permalink_and_the_failures_of_one_run(browser: Any, report: Path) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 1400})
    page.goto(report.as_uri())
    visible = "#drilldown > details:visible"
    page.fill("#q", "request 7")  # text anywhere in the record (its transcript here)
    assert page.locator(visible).evaluate_all("ds => ds.map(d => d.id)") == ["crm-7-00007"]
    page.fill("#q", "00012")  # part of an id
    assert page.locator(visible).evaluate_all("ds => ds.map(d => d.id)") == ["crm-7-00012"]
    page.fill("#q", "")
    page.select_option("#failedin", RUNS[1])
    shown = page.locator(visible).evaluate_all("ds => ds.map(d => d.id)")
    assert shown == [f"crm-7-{i:05d}" for i in range(60) if _failed(RUNS[1], i)]
    assert page.locator("#shown").inner_text() == f"{len(shown)} of 60 records"
    hidden = next(f"crm-7-{i:05d}" for i in range(60) if not _failed(RUNS[1], i))
    link = page.locator(f"#drilldown > details[id='{hidden}'] a.link")
    assert link.get_attribute("href") == f"#{hidden}"
    page.goto(report.as_uri() + f"#{hidden}")  # a link to a record the filter hides: shown, open, in view
    page.wait_for_function(f"document.getElementById('{hidden}').open")
    target = page.locator(f"[id='{hidden}']")
    assert target.is_visible() and target.evaluate("d => d.getBoundingClientRect().top") < 1400
    fresh = browser.new_page(viewport={"width": 1280, "height": 1400})  # the link opened from elsewhere
    fresh.goto(report.as_uri() + "#crm-7-00042")
    assert fresh.locator("[id='crm-7-00042']").evaluate("d => d.open && d.getBoundingClientRect().top < 1400")
