"""Batch mode's journal: which batches are out and which request each of their custom ids stands for,
in the output directory, so that a run resumed after Ctrl-C or kill -9 collects them instead of paying
for the same requests again.

One JSON line per event, appended and flushed as it happens: `intend` (custom id -> request key) before a
batch is submitted, `submitted` (its id) once the provider took it, `collected` once its results are in.
A batch submitted but never collected is pending; an `intend` never followed by `submitted` was not taken
(or its id was lost with the process: the provider bills it, and nothing here can claim it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def _write(self, event: dict[str, Any]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(event, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())  # on disk before the batch goes out: a kill -9 a moment later loses nothing

    def intend(self, provider: str, keys: dict[str, str]) -> None:
        self._write({"event": "intend", "provider": provider, "keys": keys})

    def submitted(self, provider: str, batch_id: str, keys: dict[str, str]) -> None:
        self._write({"event": "submitted", "provider": provider, "batch": batch_id, "keys": keys})

    def collected(self, batch_id: str) -> None:
        self._write({"event": "collected", "batch": batch_id})

    def pending(self) -> list[tuple[str, str, dict[str, str]]]:
        """(provider, batch id, custom id -> request key) of every batch submitted and not collected."""
        out: dict[str, tuple[str, str, dict[str, str]]] = {}
        if not self.path.exists():
            return []
        for line in self.path.read_text().splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue  # a torn last line: the process died writing it
            if e.get("event") == "submitted":
                out[e["batch"]] = (e["provider"], e["batch"], e["keys"])
            elif e.get("event") == "collected":
                out.pop(e.get("batch"), None)
        return list(out.values())
