"""Workers as Ray actors: the same job over a Ray cluster (`--executor ray`, extra `ray`).

The seam is the pool's transport (runner/engine/pool.py): the supervisor, its one inbox, the scheduler and
the result sink are the local executor's, on the head. Only where a worker runs changes:

    supervisor (head) --deliver(seq, msg)--> WorkerActor (any node) --run_worker() in a thread
              <-------- poll() -> [msgs] ---  (its sandbox: docker or local PostgreSQL on that node)

A worker actor runs `run_worker` (the very function a local worker process runs) in one of its
threads; messages go out through a long poll the supervisor always keeps open per actor, so a dead
actor or a removed node reads as that poll failing, as a dead process's pipe reads end-of-file.
Actor method calls may run out of order in a threaded actor, so the supervisor's messages carry
sequence numbers. The built-in agents' shared budget is one `BudgetActor` on the head (a
SharedLimiter inside it; workers on every node draw from it); user harnesses call the gateway on the
head as they do locally. Ray is imported only here, and this module only with `executor: ray`.
"""

from __future__ import annotations

import collections
import contextlib
import faulthandler
import os
import queue
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import ray
from loguru import logger
from ray.exceptions import RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from runner.budget.ratelimit import Budget, Reservation, SharedLimiter, Tally, budget_spec
from runner.config import Config, Limits, environment
from runner.worker.main import WorkerSpec, log_to_file, run_worker

POLL_SECONDS = 1.0  # an actor answers a poll within this, messages or not
POLL_BATCH = 1000
DRAIN_SECONDS = 5.0  # a worker's last messages wait this long for the supervisor's poll before it ends
KILL_WAIT_SECONDS = 5.0
# How often the supervisor asks Ray whether a worker's actor has ended: it asks on every loop turn
# for every worker, and a turn can come every few milliseconds when results flow (a ray.wait is a
# round trip to the core worker). A death is still seen within this, and by the heartbeat anyway.
EXIT_CHECK_SECONDS = 0.5


class _Ordered:
    """The supervisor's messages back in the order it sent them."""

    def __init__(self) -> None:
        self.tasks: queue.Queue[Any] = queue.Queue()
        self._next, self._early = 0, dict[int, Any]()
        self._lock = threading.Lock()

    def deliver(self, seq: int, msg: Any) -> None:
        with self._lock:
            self._early[seq] = msg
            while self._next in self._early:
                self.tasks.put(self._early.pop(self._next))
                self._next += 1


