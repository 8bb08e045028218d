"""A worker process: boot one sandbox and the model clients, then item -> episode -> result.

Receives item ids on its own queue, answers on the supervisor's inbox. A heartbeat thread
reports liveness and resources. A conversation over its time limit is cut by SIGALRM. A sandbox
that dies is replaced and the conversation retried once; a fatal provider error stops the run.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from loguru import logger

from runner.agents import telemetry
from runner.config import Config, RunSpec
from runner.crm import db
from runner.dataset import Conversation, iter_conversations
from runner.episode import Expectations, error_result, run_episode
from runner.errors import ConversationFailed, ConversationTimeout, RunStopped, SandboxBootError, SandboxLost
from runner.messages import Assign, Heartbeat, ItemDone, SandboxReplaced, Stop, WorkerFailed, WorkerReady
from runner.models.client import ModelClient, make_client
from runner.ratelimit import SharedLimiter
from runner.sandbox import make_sandbox
from runner.sandbox.base import Sandbox

EXIT_BOOT_FAILED = 3
EXIT_RUN_STOPPED = 4
HEARTBEAT_SECONDS = 2.0


@dataclass(frozen=True)
class WorkerSpec:
    worker: int
    cfg: Config
    sandbox_kind: str
    image: str | None
    run_id: str
    supervisor_pid: int
    sim_url: str | None
    log_dir: str


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _Heart(threading.Thread):
    def __init__(self, worker: int, inbox: Any) -> None:
        super().__init__(daemon=True, name="heartbeat")
        self.worker, self.inbox = worker, inbox
        self.item_id: int | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        last_cpu, last_t = sum(os.times()[:2]), time.monotonic()
        while not self._stop_event.wait(HEARTBEAT_SECONDS):
            cpu, now = sum(os.times()[:2]), time.monotonic()
            pct = 100 * (cpu - last_cpu) / max(now - last_t, 1e-6)
            last_cpu, last_t = cpu, now
            with contextlib.suppress(Exception):
                self.inbox.put(Heartbeat(self.worker, self.item_id, round(_rss_mb(), 1), round(pct, 1)))

    def stop(self) -> None:
        self._stop_event.set()


class _Alarm(BaseException):
    """Raised by SIGALRM. A BaseException on purpose: the SDKs catch Exception and would turn the
    time limit into a retried connection error."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Alarm()


class _Session:
    """The worker's sandbox, its connections and its model clients; the sandbox can be replaced."""

    def __init__(self, spec: WorkerSpec, limiter: SharedLimiter | None) -> None:
        self.spec = spec
        self.sandbox: Sandbox | None = None
        self.crm: psycopg.Connection[Any] | None = None
        self.atlas: psycopg.Connection[Any] | None = None
        cfg = spec.cfg
        cache = None
        if cfg.cache:
            from runner.cache import DEFAULT_DIR, ResponseCache

            cache = ResponseCache(cfg.cache_dir or DEFAULT_DIR)
        self.clients: dict[str, tuple[ModelClient, ModelClient | None]] = {}
        for run in cfg.runs:
            agent = make_client(run, cfg, sim_url=spec.sim_url, limiter=limiter, cache=cache)
            teacher = make_client(run.teacher, cfg, sim_url=spec.sim_url, limiter=limiter, cache=cache) \
                if run.teacher else None
            self.clients[run.name] = (agent, teacher)
        self.cache = cache
        self.telemetry_sink: psycopg.Connection[Any] | None = None
        if cfg.telemetry_dsn:
            try:
                self.telemetry_sink = db.connect(cfg.telemetry_dsn)
                telemetry.ensure_schema(self.telemetry_sink)
            except psycopg.Error as e:
                raise SandboxBootError(f"cannot reach the telemetry database: {e}") from e
        self.expectations = Expectations(cache)
        self.generation = 0

    def boot(self) -> None:
        self.generation += 1
        s = self.spec
        sb = make_sandbox(s.sandbox_kind, image=s.image, run_id=s.run_id, owner_pid=s.supervisor_pid,
                          name_hint=f"w{s.worker}g{self.generation}", memory=s.cfg.container_memory,
                          cpus=s.cfg.container_cpus, dsn=s.cfg.dsn)
        try:
            sb.start()
            self.sandbox = sb
            self.crm = db.connect(sb.dsn("crm"))
            self.atlas = db.connect(sb.dsn("atlas"))
            telemetry.ensure_schema(self.atlas)
        except BaseException:
            self.close()
            sb.stop()
            raise
        self.expectations = Expectations(self.cache)

    def reconnect(self) -> None:
        for c in (self.crm, self.atlas):
            if c is not None:
                with contextlib.suppress(Exception):
                    c.close()
        assert self.sandbox is not None
        self.crm = db.connect(self.sandbox.dsn("crm"))
        self.atlas = db.connect(self.sandbox.dsn("atlas"))

    def close(self) -> None:
        for c in (self.crm, self.atlas):
            if c is not None:
                with contextlib.suppress(Exception):
                    c.close()
        self.crm = self.atlas = None
        if self.sandbox is not None:
            self.sandbox.stop()
            self.sandbox = None


