"""The report's renderer in its own process (runner/report/renderer.py): the run's report drawn there is the
one drawn here, and it leaves when asked, when told to stop, and when its runner is gone."""

from __future__ import annotations

from pathlib import Path

from runner.report.build import shown_path, write_reports
from runner.report.renderer import WarmRenderer
from tests.report.test_report import ROWS


def _output(root: Path) -> Path:
    (root / "results").mkdir(parents=True)
    (root / "results" / "r.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in ROWS))
    return root


def test_the_warmed_renderer_draws_the_same_report_as_this_process(tmp_path: Path) -> None:
    here, there = _output(tmp_path / "here"), _output(tmp_path / "there")
    write_reports(here)
    renderer = WarmRenderer()
    renderer.start()
    proc = renderer.proc
    assert proc is not None
    assert renderer.render(there) == "ok"
    assert renderer.proc is None and proc.poll() is not None  # asked once, then gone
    assert (there / "report.json").read_text() == (here / "report.json").read_text()
    html = (there / "report.html").read_text()
    assert html.replace(shown_path(there), "OUT") == (here / "report.html").read_text().replace(shown_path(here), "OUT")
    assert renderer.render(there).startswith("error")  # a second ask: the caller draws it itself


def test_a_renderer_that_cannot_draw_says_why(tmp_path: Path) -> None:
    renderer = WarmRenderer()
    renderer.start()
    assert renderer.render(tmp_path / "no-such-output").startswith("error: ")


def test_a_renderer_never_asked_leaves_when_stopped_or_when_its_runner_is_gone() -> None:
    renderer = WarmRenderer()
    renderer.start()
    proc = renderer.proc
    assert proc is not None
    renderer.stop()
    assert proc.poll() is not None and renderer.proc is None
    renderer.stop()  # twice is fine
    renderer.start()
    assert renderer.proc is not None and renderer.proc.stdin is not None
    renderer.proc.stdin.close()  # the runner's end of its stdin, as when the runner is killed
    assert renderer.proc.wait(timeout=30) == 0
