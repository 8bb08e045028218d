"""The supervisor's one inbox, made of one pipe per worker.

Why not one shared `multiprocessing.Queue`: its writers share one lock, held while a message is
written. A worker killed with SIGKILL mid-write (a harness that kills its process, the OOM killer,
our own kill of a stuck worker) never releases it, and every other worker then blocks on its next
put: the run hangs. With a pipe per worker, a killed writer can only break its own pipe, which the
supervisor sees as end-of-file and drops.
"""

from __future__ import annotations

import collections
import contextlib
import pickle
import threading
import time
from typing import Any

from multiprocess.connection import wait  # the pipes come from multiprocess's spawn context

IDLE_SECONDS = 0.01

Connection = Any  # multiprocess.connection.Connection (no type stubs)


class Outbox:
    """A worker's end: `put(msg)` from any of its threads (main loop, heartbeat)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._lock = threading.Lock()  # a thread lock dies with its process, unlike a shared one

    def put(self, msg: Any) -> None:
        # The C pickler, not the pure-Python one multiprocess's send() would use (dill's): a result
        # with its transcript took ~1 ms of a worker's CPU that way. Messages are plain dataclasses.
        data = pickle.dumps(msg, pickle.HIGHEST_PROTOCOL)
        with self._lock:
            self.conn.send_bytes(data)


class Inbox:
    """`inbox.open(ctx)` per worker spawned; `inbox.get(timeout)` returns the next message or None."""

    def __init__(self) -> None:
        self._readers: list[Connection] = []
        self._ready: collections.deque[Connection] = collections.deque()

    def open(self, ctx: Any) -> Connection:
        """A new pipe; its writing end goes to one worker (as `Outbox(writer)` there), and is closed
        here once that worker started, so that its death reads as end-of-file."""
        reader, writer = ctx.Pipe(duplex=False)
        self._readers.append(reader)
        return writer

    def get(self, timeout: float) -> Any:
        while True:
            if not self._ready:
                if not self._readers:  # no worker's pipe open: briefly, for a worker exiting is not yet
                    time.sleep(min(timeout, IDLE_SECONDS))  # reaped (the caller's loop looks again)
                    return None
                ready = wait(self._readers, timeout)
                if not ready:
                    return None
                self._ready.extend(ready)
            conn = self._ready.popleft()
            if conn not in self._readers:
                continue
            try:
                return pickle.loads(conn.recv_bytes())
            except (EOFError, OSError):  # the worker exited or died, perhaps mid-message
                self._drop(conn)
                timeout = 0

    def _drop(self, conn: Connection) -> None:
        self._readers.remove(conn)
        with contextlib.suppress(OSError):
            conn.close()

    def close(self) -> None:
        for conn in list(self._readers):
            self._drop(conn)


class Tasks:
    """The supervisor's queue to one worker. Messages cross it as bytes of the C pickler: the
    queue's own (multiprocess's, dill's pure-Python pickler) was a tenth of the supervisor's CPU at
    64 conversations in flight, and its loads a few per cent of each worker's."""

    def __init__(self, ctx: Any) -> None:
        self.queue = ctx.Queue()

    def put(self, msg: Any) -> None:
        self.queue.put(pickle.dumps(msg, pickle.HIGHEST_PROTOCOL))

    def get(self, timeout: float | None = None) -> Any:
        """The next message; queue.Empty after `timeout` seconds without one."""
        return pickle.loads(self.queue.get(timeout=timeout))
