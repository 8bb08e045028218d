"""The providers' batch APIs as the gateway uses them, each behind the same four calls: submit one batch, see
whether it has ended, collect what each request came to, list the batches an earlier gateway may have
created. Anthropic's Message Batches (batch_anthropic.py); OpenAI's Batch API, and Azure OpenAI's on a
resource's v1 paths (batch_openai.py); Amazon Bedrock's batch inference, jobs over S3 files
(batch_bedrock.py); Vertex AI's batch prediction, jobs over Cloud Storage files (batch_vertex.py). The types
they share: batch_wire.py.
"""

from __future__ import annotations

from typing import Any, Protocol

import aiohttp

import runner.gateway.batch_anthropic as batch_anthropic
import runner.gateway.batch_bedrock as batch_bedrock
import runner.gateway.batch_openai as batch_openai
import runner.gateway.batch_vertex as batch_vertex
from runner.gateway.batch_wire import (
    BATCH_PATHS,
    INTENT_KEY,
    AwsBatch,
    BatchEndpoint,
    BatchFailed,
    BatchGone,
    BatchRefused,
    GcpBatch,
    Outcome,
)

__all__ = [
    "BATCH_PATHS",
    "INTENT_KEY",
    "AwsBatch",
    "BatchApi",
    "BatchEndpoint",
    "BatchFailed",
    "BatchGone",
    "BatchRefused",
    "GcpBatch",
    "Outcome",
    "of",
]


class BatchApi(Protocol):
    """One provider's batch API (a module of these four functions)."""

    async def submit(
        self,
        session: aiohttp.ClientSession,
        ep: BatchEndpoint,
        items: list[tuple[str, dict[str, Any]]],
        intent: str,
    ) -> tuple[str, str | None]:
        """One batch of (custom_id, request body without `stream`), made by the journaled `intent`: its id,
        and the file uploaded for it (OpenAI, Bedrock, Vertex AI), if one was."""

    async def state(
        self, session: aiohttp.ClientSession, ep: BatchEndpoint, batch_id: str
    ) -> tuple[bool, dict[str, Any]]:
        """(ended, the batch object); BatchGone for a batch the provider does not know."""

    async def collect(
        self, session: aiohttp.ClientSession, ep: BatchEndpoint, batch: dict[str, Any]
    ) -> dict[str, Outcome]:
        """What each request of an ended batch came to, by custom_id (ids missing here: worth another try);
        what it uploaded and produced deleted once read. BatchFailed for a batch that failed whole; BatchGone
        where its results are no longer kept."""

    async def listed(
        self, session: aiohttp.ClientSession, ep: BatchEndpoint, since: float
    ) -> list[dict[str, Any]]:
        """The batches of this account the provider lists that were made at `since` (epoch seconds) or later:
        the candidates for one an earlier gateway made and could not journal (killed during the call)."""


_APIS: dict[str, BatchApi] = {
    "anthropic": batch_anthropic,
    "openai": batch_openai,
    "azure": batch_openai,
    "bedrock": batch_bedrock,
    "vertex": batch_vertex,
}


def of(ep: BatchEndpoint) -> BatchApi:
    """The batch API a batch of this endpoint goes to."""
    return _APIS[ep.provider]
