"""The supervisor: one loop, one inbox; hands out work, records results, replaces dead workers.

Signals are counted as they arrive (runner/engine/signals.py); the loop handles them. Their handlers stay
installed until every worker is gone, as gunicorn's arbiter stops under its own: restored before the workers'
shutdown (which waits up to 10 s), a Ctrl-C or SIGTERM there escaped the supervisor, and the results workers
still sent, the results' last rewrite, the manifest's end and the report were lost. What to run next is the
scheduler's call (runner/engine/scheduler.py), the processes are the pool's (runner/engine/pool.py); this
module joins them and is the only writer of results. A worker that dies is replaced and what it
held requeued (bounded attempts); a worker that cannot boot stops the run instead.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from loguru import logger

from runner.budget.gates import Gates
from runner.budget.throttle import Throttle
from runner.engine.dispatch import Dispatcher
from runner.engine.pool import WorkerHandle, WorkerPool
from runner.engine.progress import Progress
from runner.engine.recorder import Recorder
from runner.engine.scheduler import Scheduler
from runner.engine.services import Service, ServiceWatch
from runner.engine.settings import EngineSettings
from runner.engine.signals import SignalInbox
from runner.errors import OutputUnwritable
from runner.results.result import Result
from runner.results.sink import ResultSink
from runner.wire.inbox import Inbox
from runner.wire.messages import (
    Heartbeat,
    ItemDone,
    ResultDiscarded,
    SandboxReplaced,
    SlotReady,
    Stop,
    WorkerFailed,
    WorkerReady,
    WorkerRetiring,
)
from runner.worker.main import EXIT_BOOT_FAILED, EXIT_RETIRED

STOP_GRACE_AFTER_FAILURE_SECONDS = 15.0  # what records in flight get to finish after an error stops the run
INBOX_WAIT_SECONDS = 0.2
SPAWN_WAIT_SECONDS = 0.01  # while first workers wait for their sandboxes' launch: how soon to look again
INBOX_BATCH = 1000


class Supervisor:
    def __init__(
        self,
        settings: EngineSettings,
        scheduler: Scheduler,
        pool: WorkerPool,
        sink: ResultSink,
        progress: Progress,
        inbox: Inbox,
        *,
        workers: int,
        services: Sequence[Service] = (),
        on_worker_lost: Callable[[int], None] | None = None,
        throttle: Throttle | None = None,
        prefer: Callable[[Mapping[str, int]], str | None] | None = None,
        gates: Gates | None = None,
        signals: SignalInbox | None = None,
    ) -> None:
        self.settings, self.scheduler, self.pool, self.progress = settings, scheduler, pool, progress
        self.inbox, self.target_workers, self.services = inbox, workers, ServiceWatch(services)
        self.on_worker_lost = on_worker_lost  # e.g. remove a dead worker's container now, not at the end
        self.dispatcher = Dispatcher(settings.conversation_limit, scheduler, pool, progress, throttle, prefer)
        self.recorder = Recorder(settings.maxfail, scheduler, sink, progress, throttle, gates)
        # once every first worker is ready (start-up is over)
        self.on_booted: Callable[[], None] | None = None
        # once every item is done, while the workers shut down (their sandboxes' removal takes ~1 s): the
        # results' last rewrite goes on meanwhile, not after
        self.on_done: Callable[[], object] | None = None
        # Ctrl-C and SIGTERM, each one counted (two quick Ctrl-C's are two): the command's, or its own
        self.signals = signals or SignalInbox()
        self.stopping = self.hard_stop = self.signalled = False
        self.grace_deadline: float | None = None
        self.error: str | None = None
        self.stopped_early = False  # --maxfail reached: no more records started
        self.discarded: Counter[str] = Counter()  # results thrown away, by why (the manifest counts them)

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        with self.signals:  # until every worker is gone (module doc)
            self.signals.hold()
            try:
                self.pool.unspawned = self.target_workers
                self.loop()
            finally:
                self.pool.shutdown(Stop(), hard=self.hard_stop, meanwhile=self.while_stopping)
                self.drain()
                self.pool.terminate_rest()
                self.inbox.close()

    def loop(self) -> None:
        while True:
            self.handle_signals()
            if self.hard_stop:
                return
            for h in self.pool.spawn_first(stopping=self.stopping):
                self.progress.worker(h.id)
            msg = self.inbox.get(SPAWN_WAIT_SECONDS if self.pool.unspawned else INBOX_WAIT_SECONDS)
            for _ in range(INBOX_BATCH):  # all that waits, before judging anyone's silence
                if msg is None:
                    break
                self.dispatch(msg)
                msg = self.inbox.get(0)
            if not self.stopping and (why := self.services.check()):
                self.fail(why)
            self.reap()
            if not self.stopping:
                self.dispatcher.steer()
                self.all_done()
            self.progress.flying(self.scheduler.in_flight())
            self.progress.tick()
            if not self.pool.workers and not self.pool.unspawned:
                return
            if self.stopping and self.grace_deadline and time.monotonic() > self.grace_deadline:
                logger.warning("grace period over; stopping workers now")
                self.hard_stop = True  # the records still running were given their time: not waited for again
                return

    def all_done(self) -> None:
        """`on_done`, once, when nothing is left to run or running
        (its failure is the run's end's to meet again)."""
        if self.on_done is None or self.scheduler.has_pending() or self.scheduler.in_flight():
            return
        done, self.on_done = self.on_done, None
        try:
            done()
        except Exception as e:  # done again at the run's end, where its error is reported
            logger.debug("at the last result: {}", e)

    def dispatch(self, msg: Any) -> None:
        match msg:
            case ItemDone():
                self.on_item_done(msg)
            case ResultDiscarded():
                self.on_discarded(msg)
            case WorkerReady() | Heartbeat() | SandboxReplaced() | SlotReady() | WorkerRetiring():
                self.on_state(msg)
            case WorkerFailed():
                self.fail(
                    f"worker {msg.worker} {'could not boot' if msg.at_boot else 'stopped the run'}: "
                    f"{msg.error}"
                )
            case _:
                raise TypeError(f"unexpected message {msg!r}")

    def drain(self, wait: float = 0.0) -> None:
        """Everything in the inbox, the first message waited for up to `wait` s (a result sent just before a
        worker died, or as it stops, counts: it is in its pipe)."""
        msg = self.inbox.get(wait)
        while msg is not None:
            self.dispatch(msg)
            msg = self.inbox.get(0)

    def while_stopping(self, seconds: float) -> bool:
        """The pool's wait for its workers to exit: what they send meanwhile is recorded, and a signal now (a
        second Ctrl-C, a SIGTERM) ends the wait: True, stop them at once."""
        self.drain(seconds)
        self.hard_stop = self.hard_stop or bool(self.signals.take())
        return self.hard_stop

    # ------------------------------------------------------------------ messages
    def on_state(self, msg: WorkerReady | Heartbeat | SandboxReplaced | SlotReady | WorkerRetiring) -> None:
        """What a worker says of itself (ready, alive, a slot ready, its sandbox replaced, retiring): the pool
        keeps it; what follows from it here."""
        h = self.pool.note(msg)
        match msg:
            case WorkerReady() if h is not None:
                self.progress.worker(h.id).sandbox = f"{msg.sandbox_kind} {msg.boot_seconds:.2f}s"
                self.assign(h)
                if (booted := self.on_booted) is not None and self.pool.all_ready():
                    self.on_booted = None
                    booted()
            case Heartbeat() if h is not None:
                v = self.progress.worker(h.id)
                v.rss_mb, v.cpu = msg.rss_mb, msg.cpu_percent
            case SlotReady() if h is not None:
                self.assign(h)
            case SandboxReplaced():  # each chunk's retry starts now, with its full time limit
                self.scheduler.restart_clocks(msg.worker, time.monotonic())

    def on_item_done(self, m: ItemDone) -> None:
        self.record(m.worker, Result.model_validate(m.result))
        h = self.pool.get(m.worker)
        if h is not None:
            h.last_beat = time.monotonic()
            if not self.scheduler.busy(h.id):
                self.progress.worker(h.id).item = "-"
            self.assign(h)

    def on_discarded(self, m: ResultDiscarded) -> None:
        """A worker threw a result away (its sandbox did not serve the whole record, or the slot's process
        died under it): the record's next attempt."""
        self.scheduler.again(m.worker, m.item_id, time.monotonic())
        self.discarded[m.lost] += 1
        self.progress.discarded += 1

    # ------------------------------------------------------------------ work
    def assign(self, h: WorkerHandle) -> None:
        if not self.stopping:
            self.dispatcher.assign(h)

    def record(self, worker: int, result: Result) -> None:
        try:
            reached_maxfail = self.recorder.record(worker, result)
        except OutputUnwritable as e:  # disk full: stop computing results that cannot be kept
            self.fail(f"{e}; the results written so far are kept: make room and run the same command again")
            return
        if reached_maxfail and not self.stopping:
            self.stopped_early = True
            self.begin_stop(grace=True)

    def reap(self) -> None:
        """Notice workers that are gone; requeue what they held; replace them while work remains."""
        for h in list(self.pool.gone(self.scheduler.overdue(time.monotonic()))):
            self.drain()
            how = self.pool.remove(h)
            self.progress.workers.pop(h.id, None)
            if h.exitcode == EXIT_RETIRED and not self.error:
                self._requeue(h, f"retired ({how})")
                if not self.stopping and self.scheduler.has_pending():
                    self.progress.worker(self.pool.spawn().id)  # not a death: its stuck record has its result
                continue
            if (h.stopping and h.exitcode == 0) or h.exitcode == EXIT_BOOT_FAILED or self.error:
                self.scheduler.lose(h.id)
                continue  # a clean exit, or WorkerFailed already said why
            logger.warning("worker {} died ({})", h.id, how)
            if self.on_worker_lost is not None:  # off the loop: a docker call takes a while
                threading.Thread(target=self.on_worker_lost, args=(h.id,), daemon=True).start()
            self._requeue(h, f"died ({how})")
            self.replace_worker()

    def _requeue(self, h: WorkerHandle, how: str) -> None:
        for result in self.recorder.lost(h.id, how):
            self.record(h.id, result)

    def replace_worker(self) -> None:
        if self.stopping or not (self.scheduler.has_pending() or self.scheduler.in_flight()):
            return
        if (refused := self.pool.restart()) is not None:
            self.fail(refused)
        elif self.scheduler.has_pending():
            self.progress.worker(self.pool.spawn().id)

    def fail(self, error: str) -> None:
        if self.error is None:
            self.error = error
            logger.error("{}", error)
        self.begin_stop(grace=False)

    # ------------------------------------------------------------------ signals
    def handle_signals(self) -> None:
        for signum in self.signals.take():
            name, self.signalled = signal.Signals(signum).name, True
            if self.stopping:
                if not self.hard_stop:  # a third is as good as the second
                    logger.warning("second {}: stopping now", name)
                self.hard_stop = True
            else:
                logger.warning(
                    "{}: finishing running records (up to {:.0f}s), then stopping; Ctrl-C again to "
                    "stop at once",
                    name,
                    self.settings.shutdown_grace_seconds,
                )
                self.begin_stop(grace=True)

    def begin_stop(self, *, grace: bool) -> None:
        if not self.stopping:
            self.stopping = True
            self.grace_deadline = time.monotonic() + (
                self.settings.shutdown_grace_seconds if grace else STOP_GRACE_AFTER_FAILURE_SECONDS
            )
            self.pool.stop_all(Stop())

    @property
    def interrupted(self) -> bool:
        """Stopped by a signal with records left (--maxfail's stop is `stopped_early`, an error's `error`)."""
        return (
            self.signalled
            and not self.error
            and bool(self.scheduler.has_pending() or self.scheduler.in_flight())
        )
