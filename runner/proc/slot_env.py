"""Per-slot environment variables for harness code running in threads of one process.

A worker with K slots runs K records of a `python` harness at once, in threads; each slot has its
own database, so DB_NAME, DATABASE_URL, PGDATABASE... differ per slot while the process has one
environment. `os.environ` becomes a mapping whose reads (`os.environ[k]`, `.get`, `os.getenv`,
`in`, `copy()`) see the current context's overlay first, so harness code that reads its
connection settings from the environment at call time, as the seeds' harness does, gets its own
slot's database unchanged.

What cannot see an overlay reads the process's real (C-level) environment: libpq filling in an
empty conninfo from PG*, a subprocess started without `env=`. For those the per-slot variables
hold a value naming the problem (a database that does not exist), so such code fails loudly
instead of sharing a database; `ctx.env` and `ctx.db` give the right values (docs/harness.md).
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

UNSET = "runner-slot-env-use-ctx-env"  # what the process-wide variable holds once slots own it

_overlay: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar("runner_slot_env", default=None)


class _SlotEnviron(os._Environ):  # os._Environ: the class of os.environ
    def __getitem__(self, key: str) -> str:
        ov = _overlay.get()
        if ov is not None and key in ov:
            return ov[key]
        value: str = super().__getitem__(key)
        return value

    def __iter__(self) -> Iterator[str]:
        """The process's keys, then the overlay's that it lacks: `in`, iteration and copy() agree."""
        yield from super().__iter__()
        ov = _overlay.get()
        if ov:
            yield from (k for k in ov if self.encodekey(k) not in self._data)  # type: ignore[attr-defined]

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def copy(self) -> dict[str, str]:
        return {k: self[k] for k in self}


def install(per_slot: Iterable[str]) -> None:
    """Make os.environ slot-aware (once per process) and park the per-slot keys at UNSET. Call it on the
    worker's main thread before slot threads start (Harness.before_threads): it writes the process's
    environment, which other threads may be reading from C (getenv) at any time; a second call with the
    same keys writes nothing."""
    if not isinstance(os.environ, _SlotEnviron):
        os.environ.__class__ = _SlotEnviron
    for key in per_slot:
        if os.environ._data.get(os.environ.encodekey(key)) != os.environ.encodevalue(UNSET):  # type: ignore[attr-defined]
            os.environ[key] = UNSET


def set_slot_env(env: Mapping[str, str]) -> None:
    """The calling thread's (context's) view of the environment from now on: env over the process's.
    Writes nothing to the process's environment (slot threads call it while others read it from C)."""
    _overlay.set(dict(env))


def slot_env() -> Mapping[str, Any] | None:
    return _overlay.get()