def _run_one(session: _Session, conv: Conversation, run: RunSpec, timeout: float) -> dict[str, Any]:
    agent, teacher = session.clients[run.name]
    assert session.crm is not None
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        return run_episode(conv, run, crm=session.crm, atlas=session.atlas, agent=agent, teacher=teacher,
                           expectations=session.expectations, telemetry_sink=session.telemetry_sink)
    except _Alarm:
        raise ConversationTimeout(f"over the time limit of {timeout:g}s") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def worker_main(spec: WorkerSpec, inbox: Any, tasks: Any, limiter: SharedLimiter | None) -> None:
    """Entry point of a worker process (spawned)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the supervisor's to handle
    signal.signal(signal.SIGALRM, _on_alarm)
    logger.remove()
    logger.add(Path(spec.log_dir) / f"worker-{spec.worker}.log", level="DEBUG", enqueue=False)
    logger.info("worker {} starting (pid {}, sandbox {})", spec.worker, os.getpid(), spec.sandbox_kind)
    runs = {r.name: r for r in spec.cfg.runs}
    # The supervisor already reported bad lines; a worker only needs the valid ones.
    convs = {c.id: c for c in iter_conversations(spec.cfg.dataset, skip_invalid=spec.cfg.skip_invalid,
                                                 rejects=os.devnull)}
    try:
        session = _Session(spec, limiter)
        session.boot()
    except (RunStopped, SandboxBootError, Exception) as e:
        logger.exception("boot failed")
        inbox.put(WorkerFailed(spec.worker, f"{type(e).__name__}: {e}", at_boot=True))
        sys.exit(EXIT_BOOT_FAILED)
    assert session.sandbox is not None
    inbox.put(WorkerReady(spec.worker, session.sandbox.id, session.sandbox.kind, session.sandbox.boot_seconds))
    heart = _Heart(spec.worker, inbox)
    heart.start()
    code = 0
    try:
        while True:
            msg = tasks.get()
            if isinstance(msg, Stop):
                break
            assert isinstance(msg, Assign)
            heart.item_id = msg.item_id
            result = _handle(session, msg, runs[msg.run], convs[msg.conversation_id], inbox)
            result.update(worker=spec.worker, sandbox_id=session.sandbox.id if session.sandbox else None,
                          attempt=msg.attempt, item_id=msg.item_id, index=msg.index)
            inbox.put(ItemDone(spec.worker, msg.item_id, result))
            heart.item_id = None
    except RunStopped as e:
        logger.error("stopping the run: {}", e)
        inbox.put(WorkerFailed(spec.worker, str(e), at_boot=False))
        code = EXIT_RUN_STOPPED
    finally:
        heart.stop()
        session.close()
        logger.info("worker {} exiting", spec.worker)
    sys.exit(code)


def _handle(session: _Session, msg: Assign, run: RunSpec, conv: Conversation, inbox: Any) -> dict[str, Any]:
    timeout = session.spec.cfg.conversation_timeout_seconds
    for tries in (1, 2):
        try:
            return _run_one(session, conv, run, timeout)
        except ConversationTimeout as e:
            session.reconnect()  # the cut may have left a query half-done on the connection
            return error_result(run, conv.id, str(e), kind="timeout")
        except (psycopg.OperationalError, psycopg.InterfaceError, SandboxLost) as e:
            assert session.sandbox is not None
            if session.sandbox.alive():
                session.reconnect()
                return error_result(run, conv.id, str(e), kind="database")
            old = session.sandbox.id
            logger.warning("sandbox {} is gone ({}); starting a new one", old, e)
            session.close()
            session.boot()
            assert session.sandbox is not None
            inbox.put(SandboxReplaced(session.spec.worker, old, session.sandbox.id, str(e)[:200]))
            if tries == 2:
                return error_result(run, conv.id, f"sandbox lost twice: {e}", kind="sandbox_lost")
        except RunStopped:
            raise
        except ConversationFailed as e:
            return error_result(run, conv.id, str(e), kind=type(e).__name__)
        except Exception as e:  # a bug or an unexpected answer: this conversation fails, the worker goes on
            logger.exception("conversation {} failed", conv.id)
            return error_result(run, conv.id, f"{type(e).__name__}: {e}", kind="exception")
    raise AssertionError("unreachable")
