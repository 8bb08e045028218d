"""A stand-in for the libraries real harnesses import (LiteLLM, OpenTelemetry exporters, gRPC clients):
seconds of CPU at import, and threads started by the import itself, before any code of the harness runs.

What it does at import is fixed work, not a timed sleep: it builds lookup tables (as a tokenizer or a
model-price table does) and starts two daemon threads (a telemetry flusher and a connection-pool reaper,
as LiteLLM's logging worker and httpx pools do). HEAVYSTACK_WORK scales the work (default 1.0)."""

from __future__ import annotations

import hashlib
import os
import threading
import time

_WORK = float(os.environ.get("HEAVYSTACK_WORK", "1.0"))


def _tables(rounds: int) -> dict[str, str]:
    table: dict[str, str] = {}
    for i in range(rounds):
        key = hashlib.sha256(str(i).encode()).hexdigest()
        table[key[:12]] = key
    return table


TABLES = _tables(int(600_000 * _WORK))  # ~1.5 s of CPU on this project's 2-core machine


def _flusher() -> None:
    while True:
        time.sleep(1.0)


def _reaper() -> None:
    while True:
        time.sleep(5.0)


for _target in (_flusher, _reaper):
    threading.Thread(target=_target, daemon=True, name=f"heavystack-{_target.__name__[1:]}").start()


def lookup(text: str) -> int:
    """Something the harness calls, so the tables are used."""
    return len(TABLES.get(hashlib.sha256(text.encode()).hexdigest()[:12], ""))
