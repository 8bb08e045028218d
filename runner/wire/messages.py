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
    epoch: int = 1


@dataclass(frozen=True)
class Assign:
    """A chunk of jobs, all of one run (size 1 except for command harnesses), for one of the worker's
    slots."""

    jobs: tuple[Job, ...]
    slot: int = 0


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
class SlotReady:
    """Emitted when one more of a worker's slots has its databases and its harness attached (slot 0's
    readiness is WorkerReady's)."""

    worker: int
    slot: int


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
class ResultDiscarded:
    """Emitted when a record's result is thrown away because its sandbox did not serve the whole record
    (died, froze, was replaced, lost the slot's database) or its slot's process died under it: the record
    runs again as its next attempt."""

    worker: int
    item_id: int
    attempt: int  # the attempt whose result was discarded
    reason: str
    lost: str = "sandbox_lost"  # what was lost under it: the sandbox, or the slot's own process (slot_died)


@dataclass(frozen=True)
class WorkerFailed:
    """Emitted before a worker exits on an error that stops the run (boot failure, fatal provider error)."""

    worker: int
    error: str
    at_boot: bool


@dataclass(frozen=True)
class WorkerRetiring:
    """Emitted when a slot is stuck beyond reach: no more work for this worker; it exits once its other
    slots are done, and a new worker takes its place."""

    worker: int
    reason: str
