"""A lock across a run's processes that the kernel releases when its holder dies.

`flock` on a file of the run's own: a process killed while it holds the lock (kill -9, the OOM killer)
loses it with its last descriptor, so no other process waits for a dead holder, and none has to guess
whether a recorded pid still is the holder (a guess that let two processes in at once, and looped forever
on a reused pid). Each process opens the file once and keeps it open, and a thread lock orders its threads.

Not `fcntl.lockf`: a POSIX record lock belongs to the process, and the kernel's deadlock detection sees
processes, not threads. One slot thread holding the budget's lock while another waits for the gates' lock,
held by a process waiting for the budget's, is a cycle to the kernel, which refused the last request with
EDEADLK (a false deadlock: the first thread lets go by itself); three records of the seeds' job ended in
that error. A `flock` lock belongs to the open file description and is never refused so.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

# Guards the first use of a lock in each process: two threads there must not each make a thread lock of
# their own (both would be inside at once: 65 of 200 fresh locks in a spawned process let two threads in).
_FIRST_USE = threading.Lock()
os.register_at_fork(after_in_child=lambda: globals().update(_FIRST_USE=threading.Lock()))


class ProcessLock:
    """`with lock.held(): ...`; picklable (it travels to spawned workers as its path)."""

    def __init__(self, path: str | None = None) -> None:
        if path is None:
            fd, path = tempfile.mkstemp(prefix="pgsr-lock-")
            os.close(fd)
        self.path = path
        self._pid = -1
        self._fd = -1
        self._threads = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]

    def _this_process(self) -> tuple[threading.Lock, int]:
        """This process's thread lock and descriptor, made once (a forked or spawned process needs its own:
        flock locks are not inherited, and a thread lock copied by fork may be held by a thread that is not
        there). `_pid` is set last, so a thread that sees it sees the rest."""
        if self._pid != os.getpid():
            with _FIRST_USE:
                if self._pid != os.getpid():
                    self._threads = threading.Lock()
                    self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                    self._pid = os.getpid()
        return self._threads, self._fd

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        threads, fd = self._this_process()
        with threads:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
