"""A worker's heartbeat: a thread that reports liveness, memory and CPU every couple of seconds."""

from __future__ import annotations

import contextlib
import os
import resource
import threading
import time
from typing import Any

from runner.wire.messages import Heartbeat

HEARTBEAT_SECONDS = 2.0


def rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Heart(threading.Thread):
    """Beats whether the worker is busy or not: a silent worker is a stuck one."""

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
                self.inbox.put(Heartbeat(self.worker, self.item_id, round(rss_mb(), 1), round(pct, 1)))

    def stop(self) -> None:
        self._stop_event.set()