class _Outbox:
    """What `run_worker` puts, kept until the supervisor's next poll takes it."""

    def __init__(self) -> None:
        self.msgs: collections.deque[Any] = collections.deque()
        self.cv = threading.Condition()

    def put(self, msg: Any) -> None:
        with self.cv:
            self.msgs.append(msg)
            self.cv.notify_all()

    def take(self, timeout: float) -> list[Any]:
        with self.cv:
            if not self.msgs:
                self.cv.wait(timeout)
            out: list[Any] = []
            while self.msgs and len(out) < POLL_BATCH:
                out.append(self.msgs.popleft())
            self.cv.notify_all()
            return out

    def drained(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self.cv:
            while self.msgs and (left := deadline - time.monotonic()) > 0:
                self.cv.wait(left)


class WorkerActor:
    """One worker: `run` for its whole life (in a thread of its own), `deliver` and `poll` beside it."""

    def __init__(self) -> None:
        self.ordered, self.outbox = _Ordered(), _Outbox()
        self.log_path: Path | None = None

    def run(self, spec: WorkerSpec, limiter: Any) -> int:
        self.log_path = log_to_file(spec)
        try:
            return run_worker(spec, self.outbox, self.ordered.tasks, limiter)
        finally:
            self.outbox.drained(DRAIN_SECONDS)

    def deliver(self, seq: int, msg: Any) -> None:
        self.ordered.deliver(seq, msg)

    def poll(self, timeout: float) -> list[Any]:
        return self.outbox.take(timeout)

    def stacks(self) -> None:
        """Where every thread is (the supervisor found this worker stuck), into its log."""
        if self.log_path is not None:
            with open(self.log_path, "a") as f:
                faulthandler.dump_traceback(file=f, all_threads=True)

    def node(self) -> tuple[str, int]:
        return ray.get_runtime_context().get_node_id(), os.getpid()


class BudgetActor:
    """The built-in agents' one budget for the whole cluster: a SharedLimiter in one process."""

    def __init__(
        self, limits: dict[str, Limits], adaptive: dict[str, bool], lanes: int, runs: list[str] | None = None
    ) -> None:
        self.limiter = SharedLimiter(limits, adaptive, lanes=lanes, runs=runs)

    def describe(self) -> tuple[list[str], int, float, list[str]]:
        return self.limiter.keys, self.limiter.lanes, self.limiter.out_estimate, self.limiter.runs

    def try_acquire(
        self,
        slot: int,
        input_tokens: float,
        output_tokens: float | None,
        lane: int,
        waited: float = 0.0,
        run: int = -1,
    ) -> Reservation | float:
        return self.limiter.try_acquire(slot, input_tokens, output_tokens, lane, waited, run)

    def settle(self, res: Reservation, input_tokens: float, output_tokens: float, ok: bool) -> None:
        self.limiter.settle(res, input_tokens, output_tokens, ok=ok)

    def pause(self, slot: int, seconds: float) -> None:
        self.limiter.pause(slot, seconds)

    def reclaim(self, lane: int) -> float:
        return self.limiter.reclaim(lane)

    def snapshot(self, slot: int) -> dict[str, float]:
        return self.limiter.snapshot(slot)

    def tally(self) -> dict[str, Tally]:
        return self.limiter.tally()

    def per_run(self) -> dict[str, dict[str, tuple[float, float, float]]]:
        return self.limiter.per_run()


class RemoteBudget(Budget):
    """The SharedLimiter's interface over a BudgetActor: what a worker on any node holds. One actor
    (single-threaded) sees each caller's calls in order, so a settle is never overtaken."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor
        self.keys, self.lanes, self.out_estimate, self.runs = ray.get(actor.describe.remote())
        self.lane = -1

    def try_acquire(
        self,
        slot: int,
        input_tokens: float,
        output_tokens: float | None = None,
        lane: int | None = None,
        waited: float = 0.0,
        run: int = -1,
    ) -> Reservation | float:
        r: Reservation | float = ray.get(
            self.actor.try_acquire.remote(
                slot, input_tokens, output_tokens, self.lane if lane is None else lane, waited, run
            )
        )
        return r

    def settle(self, res: Reservation, input_tokens: float, output_tokens: float, *, ok: bool = True) -> None:
        self.actor.settle.remote(res, input_tokens, output_tokens, ok)

    def pause(self, slot: int, seconds: float) -> None:
        self.actor.pause.remote(slot, seconds)

    def reclaim(self, lane: int) -> float:
        freed: float = ray.get(self.actor.reclaim.remote(lane))
        return freed

    def snapshot(self, slot: int) -> dict[str, float]:
        snap: dict[str, float] = ray.get(self.actor.snapshot.remote(slot))
        return snap

    def tally(self) -> dict[str, Tally]:
        got: dict[str, Tally] = ray.get(self.actor.tally.remote())
        return got

    def per_run(self) -> dict[str, dict[str, tuple[float, float, float]]]:
        got: dict[str, dict[str, tuple[float, float, float]]] = ray.get(self.actor.per_run.remote())
        return got


class RayLink:
    """The pool's handle on one worker actor."""

    def __init__(self, actor: Any, run_ref: Any) -> None:
        self.actor, self.run_ref = actor, run_ref
        self.seq = 0
        self.code: int | None = None
        self._next_check = 0.0

    @property
    def exitcode(self) -> int | None:
        if self.code is None and (now := time.monotonic()) >= self._next_check:
            self._next_check = now + EXIT_CHECK_SECONDS
            self._wait(0)
        return self.code

    def _wait(self, timeout: float) -> None:
        done, _ = ray.wait([self.run_ref], timeout=max(0.0, timeout))
        if done and self.code is None:
            self._ended()

    def _ended(self) -> None:
        try:
            self.code = int(ray.get(self.run_ref))
        except RayError:  # the actor was killed, or its node is gone: as a killed process
            self.code = -signal.SIGKILL
        with contextlib.suppress(Exception):  # its resources back to the cluster
            ray.kill(self.actor, no_restart=True)

    def send(self, msg: Any) -> None:
        self.actor.deliver.remote(self.seq, msg)
        self.seq += 1

    def abort(self) -> None:
        """Its stacks, then the kill, in a thread of their own: the supervisor's loop never waits on them."""

        def stacks_then_kill() -> None:
            with contextlib.suppress(Exception):
                ray.get(self.actor.stacks.remote(), timeout=KILL_WAIT_SECONDS)
            self.kill()

        threading.Thread(target=stacks_then_kill, daemon=True, name="abort-actor").start()

    def join(self, timeout: float) -> None:
        self._wait(timeout)  # an ended actor's code is known at once, whenever exitcode last asked

    def terminate(self) -> None:
        self.kill()  # a thread cannot be unwound from outside; the run's end removes its containers

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            ray.kill(self.actor, no_restart=True)
        self.join(KILL_WAIT_SECONDS)
        if self.code is None:
            self.code = -signal.SIGKILL


class RayInbox:
    """The supervisor's one inbox over every actor's long poll."""

    def __init__(self) -> None:
        self.polls: dict[Any, RayLink] = {}
        self.ready: collections.deque[Any] = collections.deque()

    def watch(self, link: RayLink) -> None:
        self.polls[link.actor.poll.remote(POLL_SECONDS)] = link

    def get(self, timeout: float) -> Any:
        while not self.ready:
            if not self.polls:  # no worker alive right now: wait as a queue would
                time.sleep(timeout)
                return None
            done, _ = ray.wait(list(self.polls), num_returns=1, timeout=timeout)
            if not done:
                return None
            for ref in done:
                link = self.polls.pop(ref)
                try:
                    msgs = ray.get(ref)
                except RayError:  # dead: its link's exit code says how
                    continue
                self.ready.extend(msgs)
                if msgs or link.exitcode is None:  # an ended worker's poll comes back empty: done
                    self.watch(link)
            timeout = 0
        return self.ready.popleft()

    def close(self) -> None:
        self.polls.clear()


class RayTransport:
    """Starts Ray (or joins a cluster) and worker actors on it; a context manager: leaves no actor."""

    def __init__(self, cfg: Config, *, lanes: int) -> None:
        self.cfg, self.lanes = cfg, lanes
        self.inbox = RayInbox()
        self.started_ray = False
        self.budget: RemoteBudget | None = None
        self.links: list[RayLink] = []
        self.worker_class: Any = ray.remote(WorkerActor)

    def __enter__(self) -> RayTransport:
        try:
            self._connect()
            if self.cfg.model_runs():
                here = ray.get_runtime_context().get_node_id()
                actor = (
                    ray.remote(num_cpus=0, max_restarts=0)(BudgetActor)
                    .options(scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False))
                    .remote(*budget_spec(self.cfg), self.lanes, [r.name for r in self.cfg.runs])
                )
                self.budget = RemoteBudget(actor)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _connect(self) -> None:
        address = self.cfg.ray.address or environment().ray_address
        if ray.is_initialized():
            return
        # Workers must import the runner and the user's harness as the head does.
        env = {"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}}
        extra: dict[str, Any] = {} if address else {"include_dashboard": False}
        ray.init(address=address, runtime_env=env, log_to_driver=False, configure_logging=False, **extra)
        self.started_ray = True
        logger.info(
            "ray: {} node(s), {:g} CPUs ({})",
            len([n for n in ray.nodes() if n.get("Alive")]),
            ray.cluster_resources().get("CPU", 0),
            address or "started here",
        )

    def node_address(self) -> str:
        """Where workers on other nodes reach this one (127.0.0.1 on a cluster of one machine)."""
        address: str = ray.util.get_node_ip_address()
        return address

    def start(self, spec: WorkerSpec, limiter: Any) -> RayLink:
        r = self.cfg.ray
        # run, deliver, poll, stacks
        opts: dict[str, Any] = {
            "num_cpus": r.cpus_per_worker,
            "max_restarts": 0,
            "max_task_retries": 0,
            "max_concurrency": 4,
        }
        if r.memory_per_worker_mb:
            opts["memory"] = r.memory_per_worker_mb * 1024 * 1024
        actor = self.worker_class.options(**opts).remote()
        link = RayLink(actor, actor.run.remote(spec, self.budget))
        self.links.append(link)
        self.inbox.watch(link)
        logger.debug("started worker {} as a Ray actor", spec.worker)
        return link

    def close(self) -> None:
        for link in self.links:
            with contextlib.suppress(Exception):
                ray.kill(link.actor, no_restart=True)
        if self.budget is not None:
            with contextlib.suppress(Exception):
                ray.kill(self.budget.actor, no_restart=True)
        if self.started_ray:
            ray.shutdown()
            self.started_ray = False
