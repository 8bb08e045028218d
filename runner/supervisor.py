"""The supervisor: spawn workers, hand out items, watch, reap, respawn; the only writer of results.

One loop, one inbox. Signal handlers only queue the signal; the loop handles it by name. A
worker that dies is replaced and its conversation requeued (bounded attempts); a worker that
cannot boot stops the run instead of being respawned forever.
"""

from __future__ import annotations

import contextlib
import signal
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import multiprocess as mp
from loguru import logger
from rich.console import Console

from runner.config import Config, resolve_mode
from runner.dataset import file_hash, iter_conversations
from runner.errors import RunStopped
from runner.messages import Assign, Heartbeat, ItemDone, SandboxReplaced, Stop, WorkerFailed, WorkerReady
from runner.models.preflight import check_retirements, requests_sent, unpriced
from runner.plan import WorkItem, make_plan
from runner.progress import Progress, RunProgress, WorkerView
from runner.ratelimit import build_limiter
from runner.sink import ResultSink, base_manifest, check_manifest, write_manifest
from runner.worker import EXIT_BOOT_FAILED, WorkerSpec, worker_main


@dataclass
class WorkerHandle:
    id: int
    proc: Any
    tasks: Any
    started: float = field(default_factory=time.monotonic)
    ready: bool = False
    current: Assign | None = None
    assigned_at: float = 0.0
    last_beat: float = field(default_factory=time.monotonic)
    stopping: bool = False


@dataclass
class Summary:
    out: Path
    counts: dict[str, int]
    interrupted: bool
    error: str | None
    sandbox_kind: str
    mode: str


