"""The workers: spawn, watch, kill and reap them. Knows workers, not work.

Like gunicorn's arbiter: a worker whose heartbeat is older than the timeout, or that holds a
chunk far past its time limit, is asked to dump its stack (SIGABRT) and then killed. Where a
worker runs is its transport's business: a local process (here: spawned, never forked, since
workers hold Docker and HTTP clients) or a Ray actor (runner/engine/ray_executor.py). The pool and the
supervisor see only a `Link` to each worker and one inbox for all of them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from loguru import logger

from runner.wire.inbox import Inbox, Tasks
from runner.wire.messages import Heartbeat, SandboxReplaced, SlotReady, WorkerReady, WorkerRetiring
from runner.worker.main import WorkerSpec, worker_main

KILL_WAIT_SECONDS = 5.0  # after SIGABRT (time to write the stacks), and again after SIGKILL
STALL_SECONDS = 5.0  # a loop turn this late means the supervisor was stopped (SIGSTOP, a suspended VM)
# After Stop, a worker finishes its record's write-out and removes its sandbox (a docker rm: ~1 s);
# on a second Ctrl-C nobody waits.
STOP_WAIT_SECONDS = 10.0
HARD_STOP_WAIT_SECONDS = 0.5
STOP_POLL_SECONDS = 0.1  # how often a shutdown looks at the workers' exits (and the supervisor at its inbox)
TERMINATE_WAIT_SECONDS = 3.0  # SIGTERM unwinds a worker through its sandbox's removal


class Link(Protocol):
    """One worker, wherever it runs."""

    @property
    def exitcode(self) -> int | None: ...  # None while it runs; negative: killed by that signal

    def send(self, msg: Any) -> None: ...

    def abort(self) -> None: ...  # stuck: dump its stacks if it can, then kill it; returns at once

    def join(self, timeout: float) -> None: ...

    def terminate(self) -> None: ...  # unwind (its sandbox removed on the way out)

    def kill(self) -> None: ...


class Transport(Protocol):
    """Starts workers and carries their messages to the supervisor's one inbox."""

    inbox: Any  # get(timeout) -> message or None; close()

    def start(self, spec: WorkerSpec, limiter: Any) -> Link: ...


class ProcessLink:
    def __init__(self, proc: Any, tasks: Any) -> None:
        self.proc, self.tasks = proc, tasks

    @property
    def exitcode(self) -> int | None:
        code: int | None = self.proc.exitcode
        return code

    def send(self, msg: Any) -> None:
        self.tasks.put(msg)

    def abort(self) -> None:
        """SIGABRT now (Python prints where it was stuck), SIGKILL KILL_WAIT_SECONDS later if it still
        runs; returns at once: the supervisor's loop (signals, other workers' results) never waits on it.
        The pid cannot be another process's meanwhile: nobody reaps it before its exit code is read."""
        with contextlib.suppress(ProcessLookupError, TypeError):
            os.kill(self.proc.pid, signal.SIGABRT)
        timer = threading.Timer(KILL_WAIT_SECONDS, self._kill_if_running)
        timer.daemon = True
        timer.start()

    def _kill_if_running(self) -> None:
        with contextlib.suppress(Exception):
            if self.proc.exitcode is None:
                self.proc.kill()

    def join(self, timeout: float) -> None:
        self.proc.join(timeout)

    def terminate(self) -> None:
        self.proc.terminate()
        self.proc.join(TERMINATE_WAIT_SECONDS)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join(KILL_WAIT_SECONDS)


class ProcessTransport:
    """Workers as local processes, each writing to its own pipe of the inbox (runner/wire/inbox.py)."""

    def __init__(self, ctx: Any) -> None:
        self.ctx, self.inbox = ctx, Inbox()

    def start(self, spec: WorkerSpec, limiter: Any) -> ProcessLink:
        tasks = Tasks(self.ctx)
        writer = self.inbox.open(self.ctx)
        proc = self.ctx.Process(
            target=worker_main,
            args=(spec, writer, tasks, limiter),
            name=f"worker-{spec.worker}",
            daemon=False,
        )
        try:
            proc.start()
        finally:
            writer.close()  # the worker holds its own copy: its death now reads as end-of-file
        logger.debug("spawned worker {} (pid {})", spec.worker, proc.pid)
        return ProcessLink(proc, tasks)


