"""The supervisor's signals, counted where they arrive, not where Python gets round to them.

CPython's C-level handler only marks a signal as tripped; the Python handler runs later, in the main
thread, once per mark. Two Ctrl-C's that land while the main thread cannot run Python (another
thread holding the GIL in a long C call: the report's renderer warming up, ~0.3 s idle and seconds on
a loaded machine) reach it as one: the second Ctrl-C is lost and the run waits out its grace period.
Measured: 150 SIGINTs sent 20 ms apart while the renderer warmed up came to 135 Python handler calls.
The C handler also writes each signal's number to the wakeup fd (`signal.set_wakeup_fd`), once per
delivery, GIL or not: that byte is what this module counts.

`runner run` installs one inbox for the whole command, raising at first: a Ctrl-C while it checks its input,
builds the image or starts its servers stops it as Python would (KeyboardInterrupt, exit 130). From the
moment the supervisor starts (`hold`) every signal is counted instead, through the workers' shutdown, the
results' last rewrite, the manifest and the report, so none of them is left half done by a Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import signal
from types import FrameType
from typing import Any

HANDLED = (signal.SIGINT, signal.SIGTERM)


class SignalInbox:
    """`with SignalInbox() as s:` SIGINT and SIGTERM are noted, one byte each; `s.take()` returns those
    that arrived since the last call, in order. Main thread only (signal.signal's rule).

    `hold=False`: until `hold()`, a signal also raises KeyboardInterrupt (what SIGINT does by default, and
    SIGTERM too, so that either unwinds the command's context managers)."""

    def __init__(self, *, hold: bool = True) -> None:
        self.holding = hold
        self._r: int | None = None
        self._w: int | None = None
        self._previous: dict[int, Any] = {}
        self._previous_fd = -1
        self._depth = 0

    def _noted(self, signum: int, frame: FrameType | None) -> None:
        """Python's part. Installing a Python handler is what makes CPython's C handler write the signal's
        byte to the wakeup fd, where the loop reads it; while not holding, it stops the command too."""
        if not self.holding:
            raise KeyboardInterrupt

    def hold(self) -> None:
        """From now on a signal is only counted, for the supervisor's loop (and the command's end) to handle.
        A byte left by a signal that already raised is dropped: it was handled by its KeyboardInterrupt."""
        if not self.holding:
            self.take()
            self.holding = True

    def __enter__(self) -> SignalInbox:
        self._depth += 1
        if self._depth > 1:  # the command's inbox, entered again by the supervisor it handed it to
            return self
        self._r, self._w = os.pipe()
        try:
            for fd in (self._r, self._w):
                os.set_blocking(fd, False)
            self._previous = {s: signal.signal(s, self._noted) for s in HANDLED}
            self._previous_fd = signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._depth = max(0, self._depth - 1)
        if self._depth:
            return
        if self._w is not None and signal.set_wakeup_fd(self._previous_fd) != self._w:
            signal.set_wakeup_fd(-1)  # not ours after all: leave none rather than a closed fd
        for s, h in self._previous.items():
            signal.signal(s, h)
        self._previous = {}
        for fd in (self._r, self._w):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._r = self._w = None

    def note(self, signum: int) -> None:
        """As if `signum` had arrived (the C handler's own write)."""
        if self._w is not None:
            os.write(self._w, bytes([signum]))

    def take(self) -> list[int]:
        if self._r is None:
            return []
        data = b""
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while chunk := os.read(self._r, 512):
                data += chunk
        return [b for b in data if b in HANDLED]
