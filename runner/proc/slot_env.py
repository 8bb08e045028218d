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

What a slot's code writes (`os.environ[k] = v`, `del`) goes to its own overlay, never the process's: a write
to the process's environment was read back by the slot through an overlay rebuilt from it at its next record,
frozen there, so the next write was never seen (119 of 120 records of a harness that names its conversation
file in a variable ran another record's). A slot's own write stays across its records, as in a process of its
own, until the runner's value of that variable changes (its next run's, its next trial's).
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

UNSET = "runner-slot-env-use-ctx-env"  # what the process-wide variable holds once slots own it

_overlay: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "runner_slot_env", default=None
)
# what the runner last gave the context: the slot's own writes are what its overlay holds beyond it
_given: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "runner_slot_given", default=None
)
# The keys the slots own (install()'s parked ones, and own()'s): a slot whose overlay lacks one does not
# have it (reading through to the process's value would hand a harness a value it was never given: an
# API key that turns on its judge, at a URL named UNSET).
_owned: set[str] = set()


class _SlotEnviron(os._Environ):  # os._Environ: the class of os.environ
    def __getitem__(self, key: str) -> str:
        ov = _overlay.get()
        if ov is not None:
            if key in ov:
                return ov[key]
            if key in _owned:
                raise KeyError(key)
        value: str = super().__getitem__(key)
        return value

    def __iter__(self) -> Iterator[str]:
        """The process's keys (those the slots own only if its overlay has them), then the overlay's that the
        process lacks: `in`, iteration and copy() agree."""
        ov = _overlay.get()
        if ov is None:
            yield from super().__iter__()
            return
        yield from (k for k in super().__iter__() if k in ov or k not in _owned)
        yield from (k for k in ov if self.encodekey(k) not in self._data)  # type: ignore[attr-defined]

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __setitem__(self, key: str, value: str) -> None:
        ov = _overlay.get()
        if ov is None:
            super().__setitem__(key, value)
            return
        if not isinstance(key, str) or not isinstance(value, str):  # as os.environ refuses them
            raise TypeError(f"str expected, not {type(key if not isinstance(key, str) else value).__name__}")
        ov[key] = value

    def __delitem__(self, key: str) -> None:
        ov = _overlay.get()
        if ov is None:
            super().__delitem__(key)
            return
        if key not in ov:
            raise KeyError(key)
        del ov[key]
        _owned.add(key)  # absent in this slot from now on, whatever the process holds

    def copy(self) -> dict[str, str]:
        return {k: self[k] for k in self}


def install(per_slot: Iterable[str]) -> None:
    """Make os.environ slot-aware (once per process) and park the per-slot keys at UNSET. Call it on the
    worker's main thread before slot threads start (Harness.before_threads): it writes the process's
    environment, which other threads may be reading from C (getenv) at any time; a second call with the
    same keys writes nothing."""
    keys = list(per_slot)
    own(keys)
    for key in keys:
        stored = os.environ._data.get(os.environ.encodekey(key))  # type: ignore[attr-defined]
        if stored != os.environ.encodevalue(UNSET):
            os.environ[key] = UNSET


def own(keys: Iterable[str]) -> None:
    """Make os.environ slot-aware, the keys the slots': in a slot, each is its overlay's or absent, whatever
    the process holds. A hosted interpreter (proc/shim.py) owns every variable the runner started it with:
    each slot's environment is a whole record's, and a value at load may be a marker; what the harness
    itself sets later (a load_dotenv() at import) stays visible to every slot."""
    if not isinstance(os.environ, _SlotEnviron):
        os.environ.__class__ = _SlotEnviron
    _owned.update(keys)


def set_slot_env(env: Mapping[str, str]) -> None:
    """The calling thread's (context's) view of the environment from now on: env over the process's, with
    what the slot's own code wrote kept where the runner's value did not change. Writes nothing to the
    process's environment (slot threads call it while others read it from C)."""
    new, before, given = dict(env), _overlay.get(), _given.get()
    if before is not None and given is not None:
        for key in given.keys() | before.keys():
            if before.get(key) == given.get(key) or new.get(key) != given.get(key):
                continue  # not written by the slot, or the runner's value moved: the runner's
            if key in before:
                new[key] = before[key]
            else:
                new.pop(key, None)
    _given.set(dict(env))
    _overlay.set(new)


def slot_env() -> Mapping[str, Any] | None:
    return _overlay.get()
