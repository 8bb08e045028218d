"""Progress: a live rich table on a terminal, plain periodic lines otherwise."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loguru import logger
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from runner.durable import replace
from runner.errors import CUT_KINDS
from runner.results.result import Result


@dataclass
class RunProgress:
    total: int
    done: int = 0
    ok: int = 0
    errors: int = 0
    cut: int = 0  # of the errors: turns the model did not finish (output limit, refusal, context window)
    success: int = 0
    retries: int = 0
    rate_limited: int = 0
    cache_hits: int = 0
    llm_calls: int = 0
    cost_usd: float = 0.0
    unpriced: bool = False  # a call at an unknown price: the total is a lower bound

    @property
    def cost(self) -> str:
        if self.unpriced and not self.cost_usd:
            return "cost unknown"
        return f"${self.cost_usd:.4f}" + ("+?" if self.unpriced else "")


@dataclass
class WorkerView:
    sandbox: str = "booting"
    item: str = "-"
    rss_mb: float = 0.0
    cpu: float = 0.0


@dataclass
class Progress:
    runs: dict[str, RunProgress]
    console: Console
    started: float = field(default_factory=time.monotonic)
    workers: dict[int, WorkerView] = field(default_factory=dict)
    events: Counter[str] = field(default_factory=Counter)
    capacity: int = 0  # workers x slots
    in_flight: int = 0
    target: int | None = None  # --concurrency auto: the throttle's current target, and why it last changed
    target_why: str = ""
    flight: list[tuple[Any, ...]] = field(default_factory=list)  # (seconds, in flight[, target]), ~1/s
    discarded: int = 0  # results thrown away (their sandbox did not serve the whole record) and run again
    status_path: Path | None = None  # where the state is written every second, for whoever watches the run
    batches: str = ""  # batch mode: what is waiting on the batch APIs now (set from the gateway's counts)
    # what the job has spent so far, every call counted (budget/spend.py)
    spent: Callable[[], float] | None = None
    spent_before: float = 0.0  # of it, what earlier invocations of this output spent
    budget_usd: float | None = None  # the job's cap (--budget)
    forecast_usd: float | None = None  # what the forecast expected this invocation's items to cost
    _live: Live | None = None
    _last_line: float = 0.0
    _last_state: tuple[Any, ...] = ()

    def __enter__(self) -> Progress:
        if self.console.is_terminal:
            self._live = Live(self._render(), console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.__exit__(*exc)
        else:
            self._line(force=True)

    def result(self, r: Result) -> None:
        p = self.runs[r.run]
        p.done += 1
        if r.ok:
            p.ok += 1
            p.success += bool(r.success)
        else:
            p.errors += 1
            p.cut += r.error_kind in CUT_KINDS
        u = r.usage
        p.retries += u.retries
        p.rate_limited += u.rate_limited
        p.cache_hits += u.cache_hits
        p.llm_calls += u.llm_calls
        p.cost_usd += u.cost_usd or 0.0
        p.unpriced |= u.cost_usd is None

    def worker(self, wid: int) -> WorkerView:
        return self.workers.setdefault(wid, WorkerView())

    def flying(self, n: int) -> None:
        """Records in flight now; sampled once a second for the report's chart and the status file."""
        self.in_flight = n
        t = round(time.monotonic() - self.started, 1)
        if not self.flight or t - self.flight[-1][0] >= 1.0:
            self.flight.append((t, n, self.target) if self.target is not None else (t, n))
            if self.status_path is not None:
                self._write_status(t)

    def _write_status(self, t: float) -> None:
        state = {
            "elapsed_seconds": t,
            "in_flight": self.in_flight,
            "capacity": self.capacity,
            "target": self.target,
            "target_why": self.target_why,
            "done": sum(p.done for p in self.runs.values()),
            "total": sum(p.total for p in self.runs.values()),
        }
        try:
            assert self.status_path is not None
            replace(self.status_path, json.dumps(state).encode(), sync=False)  # rewritten every second
        except OSError:
            pass  # a nicety: the run does not depend on it

    def timeline(self, points: int = 400) -> list[tuple[Any, ...]]:
        """The in-flight samples, thinned evenly to at most `points` (a long run's chart stays small)."""
        step = max(1, -(-len(self.flight) // points))
        return self.flight[::step]

    def spending(self) -> str:
        """Spend against the cap and where it is heading: the forecast's cost of what is left, per item as
        measured once a twentieth of the items are done."""
        if self.spent is None or (self.budget_usd is None and self.forecast_usd is None):
            return ""
        spent = self.spent()
        done, total = sum(p.done for p in self.runs.values()), sum(p.total for p in self.runs.values())
        now = spent - self.spent_before  # this invocation's, for its own items
        per = now / done if done and done >= total / 20 else (self.forecast_usd or 0.0) / max(total, 1)
        projected = spent + per * (total - done)
        cap = f" of the ${self.budget_usd:,.2f} budget" if self.budget_usd is not None else ""
        return f"spent ${spent:,.4f}{cap}, projected ${projected:,.2f}"

    def tick(self) -> None:
        if self._live is not None:
            self._live.update(self._render())
        else:
            self._line()

    def _line(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_line < 10:
            return
        self._last_line = now
        state = (self.discarded, *((p.done, p.errors, p.retries, p.rate_limited) for p in self.runs.values()))
        if state == self._last_state:
            return  # the closing line repeats nothing the log doesn't already say
        self._last_state = state
        for name, p in self.runs.items():
            # solved, failed (the agent's fault) and errors: the words the report and the summary use
            logger.info(
                "{}: {}/{} done: {} solved, {} failed, {} errors{}, {} calls, {} retries, {} 429s, {} cache "
                "hits, {}",
                name,
                p.done,
                p.total,
                p.success,
                p.ok - p.success,
                p.errors,
                f" ({p.cut} cut: turns the model did not finish)" if p.cut else "",
                p.llm_calls,
                p.retries,
                p.rate_limited,
                p.cache_hits,
                p.cost,
            )
        if self.discarded:
            logger.info(
                "{} result(s) discarded (sandbox or slot process lost mid-record) and run again",
                self.discarded,
            )
        if self.batches:
            logger.info("batch mode: {}", self.batches)
        if spending := self.spending():
            logger.info("{}", spending)
        if self.capacity > 1:
            logger.info(
                "in flight: {} of {}{}",
                self.in_flight,
                self.capacity,
                f" (target {self.target}: {self.target_why})" if self.target is not None else "",
            )

    def _render(self) -> Group:
        elapsed = time.monotonic() - self.started
        flying = f", {self.in_flight}/{self.capacity} in flight" if self.capacity > 1 else ""
        if self.target is not None:
            flying += f", target {self.target}: {self.target_why}"
        if self.discarded:
            flying += f", {self.discarded} discarded (sandbox or slot process lost) and rerun"
        if self.batches:
            flying += f", batches: {self.batches}"
        if spending := self.spending():
            flying += f", {spending}"
        t = Table(title=f"runs ({elapsed:.0f}s{flying})", expand=False)
        for col in (
            "run",
            "done",
            "solved",
            "failed",
            "errors",
            "rate/s",
            "ETA",
            "retries",
            "429s",
            "cache hits",
            "cost",
        ):
            t.add_column(col, justify="right" if col != "run" else "left")
        for name, p in self.runs.items():
            rate = p.done / elapsed if elapsed > 0 else 0.0
            eta = (p.total - p.done) / rate if rate > 0 else float("inf")
            t.add_row(
                name,
                f"{p.done}/{p.total}",
                str(p.success),
                str(p.ok - p.success),
                f"{p.errors} ({p.cut} cut)" if p.cut else str(p.errors),
                f"{rate:.2f}",
                "-" if eta == float("inf") else f"{eta:.0f}s",
                str(p.retries),
                str(p.rate_limited),
                f"{p.cache_hits}/{p.llm_calls}",
                p.cost,
            )
        w = Table(title="workers", expand=False)
        for col in ("worker", "sandbox", "record", "RSS MiB", "CPU %"):
            w.add_column(col)
        for wid, v in sorted(self.workers.items()):
            w.add_row(str(wid), v.sandbox, v.item, f"{v.rss_mb:.0f}", f"{v.cpu:.0f}")
        return Group(t, w)
