"""A response cache shared by all workers: SQLite in WAL mode, one connection per process.

Key: SHA-256 of the canonical request (models.base.Request.cache_key). Value: the normalised
completion. Only successful completions are stored; errors never are.

The supervisor creates the file (schema, WAL) before any worker starts: switching a new database
to WAL takes an exclusive lock, and SQLite answers "database is locked" at once, without its busy
handler, when several processes race to do it. Opening still retries, for a cache created by a
concurrent run. A failed write is logged and skipped: a lost cache entry costs one API call later,
a failed conversation costs a result.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from loguru import logger

DEFAULT_DIR = Path(".cache/pgsandbox-runner")
OPEN_TIMEOUT_S = 30.0


def _locked(exc: sqlite3.OperationalError) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


class ResponseCache:
    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / "responses.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        self._lock = threading.Lock()  # a worker's slots (threads) share this connection
        deadline = time.monotonic() + OPEN_TIMEOUT_S
        while True:
            try:
                self._prepare()
                return
            except sqlite3.OperationalError as exc:
                if not _locked(exc) or time.monotonic() > deadline:
                    self._db.close()
                    raise
                time.sleep(0.05)

    def _prepare(self) -> None:
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, provider TEXT, model TEXT,"
            " value TEXT NOT NULL, created REAL NOT NULL)"
        )
        # Expected final states (gold replays), keyed by conversation content and schema: one replay
        # serves every worker and every rerun.
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS expected_states (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
        )

    def _write(self, sql: str, params: tuple[Any, ...]) -> None:
        try:
            with self._lock:
                self._db.execute(sql, params)
        except sqlite3.OperationalError as exc:
            if not _locked(exc):
                raise
            logger.warning("response cache busy for 30 s; entry not stored ({})", exc)

    def _read(self, sql: str, key: str) -> dict[str, Any] | None:
        try:
            with self._lock:
                row = self._db.execute(sql, (key,)).fetchone()
        except sqlite3.OperationalError as exc:
            if not _locked(exc):
                raise
            logger.warning("response cache busy for 30 s; treated as a miss ({})", exc)
            return None
        return json.loads(row[0]) if row else None

    def get(self, key: str) -> dict[str, Any] | None:
        return self._read("SELECT value FROM responses WHERE key = ?", key)

    def put(self, key: str, provider: str, model: str, value: dict[str, Any]) -> None:
        self._write(
            "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?)",
            # key order kept: a replayed tool call must be the call the model made, byte for byte
            (key, provider, model, json.dumps(value), time.time()),
        )

    def get_state(self, key: str) -> dict[str, Any] | None:
        return self._read("SELECT value FROM expected_states WHERE key = ?", key)

    def put_state(self, key: str, value: dict[str, Any]) -> None:
        self._write("INSERT OR REPLACE INTO expected_states VALUES (?, ?)", (key, json.dumps(value)))

    def stats(self) -> dict[str, Any]:
        rows = self._db.execute(
            "SELECT provider, model, count(*), sum(length(value)) FROM responses "
            "GROUP BY provider, model ORDER BY provider, model"
        ).fetchall()
        return {
            "path": str(self.path),
            "entries": sum(r[2] for r in rows),
            "bytes": self.path.stat().st_size if self.path.exists() else 0,
            "by_model": [{"provider": p, "model": m, "entries": n, "value_bytes": b} for p, m, n, b in rows],
        }

    def clear(self) -> int:
        n = self._db.execute("SELECT count(*) FROM responses").fetchone()[0]
        self._db.execute("DELETE FROM responses")
        self._db.execute("DELETE FROM expected_states")
        self._db.execute("VACUUM")
        return int(n)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> ResponseCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
