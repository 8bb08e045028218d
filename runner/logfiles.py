"""The runner's log sinks: files for the supervisor and each worker, the console for the CLI.

loguru's `diagnose` (on by default) prints every local variable's value beside a traceback: a
sandbox's password, an SDK client's key, a record's content. Logs are shared and kept, so no sink
here shows them; the traceback's lines are enough to find the fault.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from loguru import logger


def add_log_file(path: Path, level: str = "DEBUG") -> int:
    return logger.add(path, level=level, enqueue=False, diagnose=False)


def add_console(verbose: bool) -> int:
    return logger.add(
        sys.stderr,
        level="DEBUG" if verbose else "INFO",
        format="<level>{level: <7}</level> {message}",
        diagnose=False,
    )


def capture_output(marker: Callable[[], str]) -> None:
    """This process's stdout and stderr (a harness's prints and `logging`, C libraries, subprocesses started
    without pipes) into its log, each line marked with `marker()` (the records running), instead of
    onto the console the supervisor draws its progress on."""
    read, write = os.pipe()
    for fd in (1, 2):
        os.dup2(write, fd)
    os.close(write)
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True)  # a pipe is block-buffered: lines would come late

    def copy() -> None:
        with open(read, "rb") as lines:
            for line in lines:
                logger.info("harness {} | {}", marker(), line.decode(errors="replace").rstrip("\n"))

    threading.Thread(target=copy, daemon=True, name="output-to-log").start()
