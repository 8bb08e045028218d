"""What every resource shares: `with` starts it, leaving stops it, and a failed start still cleans up."""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
from abc import ABC, abstractmethod
from types import TracebackType
from typing import Any, Self


def fd_ready(fd: int, timeout: float, *, write: bool = False) -> bool:
    """Whether `fd` can be read (or written) within `timeout` seconds. poll(2), not select(2): a worker with
    hundreds of slots holds more than 1,024 descriptors, and select() refuses any numbered past that
    ("filedescriptor out of range": 672 of 1,024 records of a batch-mode run failed on it)."""
    p = select.poll()
    p.register(fd, select.POLLOUT if write else select.POLLIN)
    return bool(p.poll(max(0.0, timeout) * 1000))


class Resource(ABC):
    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> None:
        """Release everything; safe after a failed or partial start, and safe twice."""

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


PARENT_ENV = "RUNNER_PARENT_PID"
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int, sig: int = signal.SIGTERM, *, via_forkserver: bool = False) -> None:
    """Have the kernel send `sig` to this process when its parent dies, kill -9 included (Linux
    PR_SET_PDEATHSIG), so that no worker or server outlives a supervisor that could not clean up.
    If the parent is already gone, the signal comes now. A process forked by a multiprocessing
    forkserver has that server as its parent, which exits when the supervisor dies (once its children
    let go of it: leave_forkserver): the signal then comes from the server's death, and here
    `parent_pid` must be the server's parent."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the supervisor's own clean-up is all there is
        return
    parent = os.getppid()
    if parent != parent_pid and not (via_forkserver and parent_of(parent) == parent_pid):
        os.kill(os.getpid(), sig)


def leave_forkserver() -> None:
    """In a process forked by a multiprocess forkserver: close our copy of the server's "alive" pipe.

    Every child of a forkserver holds that pipe's write end (so that it could start processes through
    the server too), and the server exits only once every holder has closed it. A worker starts none;
    while it held the pipe, a supervisor's kill -9 left the server waiting for its workers and a worker
    idle on its task queue waiting for the server's death (PR_SET_PDEATHSIG, see die_with_parent):
    both lived on. Without our copy the server exits with the supervisor, and the signal comes."""
    from multiprocess import forkserver

    server = forkserver._forkserver  # private, but the one place multiprocess keeps that descriptor
    fd, server._forkserver_alive_fd = server._forkserver_alive_fd, None
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def parent_of(pid: int) -> int | None:
    """A live process's parent pid, from /proc (None if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def stop_process(proc: subprocess.Popen[Any] | None, *, sig: int = signal.SIGINT, timeout: float = 10.0) -> None:
    """Ask a child to stop (SIGINT: PostgreSQL's fast shutdown, aiohttp's clean exit), then kill it."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class ServerProcess(Resource):
    """A `python -m runner ...` server child that prints 'listening on URL' once bound (simulator, gateway)."""

    name = "server"
    program = [sys.executable, "-m", "runner"]

    def __init__(self, args: list[str], *, boot_timeout: float = 30.0, log_path: str | None = None) -> None:
        self.args, self.boot_timeout = args, boot_timeout
        self.log_path = log_path or os.path.join(tempfile.gettempdir(), f"pgsandbox-{self.name}-{os.getpid()}.log")
        self.url = ""
        self.starts = 0
        self._proc: subprocess.Popen[bytes] | None = None

    def on_port(self, port: int) -> list[str]:
        """The arguments that start it again on `port` (its clients keep their URL across a restart)."""
        return self.args

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def exit_description(self) -> str:
        code = self._proc.returncode if self._proc is not None else None
        if code is not None and code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exit code {code}"

    def restart(self) -> None:
        """Start it again where it was (same port); raises RunStopped if it cannot come back."""
        port = urllib.parse.urlsplit(self.url).port
        if port:
            self.args = self.on_port(port)
        self.stop()
        self.start()

    def start(self) -> None:
        from runner.errors import RunStopped

        self.starts += 1
        # stderr to a file: a pipe nobody reads would block the server once it fills. A restart appends,
        # so the log still holds the last words of the one that died.
        with open(self.log_path, "w" if self.starts == 1 else "a") as log:
            self._proc = subprocess.Popen(
                [*self.program, *self.args], stdout=subprocess.PIPE, stderr=log,
                env={**os.environ, "PYTHONUNBUFFERED": "1", PARENT_ENV: str(os.getpid())},
                start_new_session=True)  # Ctrl-C goes to the supervisor, which stops us last
        line = self._first_line()
        if line.startswith("listening on "):
            self.url = line.split("listening on ", 1)[1].strip()
            return
        with open(self.log_path) as log:
            err = log.read()[-1500:]
        said = f"it said {line.strip()!r}" if line.strip() else f"no word in {self.boot_timeout:g}s"
        raise RunStopped(f"the {self.name} did not start ({said}): {err}")

    def _first_line(self) -> str:
        """Its first line of output, or what came before the boot timeout or its exit (never blocks past it)."""
        assert self._proc is not None and self._proc.stdout is not None
        fd, buf = self._proc.stdout.fileno(), b""
        deadline = time.monotonic() + self.boot_timeout
        while b"\n" not in buf and (left := deadline - time.monotonic()) > 0:
            if fd_ready(fd, left):
                chunk = os.read(fd, 4096)
                if not chunk:  # it exited
                    break
                buf += chunk
        return buf.decode(errors="replace").split("\n", 1)[0]

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def stop(self) -> None:
        stop_process(self._proc)
        self._proc = None
