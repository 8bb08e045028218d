"""What every resource shares: `with` starts it, leaving stops it, and a failed start still cleans up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from types import TracebackType
from typing import Any, Self


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

    def __init__(self, args: list[str], *, boot_timeout: float = 30.0, log_path: str | None = None) -> None:
        self.args, self.boot_timeout = args, boot_timeout
        self.log_path = log_path or os.path.join(tempfile.gettempdir(), f"pgsandbox-{self.name}-{os.getpid()}.log")
        self.url = ""
        self._proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        from runner.errors import RunStopped

        # stderr to a file: a pipe nobody reads would block the server once it fills.
        with open(self.log_path, "w") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "runner", *self.args], stdout=subprocess.PIPE, stderr=log, text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                start_new_session=True)  # Ctrl-C goes to the supervisor, which stops us last
        assert self._proc.stdout is not None
        deadline = time.monotonic() + self.boot_timeout
        line = ""
        while time.monotonic() < deadline:
            line = self._proc.stdout.readline()
            if line.startswith("listening on "):
                self.url = line.split("listening on ", 1)[1].strip()
                return
            if not line and self._proc.poll() is not None:
                break
        with open(self.log_path) as log:
            err = log.read()[-1500:]
        raise RunStopped(f"the {self.name} did not start: {line.strip()} {err}")

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def stop(self) -> None:
        stop_process(self._proc)
        self._proc = None
