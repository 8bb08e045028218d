"""What a gateway before this one left out, for batch mode (batcher.py): answers paid for and not yet taken
(of its batches collected since a resume, and of ours whose callers hung up before they came), and its
batches still out, whose callers wait for them."""

from __future__ import annotations

import asyncio
from typing import Any

from runner.gateway.batch_api import Outcome


class _Again(Exception):
    """A predecessor's batch came back without this request's answer: ask again."""


class Inherited:
    """Answers paid for and not yet taken, by request key: what a gateway before this one left out (a run
    resumed after kill -9), answers of its batches nobody has asked for again yet and its batches still
    out, whose callers wait for them; and answers of ours whose callers hung up before they came."""

    def __init__(self) -> None:
        self.ready: dict[str, tuple[int, dict[str, Any]]] = {}
        self.out: set[str] = set()
        self.awaited: dict[str, list[asyncio.Future[tuple[int, dict[str, Any]]]]] = {}  # callers of those

    def holds(self, key: str) -> bool:
        return key in self.ready or key in self.out

    def taken(self, key: str) -> bool:
        """A caller waits on its batch already."""
        return bool(self.awaited.get(key))

    def claimable(self, key: str) -> bool:
        return key in self.ready or (key in self.out and not self.taken(key))

    async def answer(self, key: str) -> tuple[int, dict[str, Any]] | None:
        """Its answer, now or once the predecessor's batch is collected; None where there is none (the
        request goes into a batch of ours)."""
        if (found := self.ready.pop(key, None)) is not None:
            return found
        if key not in self.out:
            return None
        fut: asyncio.Future[tuple[int, dict[str, Any]]] = asyncio.get_running_loop().create_future()
        self.awaited.setdefault(key, []).append(fut)
        try:
            return await fut
        except _Again:  # its batch came back without it
            return None

    def collected(self, key: str, outcome: Outcome) -> None:
        self.out.discard(key)
        waiting = self.awaited.pop(key, [])
        for fut in waiting:
            if outcome is None:  # worth another try: asked again, it goes into a new batch
                fut.set_exception(_Again())
            else:
                fut.set_result(outcome)
        if outcome is not None and not waiting:
            self.ready[key] = outcome
