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
from collections.abc import Iterable, Mapping
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

    def copy(self) -> dict[str, str]:
        return {k: self[k] for k in self}


def install(per_slot: Iterable[str]) -> None:
    """Make os.environ slot-aware (once per process) and park the per-slot keys at UNSET."""
    if not isinstance(os.environ, _SlotEnviron):
        os.environ.__class__ = _SlotEnviron
    for key in per_slot:
        os.environ[key] = UNSET


def set_slot_env(env: Mapping[str, str]) -> None:
    """The calling thread's (context's) view of the environment from now on: env over the process's."""
    for key in env.keys() - os.environ.keys():
        os.environ[key] = UNSET  # iteration and `in` go through the real keys: make every overlay key one
    _overlay.set(dict(env))


def slot_env() -> Mapping[str, Any] | None:
    return _overlay.get()
