"""Typed messages between the supervisor and its workers. Items travel as ids, results as dicts
(a Result's JSON form: plain data crosses the process boundary, the type is rebuilt on arrival)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


# ---- supervisor -> one worker (its own task queue)
@dataclass(frozen=True)
class Job:
    item_id: int
    run: str
    record_id: str
    index: int
    attempt: int


@dataclass(frozen=True)
class Assign:
    """A chunk of jobs, all of one run (size 1 except for command harnesses)."""

    jobs: tuple[Job, ...]


@dataclass(frozen=True)
class Stop:
    pass


# ---- worker -> supervisor (the one inbox)
@dataclass(frozen=True)
class WorkerReady:
    """Emitted once the worker's sandbox answers and its clients are built."""

    worker: int
    sandbox_id: str
    sandbox_kind: str
    boot_seconds: float


@dataclass(frozen=True)
class Heartbeat:
    """Emitted every couple of seconds by a thread of the worker, busy or not."""

    worker: int
    item_id: int | None
    rss_mb: float
    cpu_percent: float
    sandbox_rss_mb: float | None = None


@dataclass(frozen=True)
class ItemDone:
    """Emitted when a record has a result, successful or not."""

    worker: int
    item_id: int
    result: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SandboxReplaced:
    """Emitted when the worker found its database dead and started a new one."""

    worker: int
    old_id: str
    new_id: str
    reason: str


@dataclass(frozen=True)
class WorkerFailed:
    """Emitted before a worker exits on an error that stops the run (boot failure, fatal provider error)."""

    worker: int
    error: str
    at_boot: bool
