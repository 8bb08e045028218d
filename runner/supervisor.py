"""The supervisor: one loop, one inbox; hands out work, records results, replaces dead workers.

Signals are counted as they arrive (runner/signals.py); the loop handles them. What to run next is the
scheduler's call (runner/scheduler.py), the processes are the pool's (runner/pool.py); this
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

from runner.config import Config
from runner.errors import OutputUnwritable
from runner.inbox import Inbox
from runner.messages import (
    Assign,
    Heartbeat,
    ItemDone,
    Job,
    ResultDiscarded,
    SandboxReplaced,
    SlotReady,
    Stop,
    WorkerFailed,
    WorkerReady,
    WorkerRetiring,
)
from runner.pool import Chunk, WorkerHandle, WorkerPool
from runner.progress import Progress
from runner.result import Result, error_result, outcome
from runner.scheduler import Scheduler
from runner.services import Service, ServiceWatch
from runner.signals import SignalInbox
from runner.sink import ResultSink
from runner.slot import ALARM_SLACK_SECONDS
from runner.throttle import Throttle
from runner.worker import EXIT_BOOT_FAILED, EXIT_RETIRED

# A chunk is overdue (its worker stuck where its own alarm cannot reach) past its time limit plus this
# margin: a few of that worker's own boot times (a database reset may be as slow as a boot) and never
# less than the floor. A sandbox replaced mid-chunk restarts the clock, so one retry is never cut.
OVERDUE_FLOOR_SECONDS = 15.0
OVERDUE_BOOTS = 4
STOP_GRACE_AFTER_FAILURE_SECONDS = 5.0
INBOX_WAIT_SECONDS = 0.2
INBOX_BATCH = 1000
STALL_SECONDS = 5.0  # a loop turn this late means we were stopped (SIGSTOP, a suspended VM), not the workers


def default_max_restarts(workers: int) -> int:
    """Like pytest-xdist's --max-worker-restart (4 x workers there): enough for the odd OOM kill or
    crashed harness in every worker, few enough that a harness that always crashes stops the run."""
    return 3 * workers + 10


class Supervisor:
    def __init__(self, cfg: Config, scheduler: Scheduler, pool: WorkerPool, sink: ResultSink, progress: Progress,
                 inbox: Inbox, *, workers: int, services: Sequence[Service] = (),
                 on_worker_lost: Callable[[int], None] | None = None, throttle: Throttle | None = None,
                 prefer: Callable[[Mapping[str, int]], str | None] | None = None) -> None:
        self.cfg, self.scheduler, self.pool, self.sink, self.progress = cfg, scheduler, pool, sink, progress
        self.inbox, self.target_workers, self.services = inbox, workers, ServiceWatch(services)
        self.on_worker_lost = on_worker_lost  # e.g. remove a dead worker's container now, not at the end
        self.throttle = throttle  # --concurrency auto: how many of the slots to keep busy
        self.prefer = prefer  # the run whose records to start first (runner/priority.py), None: plan order
        self.on_booted: Callable[[], None] | None = None  # once every first worker is ready (start-up is over)
        self.max_restarts, self.restarts = (cfg.max_worker_restarts if cfg.max_worker_restarts is not None
                                            else default_max_restarts(workers)), 0
        self.signals = SignalInbox()  # Ctrl-C and SIGTERM, each one counted (two quick Ctrl-C's are two)
        self.stopping = self.hard_stop = False
        self.grace_deadline: float | None = None
        self.error: str | None = None
        self.last_turn = time.monotonic()
        self.read_warned: set[tuple[str, str]] = set()  # result fields already warned about (read_notes)
        self.not_successes = 0  # results that failed, were cut or ended in an error (--maxfail counts them)
        self.stopped_early = False  # --maxfail reached: no more records started
        self.discarded: Counter[str] = Counter()  # results thrown away, by why (the manifest counts them)

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        try:
            with self.signals:
                for _ in range(self.target_workers):
                    self.spawn()
                self.loop()
        finally:
            self.pool.shutdown(Stop(), hard=self.hard_stop)
            self.drain()
            self.pool.terminate_rest()
            self.inbox.close()

    def loop(self) -> None:
        while True:
            self.handle_signals()
            if self.hard_stop:
                return
            msg = self.inbox.get(INBOX_WAIT_SECONDS)
            for _ in range(INBOX_BATCH):  # all that waits, before judging anyone's silence
                if msg is None:
                    break
                self.dispatch(msg)
                msg = self.inbox.get(0)
            self.notice_stall()
            if not self.stopping and (why := self.services.check()):
                self.fail(why)
            self.reap()
            self.steer()
            self.progress.flying(self.scheduler.in_flight())
            self.progress.tick()
            if not self.pool.workers:
                return
            if self.stopping and self.grace_deadline and time.monotonic() > self.grace_deadline:
                logger.warning("grace period over; stopping workers now")
                return

    def notice_stall(self) -> None:
        """Heartbeats are judged by our clock: after we were stopped, every worker would look silent."""
        now = time.monotonic()
        if now - self.last_turn > STALL_SECONDS:
            logger.warning("the supervisor did not run for {:.0f}s; heartbeats judged from now", now - self.last_turn)
            for h in self.pool.workers.values():
                h.last_beat = max(h.last_beat, now)
        self.last_turn = now

    def dispatch(self, msg: Any) -> None:
        match msg:
            case WorkerReady():
                self.on_ready(msg)
            case Heartbeat():
                self.on_heartbeat(msg)
            case ItemDone():
                self.on_item_done(msg)
            case SandboxReplaced():
                logger.warning("worker {}: sandbox {} died ({}); replaced by {}", msg.worker, msg.old_id, msg.reason,
                               msg.new_id)
                if (h := self.pool.get(msg.worker)) is not None:
                    for chunk in h.chunks.values():  # each chunk's retry starts now, with its full time limit
                        chunk.since = time.monotonic()
            case ResultDiscarded():
                self.on_discarded(msg)
            case SlotReady():
                if (h := self.pool.get(msg.worker)) is not None:
                    h.ready_slots.add(msg.slot)
                    self.assign(h)
            case WorkerRetiring():
                logger.warning("worker {} retires ({}): a new one takes its place", msg.worker, msg.reason)
                if (h := self.pool.get(msg.worker)) is not None:
                    h.stopping = True  # no more work for it; it exits once its other slots are done
            case WorkerFailed():
                self.fail(f"worker {msg.worker} {'could not boot' if msg.at_boot else 'stopped the run'}: {msg.error}")
            case _:
                raise TypeError(f"unexpected message {msg!r}")

    def drain(self) -> None:
        """Everything already in the inbox (a result sent just before a worker died counts)."""
        while (msg := self.inbox.get(0.05)) is not None:
            self.dispatch(msg)

    # ------------------------------------------------------------------ messages
    def on_ready(self, m: WorkerReady) -> None:
        """Emitted once a worker's sandbox answers and its harness is attached."""
        h = self.pool.get(m.worker)
        if h is None:
            return
        h.ready, h.last_beat, h.boot_seconds = True, time.monotonic(), m.boot_seconds
        self.progress.worker(m.worker).sandbox = f"{m.sandbox_kind} {m.boot_seconds:.2f}s"
        logger.info("worker {} ready: {} sandbox {} in {:.2f}s", m.worker, m.sandbox_kind, m.sandbox_id,
                    m.boot_seconds)
        self.assign(h)
        booted = self.on_booted
        if booted is not None and all(w.ready for w in self.pool.workers.values()):
            self.on_booted = None
            booted()

    def on_heartbeat(self, m: Heartbeat) -> None:
        h = self.pool.get(m.worker)
        if h is not None:
            h.last_beat = time.monotonic()
            v = self.progress.worker(m.worker)
            v.rss_mb, v.cpu = m.rss_mb, m.cpu_percent

    def on_item_done(self, m: ItemDone) -> None:
        self.record(m.worker, Result.model_validate(m.result))
        h = self.pool.get(m.worker)
        if h is not None:
            h.last_beat = time.monotonic()
            if h.done(m.item_id):
                if not h.chunks:
                    self.progress.worker(h.id).item = "-"
                self.assign(h)

    def on_discarded(self, m: ResultDiscarded) -> None:
        """Emitted when a worker threw a result away (its sandbox did not serve the whole record) and runs
        the record again: that is the record's next attempt."""
        self.scheduler.again(m.worker, m.item_id)
        if (h := self.pool.get(m.worker)) is not None:
            for chunk in h.chunks.values():  # its rerun starts now, with its full time limit
                if m.item_id in chunk.items:
                    chunk.since = time.monotonic()
        self.discarded["sandbox_lost"] += 1  # the one reason a worker discards a result today
        self.progress.discarded += 1

    # ------------------------------------------------------------------ work
    def assign(self, h: WorkerHandle) -> None:
        """A chunk for each free slot of the worker; Stop once there is no work left and it holds none."""
        if self.stopping or not h.ready or h.stopping:
            return
        for slot in h.free_slots():
            if self.throttle is not None and (self.scheduler.in_flight() >= self.throttle.target or h.holding()
                                              >= -(-self.throttle.target // max(1, len(self.pool.workers)))):
                return  # held back (its share of the target in use), not out of work: no Stop
            chunk = self.scheduler.take(h.id, self.prefer(self.scheduler.left) if self.prefer is not None else None)
            if not chunk:
                break
            h.chunks[slot] = Chunk({a.item.id for a in chunk}, time.monotonic(),
                                   self.cfg.conversation_timeout_seconds * len(chunk) + ALARM_SLACK_SECONDS
                                   + max(OVERDUE_FLOOR_SECONDS, OVERDUE_BOOTS * h.boot_seconds))
            h.send(Assign(tuple(Job(a.item.id, a.item.run, a.item.record_id, a.item.index, a.attempt, a.item.epoch)
                                for a in chunk), slot))
            first = chunk[0].item
            self.progress.worker(h.id).item = f"{first.run}:{first.record_id}" + (
                f" +{len(h.chunks) - 1} slots" if len(h.chunks) > 1 else f" +{len(chunk) - 1}" if len(chunk) > 1
                else "")
        if not h.chunks:
            h.send(Stop())
            h.stopping = True

    def steer(self) -> None:
        """--concurrency auto: let the throttle judge the window; when it allows more, fill slots."""
        t = self.throttle
        if t is None or self.stopping:
            return
        before = t.target
        if t.observe(time.monotonic(), self.scheduler.in_flight(), self.scheduler.has_pending()):
            logger.info("concurrency target {} -> {}: {}", before, t.target, t.why)
            self.progress.target, self.progress.target_why = t.target, t.why
        # Room under the target (it grew, or records finished elsewhere), or the work ran out while a
        # worker was held back: either way an idle slot gets work, or its worker gets Stop.
        for h in list(self.pool.workers.values()):
            if h.ready and not h.stopping and h.free_slots():
                self.assign(h)

    def record(self, worker: int, result: Result) -> None:
        if result.item_id is not None and not self.scheduler.complete(worker, result.item_id):
            return  # exactly once: a late duplicate from a worker that was replaced
        try:
            self.sink.write(result)
        except OutputUnwritable as e:  # disk full: stop computing results that cannot be kept
            self.fail(f"{e}; the results written so far are kept: make room and run the same command again")
            return
        self.progress.result(result)
        self._count_toward_maxfail(result)
        for field, note in result.read_notes.items():
            kind = note.partition(":")[0]
            if (field, kind) not in self.read_warned:  # once per field and way of reading: not per record
                self.read_warned.add((field, kind))
                logger.warning("{}: {} in {}:{} (and perhaps others){}", field, note, result.run, result.record_id,
                               "" if kind == "read from a string" else ": the report leaves it out")
        if self.throttle is not None:
            u = result.usage
            live = u.llm_calls - u.cache_hits
            per_call = u.latency_seconds / live if live > 0 and u.latency_seconds else None
            self.throttle.result(per_call or result.wall_seconds or 0.0, u.rate_limited, live)

    def _count_toward_maxfail(self, result: Result) -> None:
        if self.cfg.maxfail is None or outcome(result) not in ("failure", "cut", "error"):
            return
        self.not_successes += 1
        if self.not_successes >= self.cfg.maxfail and not self.stopping:
            logger.warning("{} result(s) did not succeed (--maxfail {}): starting no more records; those in "
                           "flight finish", self.not_successes, self.cfg.maxfail)
            self.stopped_early = True
            self.begin_stop(grace=True)

    def reap(self) -> None:
        """Notice workers that are gone; requeue what they held; replace them while work remains."""
        for h in list(self.pool.gone()):
            self.drain()
            how = self.pool.remove(h)
            self.progress.workers.pop(h.id, None)
            if h.exitcode == EXIT_RETIRED and not self.error:
                self._requeue(h, f"retired ({how})")
                if not self.stopping and self.scheduler.has_pending():
                    self.spawn()  # not a death: its stuck record already has its result
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
        """What the worker held goes back in line; what ran out of attempts is recorded as failed."""
        for a in self.scheduler.lose(h.id):
            self.record(h.id, error_result(a.item.run, a.item.record_id, a.item.index,
                                           f"worker {how} on each of {a.attempt} attempts",
                                           kind="worker_died", item_id=a.item.id, attempt=a.attempt,
                                           epoch=a.item.epoch))

    def replace_worker(self) -> None:
        if self.stopping or not (self.scheduler.has_pending() or self.scheduler.in_flight()):
            return
        self.restarts += 1
        if self.restarts > self.max_restarts:
            self.fail(f"workers died {self.restarts} times (max_worker_restarts {self.max_restarts}); stopping "
                      "(see logs/worker-*.log)")
        elif self.scheduler.has_pending():
            self.spawn()

    def spawn(self) -> None:
        self.progress.worker(self.pool.spawn().id)

    def fail(self, error: str) -> None:
        if self.error is None:
            self.error = error
            logger.error("{}", error)
        self.begin_stop(grace=False)

    # ------------------------------------------------------------------ signals
    def handle_signals(self) -> None:
        for signum in self.signals.take():
            name = signal.Signals(signum).name
            if self.stopping:
                logger.warning("second {}: stopping now", name)
                self.hard_stop = True
            else:
                logger.warning("{}: finishing running records (up to {:.0f}s), then stopping; Ctrl-C again to "
                               "stop at once", name, self.cfg.shutdown_grace_seconds)
                self.begin_stop(grace=True)

    def begin_stop(self, *, grace: bool) -> None:
        if not self.stopping:
            self.stopping = True
            self.grace_deadline = time.monotonic() + (self.cfg.shutdown_grace_seconds if grace
                                                      else STOP_GRACE_AFTER_FAILURE_SECONDS)
            self.pool.stop_all(Stop())

    @property
    def interrupted(self) -> bool:
        return self.stopping and self.error is None and (self.scheduler.has_pending()
                                                        or self.scheduler.in_flight() > 0)
