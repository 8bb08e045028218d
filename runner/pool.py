"""The worker processes: spawn, watch, kill and reap them. Knows processes, not work.

Like gunicorn's arbiter: a worker whose heartbeat is older than the timeout, or that holds a
chunk far past its time limit, is asked to dump its stack (SIGABRT) and then killed. Spawned,
never forked: workers hold Docker and HTTP clients.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from loguru import logger

from runner.inbox import Inbox
from runner.ratelimit import SharedLimiter
from runner.worker import WorkerSpec, worker_main

KILL_WAIT_SECONDS = 5.0  # after SIGABRT (time to write the stacks), and again after SIGKILL
# After Stop, a worker finishes its record's write-out and removes its sandbox (a docker rm: ~1 s);
# on a second Ctrl-C nobody waits.
STOP_WAIT_SECONDS = 10.0
HARD_STOP_WAIT_SECONDS = 0.5
TERMINATE_WAIT_SECONDS = 3.0  # SIGTERM unwinds a worker through its sandbox's removal


@dataclass
class Chunk:
    """What one slot of a worker holds: the items not yet done, since when, and for how long at most."""

    items: set[int]
    since: float
    limit: float

    def overdue(self, now: float) -> bool:
        return now - self.since > self.limit


@dataclass
class WorkerHandle:
    id: int
    proc: Any
    tasks: Any
    slots: int = 1
    started: float = field(default_factory=time.monotonic)
    ready: bool = False
    last_beat: float = field(default_factory=time.monotonic)
    chunks: dict[int, Chunk] = field(default_factory=dict)  # by slot
    ready_slots: set[int] = field(default_factory=lambda: {0})  # slots > 0 say when their databases are made
    boot_seconds: float = 0.0
    stopping: bool = False
    lane: int = -1

    def holding(self) -> int:
        """Records in flight on this worker."""
        return sum(len(c.items) for c in self.chunks.values())

    def free_slots(self) -> list[int]:
        return [n for n in sorted(self.ready_slots) if n not in self.chunks]

    def done(self, item_id: int) -> bool:
        """An item of this worker finished; True if that freed its slot."""
        for n, chunk in self.chunks.items():
            if item_id in chunk.items:
                chunk.items.discard(item_id)
                if not chunk.items:
                    del self.chunks[n]
                    return True
                return False
        return False

    def send(self, msg: Any) -> None:
        with contextlib.suppress(Exception):  # a dead worker's queue: the reaper will notice
            self.tasks.put(msg)

    @property
    def exitcode(self) -> int | None:
        code: int | None = self.proc.exitcode
        return code


class WorkerPool:
    def __init__(self, ctx: Any, make_spec: Callable[[int], WorkerSpec], inbox: Inbox, limiter: SharedLimiter | None,
                 *, heartbeat_timeout: float) -> None:
        self.ctx, self.make_spec, self.inbox, self.limiter = ctx, make_spec, inbox, limiter
        self.heartbeat_timeout = heartbeat_timeout
        self.workers: dict[int, WorkerHandle] = {}
        self.next_id = 0
        self.spawned = 0

    def spawn(self) -> WorkerHandle:
        wid = self.next_id
        self.next_id += 1
        self.spawned += 1
        tasks = self.ctx.Queue()
        writer = self.inbox.open(self.ctx)
        taken = {h.lane for h in self.workers.values()}
        lane = next((n for n in range(self.limiter.lanes if self.limiter else 0) if n not in taken), -1)
        spec = dataclasses.replace(self.make_spec(wid), lane=lane)
        proc = self.ctx.Process(target=worker_main, args=(spec, writer, tasks, self.limiter),
                                name=f"worker-{wid}", daemon=False)
        try:
            proc.start()
        finally:
            writer.close()  # the worker holds its own copy: its death now reads as end-of-file
        h = self.workers[wid] = WorkerHandle(wid, proc, tasks, slots=spec.slots, lane=lane)
        logger.debug("spawned worker {} (pid {})", wid, proc.pid)
        return h

    def get(self, wid: int) -> WorkerHandle | None:
        return self.workers.get(wid)

    def gone(self) -> Iterator[WorkerHandle]:
        """Workers that exited, or were killed here for a stale heartbeat or an overdue chunk."""
        now = time.monotonic()
        for h in list(self.workers.values()):
            if h.exitcode is None:
                stale = h.ready and now - h.last_beat > self.heartbeat_timeout
                overdue = any(c.overdue(now) for c in h.chunks.values())
                if not (stale or overdue):
                    continue
                logger.warning("worker {} {}; killing it", h.id, "stopped beating" if stale else "is overdue")
                self.kill(h)
            yield h

    def kill(self, h: WorkerHandle) -> None:
        """SIGABRT first (Python prints where it was stuck), then SIGKILL."""
        with contextlib.suppress(ProcessLookupError, TypeError):
            os.kill(h.proc.pid, signal.SIGABRT)
        h.proc.join(KILL_WAIT_SECONDS)
        if h.exitcode is None:
            h.proc.kill()
            h.proc.join(KILL_WAIT_SECONDS)

    def remove(self, h: WorkerHandle) -> str:
        """Forget a worker; say how it ended (signal name or exit code)."""
        h.proc.join(1)
        self.workers.pop(h.id, None)
        if self.limiter is not None and h.exitcode is not None and (freed := self.limiter.reclaim(h.lane)):
            logger.info("worker {} died holding {:g} model call(s) in the shared budget: given back", h.id, freed)
        code = h.exitcode
        if code is not None and code < 0:
            with contextlib.suppress(ValueError):
                return signal.Signals(-code).name
        return f"exit code {code}"

    def stop_all(self, msg: Any) -> None:
        for h in self.workers.values():
            if not h.stopping:
                h.send(msg)
                h.stopping = True

    def shutdown(self, msg: Any, *, hard: bool) -> None:
        self.stop_all(msg)
        deadline = time.monotonic() + (HARD_STOP_WAIT_SECONDS if hard else STOP_WAIT_SECONDS)
        for h in self.workers.values():
            h.proc.join(max(0.0, deadline - time.monotonic()))

    def terminate_rest(self) -> None:
        for h in self.workers.values():
            if h.exitcode is None:
                h.proc.terminate()
                h.proc.join(TERMINATE_WAIT_SECONDS)
            if h.exitcode is None:
                h.proc.kill()
                h.proc.join(KILL_WAIT_SECONDS)
        self.workers.clear()
