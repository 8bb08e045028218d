"""A worker process: one sandbox, one harness, then chunk of jobs -> harness -> results, with a heartbeat.

Receives job ids on its own queue, answers on the supervisor's inbox. A record over its time
limit is cut by SIGALRM. A sandbox that dies is replaced and the record retried once; an error
that stops the run (a fatal provider error) ends the worker with its reason.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from loguru import logger

from runner.config import Config
from runner.errors import ErrorKind, RunStopped
from runner.gateway.process import take_usage
from runner.harness import build_result, harness_class, id_field, reading
from runner.harness.base import Harness, SandboxInfo, Task, WorkerInfo, sandbox_info
from runner.inbox import Connection, Outbox
from runner.messages import Assign, ItemDone, Job, SandboxReplaced, Stop, WorkerFailed, WorkerReady
from runner.ratelimit import SharedLimiter
from runner.records import Record, load_records
from runner.resources import die_with_parent
from runner.result import Result, Usage, error_result, now_iso
from runner.sandbox import make_sandbox
from runner.sandbox.base import Sandbox, recreate_database, snapshot_database
from runner.sandbox.schema import DatabaseSpec
from runner.vitals import Heart

EXIT_BOOT_FAILED = 3
EXIT_RUN_STOPPED = 4
# A command harness enforces its own limit per chunk; the alarm is the backstop a little later.
ALARM_SLACK_SECONDS = 5.0


@dataclass(frozen=True)
class WorkerSpec:
    worker: int
    cfg: Config
    database: DatabaseSpec
    sandbox_kind: str
    image: str | None
    run_id: str
    supervisor_pid: int
    sim_url: str | None
    log_dir: str
    scratch_dir: str
    gateway_url: str | None = None
    lane: int = -1  # its in-flight counts in the shared limiter, reclaimed if it dies mid-call


class _Alarm(BaseException):
    """Raised by SIGALRM. A BaseException on purpose: SDKs and harnesses catch Exception and would
    turn the time limit into a retried connection error or a harness error."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Alarm()


