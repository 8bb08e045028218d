"""How many records run at once, and where: workers (processes, one sandbox each) x slots (threads of a
worker, one database each in its sandbox).

A worker is a Python process: its harness code holds the GIL, so more workers than a couple per
core buy nothing but memory (~110 MiB each with the SDKs loaded), while a slot costs a thread, a
harness instance and a database copy (a few MiB). So a total concurrency C becomes few workers with
many slots: W = min(C, 2 x cores, what memory allows), K = ceil(C / W).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from runner.config import Config

DEFAULT_WORKERS = 4
WORKERS_PER_CORE = 2
WORKER_MIB = 160  # a worker with its SDKs, and its PostgreSQL's fixed part (docs/benchmarks.md)
SLOT_MIB = 12  # a slot: its harness's clients, a thread, two database sessions, its database copies
# A slot whose conversation waits on a batch, its data on disk (container_tmpfs: false): 6.1 MiB PSS each
# at 684 waiting, all processes (docs/benchmarks.md, batch mode); a quarter more for what records write.
WAITING_SLOT_MIB = 8
MEMORY_SHARE = 0.5  # of the machine's available memory, the most a run plans to use
AUTO_CEILING = 256  # --concurrency auto: the slots made ready; the throttle decides how many are used


@dataclass(frozen=True)
class Layout:
    workers: int
    slots: int
    why: str

    @property
    def in_flight(self) -> int:
        return self.workers * self.slots


def available_mib() -> float:
    try:
        with open("/proc/meminfo") as f:
            info = {line.split(":")[0]: line.split()[1] for line in f}
        return int(info["MemAvailable"]) / 1024
    except (OSError, KeyError, ValueError, IndexError):
        return 4096.0


def slot_mib(cfg: Config) -> int:
    """What a slot is planned to cost: less where every run's conversations mostly wait on batches and
    their databases stay on disk."""
    waiting = {r.name for r in cfg.runs} <= cfg.batch_runs() and not cfg.container_tmpfs
    return WAITING_SLOT_MIB if waiting else SLOT_MIB


def split(
    concurrency: int, *, cores: int | None = None, memory_mib: float | None = None, slot_mib: int = SLOT_MIB
) -> Layout:
    """Workers x slots for `concurrency` records in flight on this machine."""
    cores = cores or os.cpu_count() or 1
    memory_mib = available_mib() if memory_mib is None else memory_mib
    budget = MEMORY_SHARE * memory_mib
    why = f"concurrency {concurrency} on {cores} cores, {memory_mib / 1024:.0f} GiB free"
    workers = max(1, min(concurrency, WORKERS_PER_CORE * cores))
    slots = -(-concurrency // workers)
    while workers > 1 and workers * WORKER_MIB + workers * slots * slot_mib > budget:
        workers -= 1
        slots = -(-concurrency // workers)
    if WORKER_MIB + slots * slot_mib > budget:  # not even one worker holds them all: fewer in flight
        slots = max(1, int((budget - WORKER_MIB) // slot_mib))
        return Layout(1, slots, why + f": memory allows {slots}")
    workers = -(-concurrency // slots)  # no worker with idle slots: 10 = 4 x 3 would be 12
    return Layout(workers, slots, why)


def layout(cfg: Config, *, items: int, chunk: int = 1, kind: str = "docker") -> Layout:
    """The run's workers x slots: `workers`/`slots` as given win over the split of `concurrency`; never
    more than the work needs; one worker and one slot on an external database (it is one database)."""
    if kind == "external":
        return Layout(1, 1, "the external sandbox is one database")
    if cfg.concurrency is not None:
        total = (
            min(AUTO_CEILING, max(1, -(-items // chunk))) if cfg.concurrency == "auto" else cfg.concurrency
        )
        base = split(total, slot_mib=slot_mib(cfg))
        workers, slots = cfg.workers, cfg.slots
        if workers is None and slots is None:
            workers, slots, why = base.workers, base.slots, base.why
        elif workers is None:
            assert slots is not None
            workers, why = -(-total // slots), f"concurrency {total} / {slots} slots"
        elif slots is None:
            slots, why = -(-total // workers), f"concurrency {total} / {workers} workers"
        else:
            why = "workers and slots as given"
    else:
        workers, slots, why = cfg.workers or DEFAULT_WORKERS, cfg.slots or 1, "workers and slots as given"
    chunks = max(1, -(-items // chunk))
    slots = max(1, min(slots, chunks))
    workers = max(1, min(workers, -(-chunks // slots)))
    return Layout(workers, slots, why)
