"""What batch mode's talk with the providers' batch APIs is made of
(batch_api.py and the batch_{provider}.py it dispatches to): where a batch goes
(`BatchEndpoint`; Bedrock's `AwsBatch`, Vertex AI's `GcpBatch`), what a request came to (`Outcome`), how a
batch API call fails (`BatchRefused`, `BatchFailed`, `BatchGone`), and the calls of the key-authenticated
APIs (`fetch_json`, `fetch_batch`, `fetch_results`).

What a request came to is an `Outcome`: an answer or the API's own refusal (status and body, for the
caller as an interactive call would have had them), or `None` where it is worth another try (an error
of the provider's side, an expired or cancelled request). A call the API refuses whole raises
`BatchRefused` with its status, the provider's words and its `retry-after`; a batch that failed whole (an
OpenAI batch whose validation failed, a Bedrock or Vertex AI job that failed) raises `BatchFailed` with the
provider's words.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from runner.gateway.request import upstream_url
from runner.models.base import retry_after_from

Outcome = tuple[int, dict[str, Any]] | None
# the paths a batch takes calls of, and whose API each is (OpenAI's Batch API takes the Responses API too)
BATCH_PATHS = {"/v1/messages": "anthropic", "/v1/chat/completions": "openai", "/v1/responses": "openai"}
INTENT_KEY = "pgsandbox_intent"  # an OpenAI batch's metadata: which journaled intent created it


class BatchRefused(Exception):
    """A batch API call answered with an error status: its words, and how long it said to wait (if it did)."""

    def __init__(self, status: int, words: str, retry_after: float | None) -> None:
        super().__init__(f"HTTP {status}: {words}")
        self.status, self.words, self.retry_after = status, words, retry_after


class BatchFailed(Exception):
    """The batch ended failed as a whole (nothing of it ran): the provider's words."""


class BatchGone(Exception):
    """The provider does not know the batch (404), or its results are no longer there: nothing of it will come
    back."""


# (method, url, body, headers, signing name) -> the headers to send, signed (runner/gateway/cloud_auth.py)
AwsSigner = Callable[[str, str, bytes, dict[str, str], str], dict[str, str]]
BEDROCK_ENDED = ("Completed", "PartiallyCompleted", "Failed", "Stopped", "Expired")
BEDROCK_MIN_RECORDS = 100  # the quota "Minimum number of records per batch inference job", its default


@dataclass(frozen=True)
class AwsBatch:
    """Where Bedrock batch inference goes: the control plane, S3 (path-style), the bucket and prefix its
    files go under, the service role its jobs run as, and what signs each request."""

    control: str  # https://bedrock.{region}.amazonaws.com
    s3: str  # https://s3.{region}.amazonaws.com
    bucket: str
    prefix: str  # ends in / (or is empty)
    role_arn: str
    sign: AwsSigner


@dataclass(frozen=True)
class GcpBatch:
    """Where Vertex AI batch prediction goes: the location its jobs are made in, Cloud Storage's JSON API, the
    bucket and prefix its files go under, and what gives each request its OAuth token (blocking: google-auth
    may refresh it)."""

    control: str  # https://{region}-aiplatform.googleapis.com/v1/projects/{project}/locations/{region}
    storage: str  # https://storage.googleapis.com
    bucket: str
    prefix: str  # ends in / (or is empty)
    auth: Callable[[], dict[str, str]]


@dataclass(frozen=True)
class BatchEndpoint:
    provider: str
    base: str  # the provider's SDK base URL (OpenAI's ends in /v1)
    headers: dict[str, str]  # the key, and the simulator's x-sim-* where it answers
    path: str = ""  # the calls' own path (/v1/messages, /v1/chat/completions, /v1/responses)
    aws: AwsBatch | None = None  # Bedrock's batch inference
    model: str = ""  # Bedrock, Vertex AI: the model id its jobs name (the calls' path names it)
    gcp: GcpBatch | None = None  # Vertex AI's batch prediction

    def url(self, path: str) -> str:
        return upstream_url(self.base, self.provider, path)

    @property
    def min_requests(self) -> int:
        """The fewest requests a batch of it may hold (Bedrock's quota; the others take one)."""
        return BEDROCK_MIN_RECORDS if self.provider == "bedrock" else 1


def json_lines(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


async def fetch_json(
    session: aiohttp.ClientSession, method: str, url: str, ep: BatchEndpoint, **kw: Any
) -> dict[str, Any]:
    """A call of a key-authenticated batch API (Anthropic's, OpenAI's, Azure's) and its JSON answer;
    BatchRefused for any other status than 200."""
    async with session.request(method, url, headers=ep.headers, **kw) as r:
        if r.status != 200:
            raise await _refusal(r)
        found: dict[str, Any] = await r.json(content_type=None)
        return found


async def fetch_batch(
    session: aiohttp.ClientSession, url: str, ep: BatchEndpoint, batch_id: str
) -> dict[str, Any]:
    """A batch object as those APIs serve it; BatchGone for one they do not know (404)."""
    try:
        return await fetch_json(session, "GET", url, ep)
    except BatchRefused as e:
        if e.status == 404:
            raise BatchGone(batch_id) from e
        raise


async def fetch_results(session: aiohttp.ClientSession, url: str, ep: BatchEndpoint) -> bytes:
    """A batch's results file, as those APIs serve it; BatchGone where it is no longer kept."""
    async with session.get(url, headers=ep.headers) as r:
        if r.status in (404, 410):  # expired (Anthropic keeps results 29 days) or deleted
            raise BatchGone(url)
        if r.status != 200:
            raise await _refusal(r)
        return await r.read()


async def _refusal(r: aiohttp.ClientResponse) -> BatchRefused:
    text = (await r.text())[:500]
    try:
        body = json.loads(text)
        inner = body.get("error") if isinstance(body, dict) else None
        words = str((inner or {}).get("message") or text) if isinstance(inner, dict) else text
    except ValueError:
        words = text
    return BatchRefused(r.status, words, retry_after_from(r.headers))