class Worker:
    def __init__(self, spec: WorkerSpec, inbox: Any, limiter: SharedLimiter | None) -> None:
        cfg = spec.cfg
        self.spec, self.cfg, self.inbox = spec, cfg, inbox
        self.runs = {r.name: r for r in cfg.runs}
        # The supervisor already checked every line and reported the bad ones; valid ones suffice here.
        self.records: dict[str, Record] = load_records(cfg.dataset, id_field=id_field(cfg),
                                                        skip_invalid=cfg.skip_invalid, rejects=os.devnull)
        self.reading = reading(cfg)
        scratch = Path(spec.scratch_dir) / f"worker-{spec.worker}"
        scratch.mkdir(parents=True, exist_ok=True)
        self.harness: Harness = harness_class(cfg.harness.kind)(WorkerInfo(
            spec.worker, cfg, scratch, spec.run_id, sim_url=spec.sim_url, limiter=limiter,
            gateway_url=spec.gateway_url))
        self.sandbox: Sandbox | None = None
        self.generation = 0

    # ------------------------------------------------------------------ the sandbox
    def boot(self) -> None:
        """A new sandbox, the harness attached to it (and a template for `reset: recreate`)."""
        self.generation += 1
        s = self.spec
        sb = make_sandbox(s.sandbox_kind, s.database, image=s.image, run_id=s.run_id, owner_pid=s.supervisor_pid,
                          name_hint=f"w{s.worker}g{self.generation}", memory=s.cfg.container_memory,
                          cpus=s.cfg.container_cpus, dsn=s.cfg.dsn, tmpfs=s.cfg.sandbox_tmpfs())
        try:
            sb.start()
            self.sandbox = sb
            if self.cfg.harness.reset == "recreate":
                assert sb.endpoint is not None
                snapshot_database(sb.endpoint, self.main_db())
            self.harness.attach(self.sandbox_info())
        except BaseException:
            self.teardown()
            sb.stop()
            raise

    def main_db(self) -> str:
        return getattr(self.sandbox, "dbname", None) or self.spec.database.name

    def sandbox_info(self) -> SandboxInfo:
        assert self.sandbox is not None and self.sandbox.endpoint is not None
        return sandbox_info(self.sandbox, self.spec.database, self.main_db())

    def teardown(self) -> None:
        with contextlib.suppress(Exception):
            self.harness.detach()
        if self.sandbox is not None:
            self.sandbox.stop()
            self.sandbox = None

    def replace_sandbox(self, why: BaseException | str) -> None:
        assert self.sandbox is not None
        old = self.sandbox.id
        logger.warning("sandbox {} is gone ({}); starting a new one", old, why)
        self.teardown()
        self.boot()
        assert self.sandbox is not None
        self.inbox.put(SandboxReplaced(self.spec.worker, old, self.sandbox.id, str(why)[:200]))

    def sandbox_dead(self) -> bool:
        return self.sandbox is None or not self.sandbox.alive()

    # ------------------------------------------------------------------ jobs
    def serve(self, tasks: Any, heart: Heart) -> None:
        while True:
            msg = tasks.get()
            if isinstance(msg, Stop):
                return
            assert isinstance(msg, Assign)
            heart.item_id = msg.jobs[0].item_id
            for job, result in self.handle(msg.jobs):
                result = result.model_copy(update={
                    "worker": self.spec.worker, "sandbox_id": self.sandbox.id if self.sandbox else None,
                    "attempt": job.attempt, "item_id": job.item_id, "index": job.index})
                self.inbox.put(ItemDone(self.spec.worker, job.item_id, result.to_json()))
            heart.item_id = None

    def handle(self, jobs: tuple[Job, ...]) -> Iterator[tuple[Job, Result]]:
        """Each job's result; a lost sandbox is replaced and what it held retried once."""
        left = list(jobs)
        for tries in (1, 2):
            lost: list[Job] = []
            for job, res in self.attempt(left):
                if res.error_kind in ("harness_error", "database") and tries == 1 and self.sandbox_dead():
                    lost.append(job)
                else:
                    yield job, res
            if not lost:
                return
            self.replace_sandbox(f"{len(lost)} record(s) failed and the database no longer answers")
            left = lost
        for job in left:
            yield job, error_result(job.run, job.record_id, job.index, "sandbox lost twice", kind="sandbox_lost")

    def attempt(self, jobs: list[Job]) -> Iterator[tuple[Job, Result]]:
        """Run jobs through the harness under the time limit; every job comes back with a result."""
        by_item = {j.item_id: j for j in jobs}
        tasks = [self.task(j) for j in jobs]
        left = dict(by_item)
        limit = self.cfg.conversation_timeout_seconds * len(jobs)
        started = (now_iso(), time.monotonic())  # a chunk's records run together
        if self.cfg.harness.reset == "recreate" and self.sandbox is not None and self.sandbox.endpoint is not None:
            recreate_database(self.sandbox.endpoint, self.main_db())
        signal.setitimer(signal.ITIMER_REAL, limit + (ALARM_SLACK_SECONDS if len(jobs) > 1 else 0))
        usage: list[Usage] = []
        try:
            for n, (task, outcome) in enumerate(self.harness.run(tasks)):
                job = left.pop(task.item_id)
                if self.spec.gateway_url is not None:
                    usage = usage or self._gateway_usage(len(jobs))
                    outcome.usage = usage[n] if n < len(usage) else outcome.usage
                yield job, build_result(task, outcome, job.index, started, self.reading, share=len(jobs))
        except _Alarm:
            yield from self._fail_all(left, f"over the time limit of {self.cfg.conversation_timeout_seconds:g}s",
                                      "timeout", started, self._spent(len(jobs), usage))
            self._reconnect()  # the cut may have left a query half-done on a connection
        except (psycopg.OperationalError, psycopg.InterfaceError) as e:
            yield from self._fail_all(left, str(e), "database", started, self._spent(len(jobs), usage))
            if not self.sandbox_dead():
                self._reconnect()
        except RunStopped:
            raise
        except Exception as e:  # a bug or an unexpected answer: these records fail, the worker goes on
            logger.exception("harness failed")
            yield from self._fail_all(left, f"{type(e).__name__}: {e}", "harness_error", started,
                                      self._spent(len(jobs), usage))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def _spent(self, parts: int, taken: list[Usage]) -> list[Usage]:
        """What the records cut short had cost, in chunk order: the gateway's count for a user harness's
        SDK calls, else the harness's own count for the record it was running."""
        if self.spec.gateway_url is None:
            return [self.harness.spent()]
        return taken or self._gateway_usage(parts)

    def _gateway_usage(self, parts: int) -> list[Usage]:
        """What this worker's SDK calls through the gateway cost since its last record."""
        assert self.spec.gateway_url is not None
        try:
            return take_usage(self.spec.gateway_url, self.spec.worker, parts)
        except OSError as e:  # the counts are a nicety: the record's result must not wait on them
            logger.warning("could not read this record's model calls from the gateway: {}", e)
            return []

    def _fail_all(self, left: dict[int, Job], why: str, kind: ErrorKind, started: tuple[str, float],
                  spent: list[Usage]) -> Iterator[tuple[Job, Result]]:
        """Every job left fails with why; each keeps its time and what its calls cost."""
        started_at, t0 = started
        wall = round((time.monotonic() - t0) / max(1, len(left)), 4)
        if len(spent) > 1:  # a share per record of the chunk: the ones already done took theirs
            spent = spent[-len(left):]
        shares = spent + [Usage()] * (len(left) - len(spent))
        for job, usage in zip(list(left.values()), shares, strict=False):
            yield job, error_result(job.run, job.record_id, job.index, why, kind=kind, started_at=started_at,
                                    wall_seconds=wall, usage=usage)
        left.clear()

    def _reconnect(self) -> None:
        with contextlib.suppress(Exception):
            self.harness.detach()
            self.harness.attach(self.sandbox_info())

    def task(self, job: Job) -> Task:
        return Task(job.item_id, self.runs[job.run], job.record_id, self.records[job.record_id].data, job.attempt)

    def close(self) -> None:
        self.teardown()
        with contextlib.suppress(Exception):
            self.harness.close()