@dataclass
class WorkerHandle:
    id: int
    link: Link
    slots: int = 1
    started: float = field(default_factory=time.monotonic)
    ready: bool = False
    last_beat: float = field(default_factory=time.monotonic)
    ready_slots: set[int] = field(default_factory=lambda: {0})  # slots > 0 say when their databases are made
    killing_since: float | None = None  # when the pool began to kill it (stale or overdue)
    boot_seconds: float = 0.0
    stopping: bool = False
    lane: int = -1

    def send(self, msg: Any) -> None:
        with contextlib.suppress(Exception):  # a dead worker's queue: the reaper will notice
            self.link.send(msg)

    @property
    def exitcode(self) -> int | None:
        return self.link.exitcode


def restart_cap(configured: int | None, workers: int) -> int:
    """max_worker_restarts, or like pytest-xdist's --max-worker-restart (4 x workers there): enough for
    the odd OOM kill or crashed harness in every worker, few enough that a harness that always crashes
    stops the run."""
    return configured if configured is not None else 3 * workers + 10


class WorkerPool:
    def __init__(
        self,
        transport: Transport,
        make_spec: Callable[[int], WorkerSpec],
        limiter: Any,
        *,
        heartbeat_timeout: float,
        max_restarts: int,
        spawnable: Callable[[int], bool] | None = None,
    ) -> None:
        """`spawnable(id)`: whether worker id's spec is made without waiting (its sandbox launched ahead
        is): the supervisor's loop spawns the first workers as they can be, instead of waiting on each."""
        self.transport, self.make_spec, self.limiter = transport, make_spec, limiter
        self.spawnable = spawnable or (lambda wid: True)
        self.heartbeat_timeout = heartbeat_timeout
        self.workers: dict[int, WorkerHandle] = {}
        self.next_id = 0
        self.last_turn = time.monotonic()  # the supervisor's last loop turn (excuse_stall)
        self.restarts, self.max_restarts = 0, max_restarts  # workers replaced after dying, and the cap
        self.unspawned = 0  # first workers not spawned yet (spawn_first)

    def spawn(self) -> WorkerHandle:
        wid = self.next_id
        self.next_id += 1
        taken = {h.lane for h in self.workers.values()}
        lane = next((n for n in range(self.limiter.lanes if self.limiter else 0) if n not in taken), -1)
        spec = dataclasses.replace(self.make_spec(wid), lane=lane)
        h = self.workers[wid] = WorkerHandle(
            wid, self.transport.start(spec, self.limiter), slots=spec.slots, lane=lane
        )
        return h

    def spawn_first(self, *, stopping: bool) -> list[WorkerHandle]:
        """The first workers, each as soon as its spec is made without waiting: a worker whose sandbox is
        still being launched holds neither the supervisor's loop nor the workers before it, which get
        records meanwhile. The very first is spawned at once (there is nothing else to do)."""
        if stopping:
            self.unspawned = 0
        spawned = []
        while self.unspawned and (self.spawnable(self.next_id) or not self.workers):
            spawned.append(self.spawn())
            self.unspawned -= 1
        return spawned

    def all_ready(self) -> bool:
        """Every first worker spawned and ready: start-up is over."""
        return not self.unspawned and all(w.ready for w in self.workers.values())

    def get(self, wid: int) -> WorkerHandle | None:
        return self.workers.get(wid)

    def note(
        self, msg: WorkerReady | Heartbeat | SandboxReplaced | SlotReady | WorkerRetiring
    ) -> WorkerHandle | None:
        """What a worker says of its own state; its handle, if it is still one of ours."""
        h = self.workers.get(msg.worker)
        if h is not None and isinstance(msg, WorkerReady | Heartbeat):
            h.last_beat = time.monotonic()
        match msg:
            case WorkerReady() if h is not None:  # its sandbox answers and its harness is attached
                h.ready, h.boot_seconds = True, msg.boot_seconds
                logger.info(
                    "worker {} ready: {} sandbox {} in {:.2f}s",
                    msg.worker,
                    msg.sandbox_kind,
                    msg.sandbox_id,
                    msg.boot_seconds,
                )
            case SandboxReplaced():
                logger.warning(
                    "worker {}: sandbox {} died ({}); replaced by {}",
                    msg.worker,
                    msg.old_id,
                    msg.reason,
                    msg.new_id,
                )
            case SlotReady():
                if h is not None:
                    h.ready_slots.add(msg.slot)
            case WorkerRetiring():
                logger.warning("worker {} retires ({}): a new one takes its place", msg.worker, msg.reason)
                if h is not None:
                    h.stopping = True  # no more work for it; it exits once its other slots are done
        return h

    def restart(self) -> str | None:
        """Count a dead worker's replacement: None while under the cap, else why the run must stop (a
        harness that kills every worker it runs in would otherwise be restarted forever)."""
        self.restarts += 1
        if self.restarts > self.max_restarts:
            return (
                f"workers died {self.restarts} times (max_worker_restarts {self.max_restarts}); stopping "
                "(see logs/worker-*.log)"
            )
        return None

    def excuse_stall(self) -> float:
        """Heartbeats are judged by the supervisor's clock: after it was stopped itself (SIGSTOP, a
        suspended VM), every worker would look silent. A judgement that late after the last one: judged
        from now. Returns that now, for the judgement to be made at the same instant (a pause that lands
        after it, before the judgement, would otherwise still read as every worker's silence)."""
        now = time.monotonic()
        if now - self.last_turn > STALL_SECONDS:
            logger.warning(
                "the supervisor did not run for {:.0f}s; heartbeats judged from now", now - self.last_turn
            )
            for h in self.workers.values():
                h.last_beat = max(h.last_beat, now)
        self.last_turn = now
        return now

    def gone(self, overdue: Collection[int] = ()) -> Iterator[WorkerHandle]:
        """Workers that exited, including those killed here for a stale heartbeat or an overdue chunk (the
        scheduler's judgement, `overdue`), once their exit is seen: the kill itself never waits."""
        now = self.excuse_stall()
        for h in list(self.workers.values()):
            if h.exitcode is None:
                if h.killing_since is not None:
                    continue  # being killed: gone when its exit code shows
                stale = h.ready and now - h.last_beat > self.heartbeat_timeout
                if stale or h.id in overdue:
                    logger.warning(
                        "worker {} {}; killing it", h.id, "stopped beating" if stale else "is overdue"
                    )
                    self.kill(h)
                if h.exitcode is None:
                    continue
            yield h

    def kill(self, h: WorkerHandle) -> None:
        h.killing_since = time.monotonic()
        h.link.abort()

    def remove(self, h: WorkerHandle) -> str:
        """Forget a worker; say how it ended (signal name or exit code)."""
        h.link.join(1)
        self.workers.pop(h.id, None)
        if self.limiter is not None and h.exitcode is not None and (freed := self.limiter.reclaim(h.lane)):
            logger.info(
                "worker {} died holding {:g} model call(s) in the shared budget: given back", h.id, freed
            )
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

    def shutdown(self, msg: Any, *, hard: bool, meanwhile: Callable[[float], bool]) -> None:
        """Tell every worker to stop and wait for them to exit, up to STOP_WAIT_SECONDS
        (HARD_STOP_WAIT_SECONDS when `hard`). The wait is `meanwhile(seconds)`'s, the supervisor's: it records
        what the workers send as they stop, and returns True to stop them at once (a second Ctrl-C): the wait
        is then cut short."""
        self.stop_all(msg)
        deadline = time.monotonic() + (HARD_STOP_WAIT_SECONDS if hard else STOP_WAIT_SECONDS)
        while (
            any(h.exitcode is None for h in self.workers.values())
            and (left := deadline - time.monotonic()) > 0
        ):
            if meanwhile(min(left, STOP_POLL_SECONDS)) and not hard:
                hard = True
                deadline = min(deadline, time.monotonic() + HARD_STOP_WAIT_SECONDS)

    def terminate_rest(self) -> None:
        for h in self.workers.values():
            if h.exitcode is None:
                h.link.terminate()
            if h.exitcode is None:
                h.link.kill()
        self.workers.clear()
