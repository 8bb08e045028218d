"""Batch mode's journal: which batches are out and which request each of their custom ids stands for, in the
output directory, so that a run resumed after Ctrl-C or kill -9 collects them instead of paying for the
same requests again.

One JSON line per event, each on disk before the gateway acts on it (runner/durable.py: a torn last line is
cut off before the next is appended):
- `intend` (an intent id, its provider, path and time, custom id -> request key) before a batch is created;
- `submitted` (the intent, the batch's id) once the provider took it;
- `collected` once its results are in;
- `settled` (an intent) once a resumed gateway has looked for the batch an intent never journaled (its
  gateway killed during the create call: the provider may hold it, billed) and claimed it or found none.

A batch submitted and not collected is pending; an intent neither submitted nor settled is unknown: its
requests may be in a batch the provider holds, and a resumed gateway looks there before sending them again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.durable import Log


@dataclass(frozen=True)
class Intent:
    """A batch about to be created, journaled first."""

    id: str
    provider: str
    path: str
    at: float  # epoch seconds
    keys: dict[str, str]  # custom id -> request key


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        # on disk before the batch goes out: a kill -9 a moment later loses nothing
        self._log = Log(path, sync=True)

    def _write(self, event: dict[str, Any]) -> None:
        self._log.append(json.dumps(event, sort_keys=True))

    def intend(self, intent: Intent) -> None:
        self._write(
            {
                "event": "intend",
                "intent": intent.id,
                "provider": intent.provider,
                "path": intent.path,
                "at": intent.at,
                "keys": intent.keys,
            }
        )

    def submitted(self, intent: str, provider: str, batch_id: str, keys: dict[str, str]) -> None:
        self._write(
            {"event": "submitted", "intent": intent, "provider": provider, "batch": batch_id, "keys": keys}
        )

    def collected(self, batch_id: str) -> None:
        self._write({"event": "collected", "batch": batch_id})

    def settled(self, intent: str) -> None:
        self._write({"event": "settled", "intent": intent})

    def _events(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        events = []
        for line in self.path.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                continue  # a torn last line: the process died writing it (the next append cuts it off)
        return events

    def pending(self) -> list[tuple[str, str, dict[str, str]]]:
        """(provider, batch id, custom id -> request key) of every batch submitted and not collected."""
        out: dict[str, tuple[str, str, dict[str, str]]] = {}
        for e in self._events():
            if e.get("event") == "submitted":
                out[e["batch"]] = (e["provider"], e["batch"], e["keys"])
            elif e.get("event") == "collected":
                out.pop(str(e.get("batch")), None)
        return list(out.values())

    def unknown(self) -> list[Intent]:
        """Intents neither submitted nor settled: whether the provider holds a batch of theirs is not
        known."""
        intents: dict[str, Intent] = {}
        for e in self._events():
            kind, iid = e.get("event"), e.get("intent")
            if kind == "intend" and iid:
                intents[iid] = Intent(
                    iid, e["provider"], e.get("path") or "", float(e.get("at") or 0.0), e["keys"]
                )
            elif kind in ("submitted", "settled") and iid:
                intents.pop(str(iid), None)
        return list(intents.values())

    def journaled_batches(self) -> set[str]:
        """Every batch id the journal names (a listed batch among these is not an unjournaled one)."""
        return {str(e["batch"]) for e in self._events() if e.get("batch")}
