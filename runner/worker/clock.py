"""A chunk's time limit, as a slot keeps it: the harness's own code may be cut, the runner's never.

With one slot (the worker's main thread) it is SIGALRM, armed only while the harness's code runs
(AlarmClock). With K slots each is a thread and the worker's main thread watches their deadlines, raising
the same exception in a slot's thread at its next Python instruction and cancelling its queries
(WatchedClock). Either way the cut waits while the thread is inside one of the runner's own critical
sections (runner/interrupts.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from runner.interrupts import Alarm, cut_lock, shielded_now, unshield
from runner.results.result import now_iso


class Clock:
    """A chunk's time limit. `start(seconds)` when the chunk starts, `running()` around each stretch of
    the harness's own code (the only place the cut may land), `stop()` when the chunk ends."""

    def __init__(self) -> None:
        self.deadline: float | None = None

    def start(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def stop(self) -> None:
        self.deadline = None

    @contextmanager
    def running(self) -> Iterator[None]:
        yield


SHIELD_RETRY_SECONDS = 0.005  # an alarm that fell inside a shield comes back this much later
END_AFTER_SECONDS = 1.0  # a cut slot's queries ignored their cancel this long: its sessions at work are ended


class AlarmClock(Clock):
    """K = 1: the slot is the main thread; SIGALRM, armed only while the harness runs, raises Alarm."""

    def __init__(self) -> None:
        super().__init__()
        self.inside = False

    def install(self) -> None:
        signal.signal(signal.SIGALRM, self._on_alarm)

    def _on_alarm(self, signum: int, frame: Any) -> None:
        if not self.inside:  # a signal handled late, after its harness code returned, is let go
            return
        if shielded_now(threading.get_ident()):  # inside the runner's own critical section: a moment later
            signal.setitimer(signal.ITIMER_REAL, SHIELD_RETRY_SECONDS)
            return
        raise Alarm()

    @contextmanager
    def running(self) -> Iterator[None]:
        assert self.deadline is not None
        # Marked inside before the timer is armed: a timer that fires at once (a deadline already near)
        # must find the mark, or its Alarm is let go and the record runs on until the worker is killed.
        self.inside = True
        unshield(threading.get_ident())
        try:
            left = self.deadline - time.monotonic()
            if left <= 0:  # the deadline passed between two stretches of the harness: cut it here
                raise Alarm()
            signal.setitimer(signal.ITIMER_REAL, left)
            yield
        finally:
            self.inside = False
            signal.setitimer(signal.ITIMER_REAL, 0)


_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_set_async_exc.argtypes = (ctypes.c_ulong, ctypes.py_object)
_clear_async_exc = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p)(
    ("PyThreadState_SetAsyncExc", ctypes.pythonapi)
)


class WatchedClock(Clock):
    """K > 1: the slot is a thread; the worker's main thread calls `check()` and, past the deadline while
    the harness runs, raises Alarm in the slot's thread (at its next Python instruction) and cancels
    the slot's queries (a thread blocked in the database returns to take it)."""

    def __init__(self, cancel: Callable[[], None], end: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.cancel, self.end = cancel, end
        self._ended = False
        self.thread: int | None = None
        self.started: tuple[str, float] | None = None
        self._lock = threading.Lock()
        self._inside = self._raised = False
        self._raised_at = 0.0

    def start(self, seconds: float) -> None:
        super().start(seconds)
        self.started = (now_iso(), time.monotonic())

    @contextmanager
    def running(self) -> Iterator[None]:
        unshield(threading.get_ident())
        with self._lock:
            self.thread, self._inside, self._raised = threading.get_ident(), True, False
        try:
            yield
        finally:
            with self._lock:
                self._inside = False
                if self._raised:  # raised but not yet taken: it must not land in the runner's code
                    _clear_async_exc(self.thread, None)

    def check(self, now: float) -> bool:
        """Cut the harness if it is past its deadline; True if it was cut now. Not while the thread is in
        one of the runner's own critical sections (runner/interrupts.py): the next check cuts it. Cut and
        still inside END_AFTER_SECONDS later (a statement that caught the cancel: a plpgsql loop's EXCEPTION
        WHEN query_canceled), the slot's sessions still at work are ended, which nothing catches: the
        thread's blocked read returns and takes its Alarm, and the worker need not retire."""
        if self.end is not None and not self._ended and self.stuck(now, END_AFTER_SECONDS):
            self._ended = True
            with contextlib.suppress(Exception):
                self.end()
        with self._lock, cut_lock:
            if (
                not self._inside
                or self._raised
                or self.deadline is None
                or now < self.deadline
                or self.thread is None
                or shielded_now(self.thread)
            ):
                return False
            self._raised, self._raised_at, self._ended = True, now, False
            _set_async_exc(self.thread, Alarm)
        with contextlib.suppress(Exception):
            self.cancel()
        return True

    def stuck(self, now: float, grace: float) -> bool:
        """Cut `grace` seconds ago and still inside the harness's code."""
        with self._lock:
            return self._inside and self._raised and now - self._raised_at > grace
