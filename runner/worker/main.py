"""A worker process: one sandbox, K slots each running records through its own harness, a heartbeat.

Receives job ids on its own queue (each Assign names its slot), answers on the supervisor's inbox.
One slot runs in the main thread under SIGALRM; several run in threads (runner/worker/slot.py), each on its
own copies of the sandbox's databases, made at boot. A sandbox that dies is replaced once for all
slots and what each held retried once; an error that stops the run (a fatal provider error) ends
the worker with its reason.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loguru import logger

from runner import heap
from runner.budget.ratelimit import Budget
from runner.config import Config
from runner.errors import RunStopped
from runner.harness import Reading, harness_class
from runner.harness.base import WorkerInfo
from runner.harness.settings import HarnessSettings, harness_settings
from runner.logfiles import add_log_file, capture_output
from runner.models.live import Catalogue
from runner.records import RecordSource
from runner.resources import die_with_parent, leave_forkserver
from runner.results.result import now_iso
from runner.sandbox.base import Launched
from runner.sandbox.settings import SandboxSettings
from runner.wire.inbox import Connection, Outbox
from runner.wire.messages import Assign, Job, ResultDiscarded, Stop, WorkerFailed, WorkerReady, WorkerRetiring
from runner.worker.clock import AlarmClock
from runner.worker.keeper import SandboxKeeper
from runner.worker.settings import SlotSettings
from runner.worker.slot import Slot, SlotThread, running
from runner.worker.vitals import Heart

EXIT_BOOT_FAILED = 3
EXIT_RUN_STOPPED = 4
EXIT_RETIRED = 5  # a slot stuck beyond reach: the worker finished its other slots' records and left
WATCH_SECONDS = 0.1  # how often the main thread looks at its slots' clocks (K > 1)
# A slot's harness code that has not taken its Alarm this long after it was raised is stuck in a C
# call (a sleep, a socket read without timeout): a thread cannot be killed, so the worker retires.
STUCK_GRACE_SECONDS = 5.0


@dataclass(frozen=True)
class WorkerSpec:
    worker: int
    records: RecordSource  # where its records are read
    sandbox: SandboxSettings  # what its sandboxes are made with (the whole of what the sandbox layer reads)
    slot: SlotSettings  # what its slots read of the config
    harness: HarnessSettings  # what its harnesses read of it
    reading: Reading  # how a result is read (success, metrics, breakdowns)
    sim_url: str | None
    log_dir: str
    scratch_dir: str
    gateway_url: str | None = None
    gateway_token: str | None = None  # what the run's gateway admits its callers by
    lane: int = -1  # its in-flight counts in the shared limiter, reclaimed if it dies mid-call
    # its first sandbox, started ahead by the supervisor (engine/prestart.py)
    launched: Launched | None = None
    warm: str | None = None  # harness.python: where its slots' shims are forked (proc/warm.py)
    catalogue: Catalogue | None = None  # what each model takes, its provider asked at the run's start
    # where each record's line is (None: read the file for them)
    offsets: Mapping[str, tuple[int, int]] | None = None

    @property
    def slots(self) -> int:
        return self.sandbox.slots

    @property
    def run_id(self) -> str:
        return self.sandbox.run_id

    @property
    def supervisor_pid(self) -> int:
        return self.sandbox.owner_pid  # the process that owns its sandboxes, and that it dies with


class Worker:
    def __init__(self, spec: WorkerSpec, inbox: Any, limiter: Budget | None) -> None:
        self.spec, self.inbox, self.slot_settings = spec, inbox, spec.slot
        self.worker_id, self.gateway_url, self.gateway_token = (
            spec.worker,
            spec.gateway_url,
            spec.gateway_token,
        )
        # The supervisor already checked every line and reported the bad ones; valid ones suffice here.
        self.records = spec.records.open(spec.offsets)
        self.reading = spec.reading
        kind = harness_class(spec.harness.kind)
        self.slots = [
            Slot(
                n,
                self,
                kind(
                    WorkerInfo(
                        spec.worker,
                        spec.harness,
                        self._scratch(n),
                        spec.run_id,
                        sim_url=spec.sim_url,
                        limiter=limiter,
                        gateway_url=spec.gateway_url,
                        gateway_token=spec.gateway_token,
                        slot=n,
                        slots=spec.slots,
                        warm=spec.warm,
                        catalogue=spec.catalogue,
                    )
                ),
            )
            for n in range(spec.slots)
        ]
        self.threads: list[SlotThread] = []
        # SIGALRM reaches the main thread only: elsewhere (a Ray actor's thread) one slot runs in a thread too
        self.inline = spec.slots == 1 and threading.current_thread() is threading.main_thread()
        self.keeper = SandboxKeeper(spec, inbox, inline=self.inline)  # the sandbox every slot shares

    def _scratch(self, slot: int) -> Path:
        d = Path(self.spec.scratch_dir) / f"worker-{self.spec.worker}" / (f"slot-{slot}" if slot else "")
        d.mkdir(parents=True, exist_ok=True)
        return d

    def start_slots(self) -> None:
        """Attach every slot's harness: in this thread for one slot, in each slot's thread for several.
        Slot 0 attaches before the worker says it is ready (a harness that cannot load fails the boot);
        the others attach meanwhile (boot copied their databases), each saying so when done (SlotReady)."""
        if self.inline:
            self.slots[0].attach()
            return
        self.slots[0].harness.before_threads(self.keeper.slot_info(0))  # process-wide: before any thread
        threading.Thread(target=self.keeper.copy_in_background, daemon=True, name="slot-copies").start()
        self.threads = [SlotThread(slot, self.keeper.cancel_queries) for slot in self.slots]
        for t in self.threads:
            t.start()
        first = self.threads[0]
        first.attached.wait()
        if first.failure is not None:
            raise first.failure

    def discard(self, job: Job, reason: str, lost: str = "sandbox_lost") -> None:
        """Tell the supervisor a result was thrown away and the record goes again (it counts an attempt)."""
        logger.warning("{}:{} attempt {}: result discarded: {}", job.run, job.record_id, job.attempt, reason)
        self.inbox.put(ResultDiscarded(self.worker_id, job.item_id, job.attempt, reason, lost))

    # ------------------------------------------------------------------ jobs
    def serve(self, tasks: Any, heart: Heart) -> bool:
        """Run what the supervisor assigns until told to stop; False if the worker had to retire."""
        if not self.threads:
            self._serve_inline(tasks, heart)
            return True
        return self._serve_threads(tasks, heart)

    def _serve_inline(self, tasks: Any, heart: Heart) -> None:
        clock = AlarmClock()
        clock.install()
        while True:
            msg = tasks.get()
            if isinstance(msg, Stop):
                return
            assert isinstance(msg, Assign)
            heart.item_id = msg.jobs[0].item_id
            self.slots[0].serve(msg, clock)
            heart.item_id = None

    def _serve_threads(self, tasks: Any, heart: Heart) -> bool:
        """Hand each chunk to its slot's thread; watch the slots' clocks; end when told, after the
        chunks in hand (or at once when a slot failed in a way that ends the worker). A slot stuck
        beyond reach: its records time out, the others finish theirs, and the worker retires."""
        stopping = retired = False
        while True:
            msg = None
            if not stopping:
                with contextlib.suppress(queue.Empty):
                    msg = tasks.get(timeout=WATCH_SECONDS)
            else:
                time.sleep(WATCH_SECONDS)
            now = time.monotonic()
            for t in self.threads:
                t.clock.check(now)
                if t.failure is not None:
                    raise t.failure
                if not t.slot.abandoned and t.current is not None and t.clock.stuck(now, STUCK_GRACE_SECONDS):
                    logger.error(
                        "slot {} is stuck past its time limit where it cannot be cut (see the stack "
                        "below); its records time out and this worker retires after its other slots",
                        t.slot.n,
                    )
                    with open(Path(self.spec.log_dir) / f"worker-{self.worker_id}.log", "a") as log:
                        faulthandler.dump_traceback(file=log, all_threads=True)
                    t.slot.abandon(t.current, t.clock.started or (now_iso(), now))
                    self.inbox.put(WorkerRetiring(self.worker_id, f"slot {t.slot.n} stuck"))
                    retired = True
                    stopping = stopping or self._stop_threads()
            if isinstance(msg, Stop):
                stopping = stopping or self._stop_threads()
            elif isinstance(msg, Assign):
                heart.item_id = msg.jobs[0].item_id
                self.threads[msg.slot].jobs.put(msg)
            if stopping and not any(t.is_alive() and not t.slot.abandoned for t in self.threads):
                return not retired

    def _stop_threads(self) -> bool:
        for t in self.threads:
            t.jobs.put(None)
        return True

    def close(self) -> None:
        for slot in self.slots:  # threads still running send nothing more: their clients are closing
            slot.abandoned = True
        for slot in self.slots:
            slot.close()
        self.keeper.close()


def preload(cfg: Config) -> list[str]:
    """What the process workers are forked from imports first: this module (the runner's side of a
    worker), its sandbox's (docker's client and testcontainers: ~0.15 s of CPU that each of 8 workers
    paid on its way to its first record) and what the harness names, so each worker starts with them
    in memory, shared."""
    harness = harness_class(cfg.harness.kind)
    sandbox = {
        "auto": ["runner.sandbox.docker", "runner.sandbox.local"],
        "docker": ["runner.sandbox.docker"],
        "local": ["runner.sandbox.local"],
    }.get(cfg.sandbox, [])
    return [__name__, *sandbox, harness.__module__, *harness.preload_for(harness_settings(cfg))]


def _on_term(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def worker_main(spec: WorkerSpec, to_supervisor: Connection, tasks: Any, limiter: Budget | None) -> None:
    """Entry point of a worker process (spawned)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the supervisor's to handle
    # SIGTERM (the supervisor's terminate, or its death: die_with_parent) unwinds, so the sandbox and a
    # command harness's processes are removed on the way out.
    signal.signal(signal.SIGTERM, _on_term)
    die_with_parent(spec.supervisor_pid, via_forkserver=True)
    leave_forkserver()
    log_path = log_to_file(spec)
    capture_output(lambda: ", ".join(running.values()) or "-")
    # A supervisor that finds this worker stuck sends SIGABRT first: the stacks land in its log.
    faulthandler.enable(open(log_path, "a"))  # noqa: SIM115 - open for the life of the process
    sys.exit(run_worker(spec, Outbox(to_supervisor), tasks, limiter))


