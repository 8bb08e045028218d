"""The runner's log sinks: files for the supervisor and each worker, the console for the CLI.

loguru's `diagnose` (on by default) prints every local variable's value beside a traceback: a
sandbox's password, an SDK client's key, a record's content. Logs are shared and kept, so no sink
here shows them; the traceback's lines are enough to find the fault.
"""

from __future__ import annotations

import sys
from pathlib import Path

from loguru import logger


def add_log_file(path: Path, level: str = "DEBUG") -> int:
    return logger.add(path, level=level, enqueue=False, diagnose=False)


def add_console(verbose: bool) -> int:
    return logger.add(sys.stderr, level="DEBUG" if verbose else "INFO", format="<level>{level: <7}</level> {message}",
                      diagnose=False)