def _on_term(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def worker_main(spec: WorkerSpec, to_supervisor: Connection, tasks: Any, limiter: SharedLimiter | None) -> None:
    """Entry point of a worker process (spawned)."""
    inbox = Outbox(to_supervisor)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the supervisor's to handle
    # SIGTERM (the supervisor's terminate, or its death: die_with_parent) unwinds, so the sandbox and a
    # command harness's processes are removed on the way out.
    signal.signal(signal.SIGTERM, _on_term)
    die_with_parent(spec.supervisor_pid)
    signal.signal(signal.SIGALRM, _on_alarm)
    logger.remove()
    log_path = Path(spec.log_dir) / f"worker-{spec.worker}.log"
    logger.add(log_path, level="DEBUG", enqueue=False)
    # A supervisor that finds this worker stuck sends SIGABRT first: the stacks land in its log.
    faulthandler.enable(open(log_path, "a"))  # noqa: SIM115 - open for the life of the process
    logger.info("worker {} starting (pid {}, sandbox {}, harness {})", spec.worker, os.getpid(), spec.sandbox_kind,
                spec.cfg.harness.kind)
    try:
        if limiter is not None:
            limiter.lane = spec.lane
        worker = Worker(spec, inbox, limiter)
        worker.boot()
    except SystemExit:  # told to stop while booting: not a boot failure
        raise
    except BaseException as e:
        logger.exception("boot failed")
        inbox.put(WorkerFailed(spec.worker, f"{type(e).__name__}: {e}", at_boot=True))
        sys.exit(EXIT_BOOT_FAILED)
    assert worker.sandbox is not None
    inbox.put(WorkerReady(spec.worker, worker.sandbox.id, worker.sandbox.kind, worker.sandbox.boot_seconds))
    heart = Heart(spec.worker, inbox)
    heart.start()
    code = 0
    try:
        worker.serve(tasks, heart)
    except RunStopped as e:
        logger.error("stopping the run: {}", e)
        inbox.put(WorkerFailed(spec.worker, str(e), at_boot=False))
        code = EXIT_RUN_STOPPED
    finally:
        heart.stop()
        worker.close()
        logger.info("worker {} exiting", spec.worker)
    sys.exit(code)
