"""Batch mode's succession: a gateway started on an output a killed one left (batcher.py's `resume`)
collects that one's batches still out, and looks for the ones it was creating when it died (journaled as
intended, never as submitted), so that no request is paid for twice. What it finds goes to `Inherited`,
where the callers asking again find it."""

from __future__ import annotations

from collections import Counter

import aiohttp
from loguru import logger

from runner.gateway.batch_api import BatchEndpoint, BatchFailed, BatchRefused, Outcome
from runner.gateway.courier import Courier
from runner.gateway.inherited import Inherited
from runner.gateway.journal import Intent, Journal


class Succession:
    def __init__(
        self, courier: Courier, journal: Journal | None, inherited: Inherited, stats: Counter[str]
    ) -> None:
        self.courier, self.journal, self.inherited, self.stats = courier, journal, inherited, stats

    async def collect(self, ep: BatchEndpoint, batch_id: str, keys: dict[str, str]) -> None:
        """A batch the predecessor submitted, watched to its end: each answer kept for its request's key."""
        try:
            outcomes = await self.courier.watch(ep, batch_id)
        except BatchFailed:
            outcomes = {}
        for cid, key in keys.items():
            self.inherited.collected(key, outcomes.get(cid))
        logger.info("batch {} (left by an earlier gateway) collected", batch_id)

    async def recover(self, ep: BatchEndpoint, intent: Intent) -> None:
        """An intent never journaled as submitted: its batch, if the provider holds one, is claimed (an OpenAI
        batch by its metadata; an Anthropic batch made since, by its results holding the intent's custom ids),
        else its requests go out again, once."""
        claimed: dict[str, Outcome] = {}
        try:
            found = await self.courier.find(ep, intent)
            if found is not None:
                if self.journal is not None:
                    self.journal.submitted(intent.id, ep.provider, found, intent.keys)
                self.stats["batches_resumed"] += 1
                claimed = await self.courier.watch(ep, found)
            elif ep.provider == "anthropic":
                claimed = await self.courier.claim(ep, intent)
        except (BatchFailed, BatchRefused, aiohttp.ClientError, TimeoutError, ValueError) as e:
            logger.warning("looking for the batch of an interrupted create ({}): {}", intent.id[:8], e)
        if self.journal is not None:
            self.journal.settled(intent.id)
        for cid, key in intent.keys.items():
            self.inherited.collected(key, claimed.get(cid))
        self.stats["intents_recovered" if claimed else "intents_not_found"] += 1
