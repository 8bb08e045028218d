"""What each worker is sent next: a chunk per free slot, from the scheduler, within the concurrency
throttle's target, each with the time after which the scheduler calls it overdue; Stop once there is no
work left for a worker that holds none. The supervisor's loop decides when (runner/engine/supervisor.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from loguru import logger

from runner.budget.throttle import Throttle
from runner.engine.pool import WorkerHandle, WorkerPool
from runner.engine.progress import Progress
from runner.engine.scheduler import Scheduler
from runner.wire.messages import Assign, Job, Stop
from runner.worker.slot import ALARM_SLACK_SECONDS

# A chunk is overdue (its worker stuck where its own alarm cannot reach) past its time limit plus this
# margin: a few of that worker's own boot times (a database reset may be as slow as a boot) and never
# less than the floor. A sandbox replaced mid-chunk restarts the clock, so one retry is never cut.
OVERDUE_FLOOR_SECONDS = 15.0
OVERDUE_BOOTS = 4


class Dispatcher:
    def __init__(
        self,
        conversation_limit: float,
        scheduler: Scheduler,
        pool: WorkerPool,
        progress: Progress,
        throttle: Throttle | None = None,
        prefer: Callable[[Mapping[str, int]], str | None] | None = None,
    ) -> None:
        self.scheduler, self.pool, self.progress = scheduler, pool, progress
        self.conversation_limit = conversation_limit  # a record's time limit, seconds
        self.throttle = throttle  # --concurrency auto: how many of the slots to keep busy
        # the run whose records to start first (runner/budget/priority.py), None: plan order
        self.prefer = prefer

    def assign(self, h: WorkerHandle) -> None:
        """A chunk for each free slot of the worker; Stop once there is no work left and it holds none."""
        if not h.ready or h.stopping:
            return
        s = self.scheduler
        for slot in s.free_slots(h.id, h.ready_slots):
            if self.held_back(h):
                return  # its share of the target in use, not out of work: no Stop
            chunk = s.take(
                h.id,
                slot,
                prefer=self.prefer(s.left) if self.prefer is not None else None,
                now=time.monotonic(),
                limit_per_item=self.conversation_limit,
                margin=ALARM_SLACK_SECONDS + max(OVERDUE_FLOOR_SECONDS, OVERDUE_BOOTS * h.boot_seconds),
            )
            if not chunk:
                break
            h.send(
                Assign(
                    tuple(
                        Job(a.item.id, a.item.run, a.item.record_id, a.item.index, a.attempt, a.item.epoch)
                        for a in chunk
                    ),
                    slot,
                )
            )
            first, held = chunk[0].item, s.slots_held(h.id)
            self.progress.worker(h.id).item = f"{first.run}:{first.record_id}" + (
                f" +{held - 1} slots" if held > 1 else f" +{len(chunk) - 1}" if len(chunk) > 1 else ""
            )
        if not s.busy(h.id):
            h.send(Stop())
            h.stopping = True

    def held_back(self, h: WorkerHandle) -> bool:
        """Under --concurrency auto: the target is in use, or this worker holds its share of it."""
        t = self.throttle
        return t is not None and (
            self.scheduler.in_flight() >= t.target
            or self.scheduler.holds(h.id) >= -(-t.target // max(1, len(self.pool.workers)))
        )

    def steer(self) -> None:
        """--concurrency auto: let the throttle judge the window; when it allows more, fill slots."""
        t = self.throttle
        if t is None:
            return
        before = t.target
        if t.observe(time.monotonic(), self.scheduler.in_flight(), self.scheduler.has_pending()):
            logger.info("concurrency target {} -> {} ({}): {}", before, t.target, t.signal, t.why)
        # every window's verdict, held or changed: the progress line says which signal decided
        self.progress.target, self.progress.target_why = t.target, f"{t.signal}: {t.why}"
        # Room under the target (it grew, or records finished elsewhere), or the work ran out while a
        # worker was held back: either way an idle slot gets work, or its worker gets Stop.
        for h in list(self.pool.workers.values()):
            if h.ready and not h.stopping and self.scheduler.free_slots(h.id, h.ready_slots):
                self.assign(h)
