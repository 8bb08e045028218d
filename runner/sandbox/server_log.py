"""What a sandbox's server logs, read back through SQL: the class-53 errors (out of lock table, memory,
disk, connections) a record's sessions met, by role, so a slot can tell a record that failed because a
neighbour exhausted what the server shares (tenancy.py's Steward asks, runner/worker/slot.py decides)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

from loguru import logger

# What the server logs once it runs as the runner starts it (command-line settings, so a container started
# by hand or by compose logs to its standard error as usual): errors as JSON lines in the data directory,
# read back by `starved`; never a statement's text (a record's, which may hold what it was given).
SERVER_LOG_SETTINGS = {
    "logging_collector": "on",
    "log_destination": "jsonlog",
    "log_directory": "log",
    "log_rotation_age": "0",
    "log_rotation_size": "0",
    "log_min_error_statement": "panic",
}
LOG_READ_BYTES = 1 << 20


Query = Callable[..., list[tuple[Any, ...]]]  # the runner's own session: (query, params) -> rows


def server_args(settings: dict[str, str]) -> list[str]:
    return [a for k, v in settings.items() for a in ("-c", f"{k}={v}")]


class ServerLog:
    """The server's JSON log, read on demand from where it was left; callers take turns
    (the Steward's lock)."""

    def __init__(self) -> None:
        self._log: tuple[str, int] | None = None  # the server's log file and how far it has been read
        self._partial = b""
        self._starved: dict[str, list[tuple[float, str]]] = {}

    def starved(self, role: str, since: float, until: float, q: Query) -> str | None:
        """What the server ran out of for one of `role`'s sessions between `since` and `until` (Unix times),
        in words; None if it did not."""
        self._read(q)
        for at, what in self._starved.get(role, []):
            if since - 1.0 <= at <= until + 1.0:
                return what
        return None

    def _read(self, q: Query) -> None:
        """The server's new log lines: remember each class-53 error by role."""
        (name,) = q("SELECT pg_current_logfile('jsonlog')")[0]
        if not name:
            return
        if self._log is None or self._log[0] != name:
            self._log, self._partial = (name, 0), b""
        while True:
            (chunk,) = q(
                "SELECT pg_read_binary_file(%s, %s, %s, true)", (name, self._log[1], LOG_READ_BYTES)
            )[0]
            if not chunk:
                return
            self._log = (name, self._log[1] + len(chunk))
            lines = (self._partial + bytes(chunk)).split(b"\n")
            self._partial = lines.pop()
            for line in lines:
                self._note(line)
            if len(chunk) < LOG_READ_BYTES:
                return

    def _note(self, line: bytes) -> None:
        try:
            entry = json.loads(line)
        except ValueError:
            return
        code, user = str(entry.get("state_code") or ""), entry.get("user")
        if not code.startswith("53") or not user:
            return
        try:
            at = (
                dt.datetime.strptime(entry["timestamp"].removesuffix(" UTC"), "%Y-%m-%d %H:%M:%S.%f")
                .replace(tzinfo=dt.UTC)
                .timestamp()
            )
        except (KeyError, ValueError):
            return
        noted = self._starved.setdefault(str(user), [])
        noted.append((at, f"{code} {entry.get('message', '')}".strip()))
        del noted[:-100]  # the latest are what a record that just ended asks about
        logger.debug("server: {} for {}", noted[-1][1], user)
