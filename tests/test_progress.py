"""Progress off a terminal (CI logs, `make ... | tee`): counted lines, no repeats."""

from __future__ import annotations

import io

from loguru import logger
from rich.console import Console

from runner.progress import Progress, RunProgress
from runner.result import Result, Usage


def _r(run: str, status: str, success: bool, **usage: int) -> Result:
    return Result(run=run, record_id="x", index=0, status=status, success=success, started_at="t", finished_at="t",
                  error_kind=None if status == "ok" else "timeout", usage=Usage(**usage))


def test_lines_count_results_and_the_closing_line_repeats_nothing() -> None:
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.record["message"]), level="INFO", format="{message}")
    try:
        console = Console(file=io.StringIO(), force_terminal=False)
        with Progress({"a": RunProgress(3), "b": RunProgress(1)}, console) as p:
            p.result(_r("a", "ok", True, retries=2, cache_hits=1))
            p.result(_r("a", "error", False))
            p.result(_r("b", "ok", False, rate_limited=1))
            p.tick()  # the first tick prints at once
            n_after_tick = len(lines)
        assert lines == ["a: 2/3 done, 1 ok (1 solved), 1 errors, 2 retries, 0 429s, 1 cache hits",
                         "b: 1/1 done, 1 ok (0 solved), 0 errors, 0 retries, 1 429s, 0 cache hits"]
        assert n_after_tick == 2  # nothing changed since: the exit added no duplicate
        with Progress({"a": RunProgress(1)}, console) as p:
            p.result(_r("a", "ok", True))
        assert lines[-1] == "a: 1/1 done, 1 ok (1 solved), 0 errors, 0 retries, 0 429s, 0 cache hits"
    finally:
        logger.remove(sink)
