"""The record's time limit as an interrupt, and the runner's own code it must never land in.

A record's time limit is cut into the harness's Python code by an exception raised asynchronously:
SIGALRM's handler in a worker with one slot, PyThreadState_SetAsyncExc from the worker's main thread in
a worker with slots (runner/worker/slot.py). Such an exception lands at whatever instruction the thread runs:
between taking a lock and the `try` that releases it, or halfway through updating counts other
processes read. The runner's own critical sections run `with shielded():`, and the clocks cut a thread
only while it is outside every shield:

- the slot-thread clock decides under `cut_lock`, and a shield is raised under the same lock, so no cut
  is decided once a shield is up; a cut decided just before is delivered at the shield's own checkpoint,
  before anything is held;
- the signal clock's handler runs in the interrupted thread itself: inside a shield it lets the alarm
  go and arms it again a moment later.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class Alarm(BaseException):
    """The record's time limit, raised into the harness's code. A BaseException: a harness's own
    `except Exception` must not swallow it."""


cut_lock = threading.Lock()  # held by a clock deciding to cut a thread, and by a thread raising a shield
_depth: dict[int, int] = {}  # thread ident -> how many shields it is inside


def shielded_now(thread: int) -> bool:
    return _depth.get(thread, 0) > 0


def _checkpoint() -> None:
    """A Python call: an asynchronous exception already raised into this thread is delivered here."""


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """No time-limit cut lands inside. Nests; costs an uncontended lock and a dict update."""
    tid = threading.get_ident()
    with cut_lock:
        _depth[tid] = _depth.get(tid, 0) + 1
    try:
        _checkpoint()  # a cut decided before the shield went up lands here, while nothing is held yet
        yield
    finally:
        left = _depth.get(tid, 1) - 1
        if left:
            _depth[tid] = left
        else:
            _depth.pop(tid, None)


def unshield(thread: int) -> None:
    """Forget a thread's shields: it is entering the harness's code, outside any of the runner's (a cut
    that landed between a shield's lock and its `try` would otherwise leave the thread shielded for good)."""
    _depth.pop(thread, None)