def log_to_file(spec: WorkerSpec) -> Path:
    """This process logs to the run's logs/worker-N.log only."""
    logger.remove()
    log_path = Path(spec.log_dir) / f"worker-{spec.worker}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    add_log_file(log_path)
    return log_path


def run_worker(spec: WorkerSpec, inbox: Any, tasks: Any, limiter: Any) -> int:
    """A worker's life wherever it runs (its own process, or a Ray actor's thread): boot, serve, clean
    up; returns its exit code. `inbox.put(msg)` reaches the supervisor, `tasks.get()` brings its work."""
    logger.info(
        "worker {} starting (pid {}, sandbox {}, harness {})",
        spec.worker,
        os.getpid(),
        spec.sandbox.kind,
        spec.harness.kind,
    )
    if limiter is not None:
        limiter.lane = spec.lane
    worker: Worker | None = None
    # its boot step by step, in its log: what a slow start is read from
    marks = [("start", time.perf_counter())]
    try:
        worker = Worker(spec, inbox, limiter)
        marks.append(("harnesses", time.perf_counter()))
        worker.keeper.boot()
        marks.append(("sandbox", time.perf_counter()))
        worker.start_slots()
        marks.append(("slot 0", time.perf_counter()))
    except BaseException as e:
        if worker is not None:
            worker.close()
        if isinstance(e, SystemExit):  # told to stop while booting: not a boot failure
            raise
        logger.exception("boot failed")
        inbox.put(WorkerFailed(spec.worker, f"{type(e).__name__}: {e}", at_boot=True))
        return EXIT_BOOT_FAILED
    sb = worker.keeper.sandbox
    assert sb is not None
    # the SDKs and the harness are loaded (~230,000 objects): out of the collector's way (runner/heap.py)
    heap.settle()
    marks.append(("settle", time.perf_counter()))
    inbox.put(WorkerReady(spec.worker, sb.id, sb.kind, sb.boot_seconds))
    logger.debug(
        "worker {} ready in {:.2f}s: {}",
        spec.worker,
        marks[-1][1] - marks[0][1],
        ", ".join(f"{name} {t - marks[i][1]:.2f}s" for i, (name, t) in enumerate(marks[1:])),
    )
    heart = Heart(spec.worker, inbox)
    heart.start()
    code = 0
    try:
        if not worker.serve(tasks, heart):
            code = EXIT_RETIRED
    except RunStopped as e:
        logger.error("stopping the run: {}", e)
        inbox.put(WorkerFailed(spec.worker, str(e), at_boot=False))
        code = EXIT_RUN_STOPPED
    finally:
        heart.stop()
        worker.close()
        logger.info("worker {} exiting", spec.worker)
    return code
