"""What every resource shares: `with` starts it, leaving stops it, and a failed start still cleans up."""

from __future__ import annotations

import signal
import subprocess
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
