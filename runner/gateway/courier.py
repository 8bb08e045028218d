"""A batch's life at its provider, for batch mode (batcher.py): made (the batch API's 429s and overloads
waited out as it says, the try not spent), watched to its end with backoff, collected; and one a killed
gateway may have made, found in the provider's list (an OpenAI batch by the intent in its metadata, a
Bedrock job by its name, an Anthropic batch made since by its results holding the intent's custom ids).
The journal hears of each batch as it ends; the counters go to the gateway's /batches."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import Any

import aiohttp
from loguru import logger

from runner.config import BatchSettings
from runner.gateway.batch_api import (
    INTENT_KEY,
    BatchEndpoint,
    BatchFailed,
    BatchGone,
    BatchRefused,
    Outcome,
    of,
)
from runner.gateway.journal import Intent, Journal

# How long a batch API's 429 or overload is waited out, in all, before the calls leave batch mode.
CREATE_PATIENCE_SECONDS = 600.0
COLLECT_TRIES = 5  # a results file unreachable this many times in a row: the batch is given up


class Unmade(Exception):
    """The batch could not be made: why, in words (its requests go again, or leave batch mode)."""


class Courier:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        settings: BatchSettings,
        journal: Journal | None,
        stats: Counter[str],
    ) -> None:
        self.session, self.settings, self.journal, self.stats = session, settings, journal, stats

    async def create(self, ep: BatchEndpoint, intent: Intent, items: list[tuple[str, dict[str, Any]]]) -> str:
        """The new batch's id, once the batch API took it; Unmade when it would not (a refusal, an
        unreachable API that made no batch)."""
        waited, backoff = 0.0, 1.0
        while True:
            try:
                batch_id, _ = await of(ep).submit(self.session, ep, items, intent.id)
                return batch_id
            except BatchRefused as e:
                if (e.status == 429 or e.status >= 500) and waited < CREATE_PATIENCE_SECONDS:
                    wait = e.retry_after if e.retry_after is not None else backoff
                    backoff = min(60.0, backoff * 2)
                    self.stats["batch_create_waits"] += 1
                    logger.info(
                        "the batch API answered {} to a batch of {}: asking again in {:.0f}s, as it said",
                        e.status,
                        len(items),
                        wait,
                    )
                    await asyncio.sleep(wait)
                    waited += wait
                    continue
                raise Unmade(f"the batch API refused the batch (HTTP {e.status}: {e.words[:160]})") from None
            except (aiohttp.ClientError, TimeoutError) as e:
                # it may have been made all the same: look before sending its requests again
                if (found := await self.find(ep, intent)) is not None:
                    return found
                raise Unmade(f"the batch API could not be reached ({type(e).__name__})") from None

    async def watch(self, ep: BatchEndpoint, batch_id: str) -> dict[str, Outcome]:
        """Poll until the batch ends, then collect it (BatchFailed for one that failed whole). A 429 is waited
        out as it says; a results file unreachable COLLECT_TRIES times in a row gives the batch up."""
        wait, failures = self.settings.poll_min_seconds, 0
        while True:
            await asyncio.sleep(wait)
            try:
                ended, obj = await of(ep).state(self.session, ep, batch_id)
                if ended:
                    outcomes = await of(ep).collect(self.session, ep, obj)
                    self._ended(batch_id)
                    return outcomes
                failures = 0
            except BatchFailed:
                self._ended(batch_id)
                raise
            except BatchGone:
                logger.warning(
                    "batch {} is unknown to {}, or its results are gone: its requests go out again",
                    batch_id,
                    ep.provider,
                )
                self._ended(batch_id)
                return {}
            except BatchRefused as e:
                failures += e.status != 429
                if e.retry_after is not None:
                    wait = max(wait, e.retry_after)
                logger.warning("batch {}: {} (polling on)", batch_id, e)
            except (aiohttp.ClientError, TimeoutError, ValueError) as e:
                failures += 1
                logger.warning("batch {}: {} (polling on)", batch_id, e)
            if failures >= COLLECT_TRIES:
                logger.warning(
                    "batch {}: no answer {} times in a row: given up, its requests go out again",
                    batch_id,
                    failures,
                )
                self._ended(batch_id)
                return {}
            wait = min(self.settings.poll_max_seconds, wait * 2)

    def _ended(self, batch_id: str) -> None:
        if self.journal is not None:
            self.journal.collected(batch_id)
        self.stats["batches_ended"] += 1

    async def find(self, ep: BatchEndpoint, intent: Intent) -> str | None:
        """The batch an intent created, if the provider lists one: an OpenAI batch by the intent in its
        metadata, a Bedrock job by its name, a Vertex AI job by its label (an Anthropic batch cannot say:
        `claim` watches those)."""
        if ep.provider not in ("openai", "azure", "bedrock", "vertex"):
            return None
        with contextlib.suppress(BatchRefused, aiohttp.ClientError, TimeoutError, ValueError):
            for b in await of(ep).listed(self.session, ep, intent.at - 120):
                if (b.get("metadata") or {}).get(INTENT_KEY) == intent.id:
                    return str(b["id"])
        return None

    async def claim(self, ep: BatchEndpoint, intent: Intent) -> dict[str, Outcome]:
        """The answers of an Anthropic intent never journaled as submitted: every batch listed since it was
        intended, not journaled already, watched to its end and claimed where its results hold the intent's
        custom ids."""
        known = self.journal.journaled_batches() if self.journal is not None else set()
        out: dict[str, Outcome] = {}
        for b in await of(ep).listed(self.session, ep, intent.at - 120):
            if str(b.get("id")) in known:
                continue
            outcomes = await self.watch(ep, str(b["id"]))
            mine = {cid: o for cid, o in outcomes.items() if cid in intent.keys}
            if mine:
                if self.journal is not None:
                    self.journal.submitted(intent.id, ep.provider, str(b["id"]), intent.keys)
                    self.journal.collected(str(b["id"]))
                out.update(mine)
        return out
