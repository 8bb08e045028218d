"""Progress off a terminal (CI logs, `make ... | tee`): counted lines, no repeats."""

from __future__ import annotations

import io

from loguru import logger
from rich.console import Console

from runner.engine.progress import Progress, RunProgress
from runner.results.result import Result, Usage


def _r(run: str, status: str, success: bool, **usage: float | None) -> Result:
    return Result(run=run, record_id="x", index=0, status=status, success=success, started_at="t", finished_at="t",
                  error_kind=None if status == "ok" else "timeout", usage=Usage(**usage))


def test_lines_count_results_and_the_closing_line_repeats_nothing() -> None:
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.record["message"]), level="INFO", format="{message}")
    try:
        console = Console(file=io.StringIO(), force_terminal=False)
        with Progress({"a": RunProgress(3), "b": RunProgress(1)}, console) as p:
            p.result(_r("a", "ok", True, retries=2, cache_hits=1, llm_calls=3, cost_usd=0.0125))
            p.result(_r("a", "error", False, llm_calls=1, cost_usd=0.001))
            p.result(_r("b", "ok", False, rate_limited=1, llm_calls=2, cost_usd=None))  # a model without a price
            p.tick()  # the first tick prints at once
            n_after_tick = len(lines)
        assert lines == ["a: 2/3 done: 1 solved, 0 failed, 1 errors, 4 calls, 2 retries, 0 429s, 1 cache hits, $0.0135",
                         "b: 1/1 done: 0 solved, 1 failed, 0 errors, 2 calls, 0 retries, 1 429s, 0 cache hits, "
                         "cost unknown"]
        assert n_after_tick == 2  # nothing changed since: the exit added no duplicate
        with Progress({"a": RunProgress(1)}, console) as p:
            p.result(_r("a", "ok", True))
        assert lines[-1] == ("a: 1/1 done: 1 solved, 0 failed, 0 errors, 0 calls, 0 retries, 0 429s, 0 cache hits, "
                             "$0.0000")
    finally:
        logger.remove(sink)


def test_batch_mode_shows_what_waits_on_the_batch_apis() -> None:
    console = Console(file=io.StringIO(), force_terminal=True, width=200)
    p = Progress({"a": RunProgress(3)}, console, capacity=4)
    p.batches = "3 call(s) held for the next batch, 12 in 2 batch(es) out, 5 ended"
    shown = Console(file=io.StringIO(), width=300, record=True)
    shown.print(p._render())
    assert "batches: 3 call(s) held for the next batch, 12 in 2 batch(es) out" in shown.export_text()
