"""The one writer of results: each result once (a late duplicate from a replaced worker is dropped),
into the sink, the progress counts and the concurrency throttle's window; a field the harness wrote
in a way the report reads differently is said once per field; --maxfail counts what did not succeed."""

from __future__ import annotations

from loguru import logger

from runner.budget.gates import Gates
from runner.budget.spend import BUDGET_WORDS
from runner.budget.throttle import Throttle
from runner.engine.progress import Progress
from runner.engine.scheduler import Scheduler
from runner.results.result import Result, error_result, outcome
from runner.results.sink import ResultSink


class Recorder:
    def __init__(
        self,
        maxfail: int | None,
        scheduler: Scheduler,
        sink: ResultSink,
        progress: Progress,
        throttle: Throttle | None = None,
        gates: Gates | None = None,
    ) -> None:
        """`maxfail`: results that failed, were cut or erred before the run stops (--maxfail); None: never."""
        self.maxfail = maxfail
        self.scheduler, self.sink, self.progress, self.throttle = scheduler, sink, progress, throttle
        self.gates = gates  # the runs' first-call gates (runner/budget/gates.py)
        self.read_warned: set[tuple[str, str]] = set()  # result fields already warned about (read_notes)
        self.not_successes = 0  # results that failed, were cut or ended in an error (--maxfail counts them)
        self.stopped_runs: dict[str, str] = {}  # run -> the refusal that stopped it

    def record(self, worker: int, result: Result) -> bool:
        """Keep `result`; True when it is the one that reaches --maxfail. Raises OutputUnwritable (disk
        full): the caller stops the run, what was written is kept."""
        if result.item_id is not None and not self.scheduler.complete(worker, result.item_id):
            return False  # exactly once: a late duplicate from a worker that was replaced
        if result.error_kind in ("provider_rejected", "not_run") or result.usage.not_sent:
            self.stop_refused_runs()
        if result.error_kind == "not_run" or (result.usage.not_sent and result.run in self.stopped_runs):
            return False  # its calls were never sent (its run stopped): not a result, the record stays to do
        self.sink.write(result)
        self.progress.result(result)
        for field, note in result.read_notes.items():
            kind = note.partition(":")[0]
            if (field, kind) not in self.read_warned:  # once per field and way of reading: not per record
                self.read_warned.add((field, kind))
                logger.warning(
                    "{}: {} in {}:{} (and perhaps others){}",
                    field,
                    note,
                    result.run,
                    result.record_id,
                    "" if kind == "read from a string" else ": the report leaves it out",
                )
        if self.throttle is not None:
            u = result.usage
            live = u.llm_calls - u.cache_hits
            per_call = u.latency_seconds / live if live > 0 and u.latency_seconds else None
            self.throttle.result(per_call or result.wall_seconds or 0.0, u.rate_limited, live)
        if self.maxfail is None or outcome(result) not in ("failure", "cut", "error"):
            return False
        self.not_successes += 1
        if self.not_successes != self.maxfail:
            return False
        logger.warning(
            "{} result(s) did not succeed (--maxfail {}): starting no more records; those in flight finish",
            self.not_successes,
            self.maxfail,
        )
        return True

    def stop_refused_runs(self) -> None:
        """Runs whose gate a refusal shut: no more of their records start, and the console says why, once."""
        if self.gates is None:
            return
        for key, why in self.gates.shut().items():
            run = key.split("/", 1)[0]
            if run in self.stopped_runs:
                continue
            self.stopped_runs[run] = why
            dropped = self.scheduler.stop_run(run)
            if why.startswith(BUDGET_WORDS):
                logger.warning(
                    "run {} {}; {} record(s) not started, and those a refused call cut are not recorded "
                    "(the same command with a higher cap runs them)",
                    run,
                    why,
                    dropped,
                )
                continue
            logger.error(
                "run {} stopped: every request of it is refused ({}); {} record(s) not sent. Fix the "
                "config and run the same command: it resumes",
                run,
                why,
                dropped,
            )

    def lost(self, worker: int, how: str) -> list[Result]:
        """What a gone worker held goes back in line; the error results of what ran out of attempts (the
        caller records them, as any result)."""
        return [
            error_result(
                a.item.run,
                a.item.record_id,
                a.item.index,
                f"worker {how} on each of {a.attempt} attempts",
                kind="worker_died",
                item_id=a.item.id,
                attempt=a.attempt,
                epoch=a.item.epoch,
            )
            for a in self.scheduler.lose(worker)
        ]