class Supervisor:
    def __init__(self, cfg: Config, *, console: Console | None = None) -> None:
        self.cfg = cfg
        self.console = console or Console(stderr=True)
        self.ctx = mp.get_context("spawn")
        self.run_id = uuid.uuid4().hex[:12]
        self.inbox: Any = None
        self.workers: dict[int, WorkerHandle] = {}
        self.pending: deque[tuple[WorkItem, int]] = deque()
        self.items: dict[int, WorkItem] = {}
        self.completed: set[int] = set()
        self.signals: list[int] = []
        self.stopping = False
        self.hard_stop = False
        self.grace_deadline: float | None = None
        self.error: str | None = None
        self.next_worker_id = 0
        self.restarts = 0

    # ------------------------------------------------------------------ set-up
    def run(self) -> Summary:
        cfg = self.cfg
        out = cfg.output_dir
        (out / "logs").mkdir(parents=True, exist_ok=True)
        log_id = logger.add(out / "logs" / "supervisor.log", level="DEBUG")
        try:
            return self._run(out)
        finally:
            logger.remove(log_id)

    def _run(self, out: Path) -> Summary:
        from runner.sandbox import resolve_kind

        cfg = self.cfg
        # Validates the whole file before anything starts (bad lines stop it, or go aside with skip_invalid).
        order = {c.id: i for i, c in enumerate(iter_conversations(cfg.dataset, skip_invalid=cfg.skip_invalid))}
        for warning in check_retirements(cfg):
            logger.warning("{}", warning)
        for model in unpriced(cfg):
            logger.warning("no price known for {}: its cost shows as unknown (add it under models: in the config)",
                           model)
        mode = resolve_mode(cfg)
        kind = resolve_kind(cfg.sandbox)
        if kind == "external" and cfg.workers > 1:
            logger.warning("the external sandbox is one database: using 1 worker instead of {}", cfg.workers)
        self.sink = ResultSink(out, [r.name for r in cfg.runs])
        manifest = check_manifest(out, base_manifest(
            config_fingerprint=cfg.fingerprint(), dataset=str(cfg.dataset), dataset_sha256=file_hash(cfg.dataset),
            shard=list(cfg.shard) if cfg.shard else None, mode=mode, sandbox=kind, run_id=self.run_id,
            runs=[r.model_dump(mode="json") for r in cfg.runs], requests=requests_sent(cfg)), force=cfg.force)
        done = self.sink.existing(rerun_errors=cfg.rerun_errors)
        plan = make_plan(cfg, order, done)
        self.items = {w.id: w for w in plan}
        self.pending.extend((w, 1) for w in plan)
        logger.info("run {}: {} conversations x {} runs = {} items to do ({} already done); providers: {}; "
                    "sandbox: {}", self.run_id, len({w.conversation_id for w in plan}), len(cfg.runs), len(plan),
                    len(done), "REAL APIs" if mode == "real" else "simulator (no API keys set)", kind)
        image = None
        if kind == "docker":
            from runner.sandbox.docker import remove_stale
            from runner.sandbox.image import ensure_image

            stale = remove_stale()
            if stale:
                logger.info("removed {} containers left by crashed runs", stale)
            image = ensure_image()
            manifest["image"] = image
        interrupted = False
        with contextlib.ExitStack() as stack:
            sim_url = None
            if mode == "sim" and plan:
                from runner.models.sim.process import SimServer

                sim = stack.enter_context(SimServer(cfg.simulator, log_path=str(out / "logs" / "simulator.log")))
                sim_url = sim.url
            if plan:
                if cfg.cache:
                    from runner.cache import DEFAULT_DIR, ResponseCache

                    ResponseCache(cfg.cache_dir or DEFAULT_DIR).close()  # created once, before workers race for it
                limiter = build_limiter(cfg)
                self.inbox = self.ctx.Queue()
                n = 1 if kind == "external" else min(cfg.workers, len(plan))
                self.spec_for = lambda wid: WorkerSpec(wid, cfg, kind, image, self.run_id, _pid(), sim_url,
                                                       str(out / "logs"))
                self.limiter = limiter
                totals = {r.name: sum(1 for w in plan if w.run == r.name) for r in cfg.runs}
                self.progress = Progress({k: RunProgress(v) for k, v in totals.items()}, self.console)
                previous = {s: signal.signal(s, self._queue_signal) for s in (signal.SIGINT, signal.SIGTERM)}
                try:
                    with self.progress:
                        for _ in range(n):
                            self.spawn_worker()
                        self.loop()
                finally:
                    for s, h in previous.items():
                        signal.signal(s, h)
                    self.shutdown(kind)
                interrupted = self.stopping and self.error is None and bool(self.pending or self._in_flight())
        counts = self.sink.finalize(order)
        manifest.update(finished_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), interrupted=interrupted, error=self.error,
                        counts=counts)
        write_manifest(out, manifest)
        if self.error:
            raise RunStopped(self.error)
        return Summary(out, counts, interrupted, self.error, kind, mode)

    # ------------------------------------------------------------------ workers
    def spawn_worker(self) -> None:
        wid = self.next_worker_id
        self.next_worker_id += 1
        tasks = self.ctx.Queue()
        proc = self.ctx.Process(target=worker_main, args=(self.spec_for(wid), self.inbox, tasks, self.limiter),
                                name=f"worker-{wid}", daemon=False)
        proc.start()
        self.workers[wid] = WorkerHandle(wid, proc, tasks)
        self.progress.workers[wid] = WorkerView()
        logger.debug("spawned worker {} (pid {})", wid, proc.pid)

    def assign(self, h: WorkerHandle) -> None:
        if self.stopping or h.current is not None or not h.ready:
            return
        if not self.pending:
            h.tasks.put(Stop())
            h.stopping = True
            return
        item, attempt = self.pending.popleft()
        h.current = Assign(item.id, item.run, item.conversation_id, item.index, attempt)
        h.assigned_at = time.monotonic()
        h.tasks.put(h.current)
        self.progress.workers[h.id].item = f"{item.run}:{item.conversation_id}"

    def reap_workers(self) -> None:
        """Notice workers that exited or stopped beating; requeue what they held."""
        now = time.monotonic()
        limit = self.cfg.conversation_timeout_seconds + 30
        for h in list(self.workers.values()):
            if h.proc.exitcode is None:
                stale = now - h.last_beat > self.cfg.heartbeat_timeout_seconds and h.ready
                overdue = h.current is not None and now - h.assigned_at > limit
                if stale or overdue:
                    logger.warning("worker {} {}; killing it", h.id, "stopped beating" if stale else "is overdue")
                    h.proc.kill()
                    h.proc.join(5)
                else:
                    continue
            self._drain()  # an ItemDone sent just before dying must count before we requeue
            h.proc.join(1)
            del self.workers[h.id]
            self.progress.workers.pop(h.id, None)
            if h.stopping and h.proc.exitcode == 0:
                continue
            if h.proc.exitcode == EXIT_BOOT_FAILED or self.error:
                continue  # WorkerFailed told us why; handled there
            logger.warning("worker {} died (exit code {})", h.id, h.proc.exitcode)
            if h.current is not None and h.current.item_id not in self.completed:
                self.requeue(h.current, "worker died")
            if not self.stopping and (self.pending or self._in_flight()):
                self.restarts += 1
                if self.restarts > 3 * self.cfg.workers + 10:
                    self.fail("workers keep dying; stopping (see logs/worker-*.log)")
                elif self.pending:
                    self.spawn_worker()

    def requeue(self, a: Assign, why: str) -> None:
        item = self.items[a.item_id]
        if a.attempt >= self.cfg.max_attempts:
            from runner.episode import error_result

            spec = next(r for r in self.cfg.runs if r.name == a.run)
            res = error_result(spec, a.conversation_id, f"{why} on each of {a.attempt} attempts", kind="worker_died")
            res.update(attempt=a.attempt, item_id=a.item_id, index=a.index)
            self.record(res)
        else:
            self.pending.appendleft((item, a.attempt + 1))

    # ------------------------------------------------------------------ the loop
    def loop(self) -> None:
        while True:
            self.handle_signals()
            if self.hard_stop:
                return
            msg = self._get(0.2)
            if msg is not None:
                self.dispatch(msg)
            self.reap_workers()
            self.progress.tick()
            if not self.workers:
                return
            if self.stopping and self.grace_deadline and time.monotonic() > self.grace_deadline:
                logger.warning("grace period over; stopping workers now")
                return

    def _get(self, timeout: float) -> Any:
        try:
            return self.inbox.get(timeout=timeout)
        except Exception:  # queue.Empty
            return None

    def _drain(self) -> None:
        while (msg := self._get(0.05)) is not None:
            self.dispatch(msg)

    def dispatch(self, msg: Any) -> None:
        handler = getattr(self, f"on_{type(msg).__name__}")
        handler(msg)

    def on_WorkerReady(self, m: WorkerReady) -> None:
        h = self.workers.get(m.worker)
        if h is None:
            return
        h.ready, h.last_beat = True, time.monotonic()
        self.progress.workers[m.worker].sandbox = f"{m.sandbox_kind} {m.boot_seconds:.2f}s"
        logger.info("worker {} ready: {} sandbox {} in {:.2f}s", m.worker, m.sandbox_kind, m.sandbox_id,
                    m.boot_seconds)
        self.assign(h)

    def on_Heartbeat(self, m: Heartbeat) -> None:
        h = self.workers.get(m.worker)
        if h is not None:
            h.last_beat = time.monotonic()
            v = self.progress.workers[m.worker]
            v.rss_mb, v.cpu = m.rss_mb, m.cpu_percent

    def on_ItemDone(self, m: ItemDone) -> None:
        h = self.workers.get(m.worker)
        if h is not None:
            h.current = None
            h.last_beat = time.monotonic()
            self.progress.workers[m.worker].item = "-"
        self.record(m.result)
        if h is not None:
            self.assign(h)

    def on_SandboxReplaced(self, m: SandboxReplaced) -> None:
        logger.warning("worker {}: sandbox {} died ({}); replaced by {}", m.worker, m.old_id, m.reason, m.new_id)

    def on_WorkerFailed(self, m: WorkerFailed) -> None:
        self.fail(f"worker {m.worker} {'could not boot' if m.at_boot else 'stopped the run'}: {m.error}")

    def record(self, result: dict[str, Any]) -> None:
        item_id = result.get("item_id")
        if item_id in self.completed:
            return  # exactly once: a late duplicate from a worker that was replaced
        if item_id is not None:
            self.completed.add(item_id)
        self.sink.write(result)
        self.progress.result(result)

    def fail(self, error: str) -> None:
        if self.error is None:
            self.error = error
            logger.error("{}", error)
        self.begin_stop(grace=False)

    # ------------------------------------------------------------------ signals and shutdown
    def _queue_signal(self, signum: int, frame: Any) -> None:
        self.signals.append(signum)

    def handle_signals(self) -> None:
        while self.signals:
            signum = self.signals.pop(0)
            if self.stopping:
                logger.warning("second {}: stopping now", signal.Signals(signum).name)
                self.hard_stop = True
            else:
                logger.warning("{}: finishing running conversations (up to {:.0f}s), then stopping; "
                               "Ctrl-C again to stop at once", signal.Signals(signum).name,
                               self.cfg.shutdown_grace_seconds)
                self.begin_stop(grace=True)

    def begin_stop(self, *, grace: bool) -> None:
        if not self.stopping:
            self.stopping = True
            self.grace_deadline = time.monotonic() + (self.cfg.shutdown_grace_seconds if grace else 5.0)
            for h in self.workers.values():
                if not h.stopping:
                    h.tasks.put(Stop())
                    h.stopping = True

    def _in_flight(self) -> bool:
        return any(h.current is not None for h in self.workers.values())

    def shutdown(self, kind: str) -> None:
        for h in self.workers.values():
            if not h.stopping:
                with contextlib.suppress(Exception):
                    h.tasks.put(Stop())
        deadline = time.monotonic() + (0.5 if self.hard_stop else 10)
        for h in self.workers.values():
            h.proc.join(max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(Exception):
            self._drain()
        for h in self.workers.values():
            if h.proc.exitcode is None:
                h.proc.terminate()
                h.proc.join(3)
            if h.proc.exitcode is None:
                h.proc.kill()
                h.proc.join(3)
        self.workers.clear()
        if kind == "docker":
            from runner.sandbox.docker import remove_stale

            removed = remove_stale(run_id=self.run_id)
            if removed:
                logger.info("removed {} containers of this run", removed)


def _pid() -> int:
    import os

    return os.getpid()
