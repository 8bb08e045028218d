"""The provider interface: one call in (a neutral request), one completion out, errors classified.

Transcripts are kept in one neutral shape; each provider converts it to its wire format:
    {"role": "user", "text": str}
    {"role": "assistant", "text": str, "tool_calls": [{"id", "name", "args"}]}
    {"role": "tool", "results": [{"id", "content", "is_error"}]}
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from typing import Any, Literal

# USD per 1M input / output tokens; the config's `prices` overrides or extends it.
PRICES: dict[str, tuple[float, float]] = {
    "claude-sonnet-4-5-20250929": (3.0, 15.0), "claude-sonnet-4-5": (3.0, 15.0),
    "gpt-4.1": (2.0, 8.0), "gpt-4.1-mini": (0.4, 1.6),
}


_TOOL_DIGESTS: dict[int, tuple[list[dict[str, Any]], str]] = {}


def _tools_digest(tools: list[dict[str, Any]]) -> str:
    hit = _TOOL_DIGESTS.get(id(tools))
    if hit is not None and hit[0] is tools:  # the same list object (kept alive here, so its id is not reused)
        return hit[1]
    digest = hashlib.sha256(json.dumps(tools, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    if len(_TOOL_DIGESTS) < 64:
        _TOOL_DIGESTS[id(tools)] = (tools, digest)
    return digest


@dataclass(frozen=True)
class Request:
    model: str
    system: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]  # neutral: name, description, input_schema
    temperature: float = 0.0
    max_output_tokens: int = 800

    def cache_key(self, provider: str) -> str:
        """SHA-256 of everything that decides the answer: never keys, timeouts or base URLs."""
        # A plain dict, not dataclasses.asdict (that deep-copies the transcript and schemas); the tool list
        # is the same object call after call, so its digest is computed once.
        body = {"provider": provider, "model": self.model, "system": self.system, "messages": self.messages,
                "tools": _tools_digest(self.tools), "temperature": self.temperature,
                "max_output_tokens": self.max_output_tokens}
        return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    def estimated_input_tokens(self) -> int:
        return max(1, len(json.dumps([self.system, self.messages, self.tools], separators=(",", ":"))) // 4)


@dataclass
class ToolCall:
    id: str
    name: str
    args: Any  # a dict, or the raw string when the model sent unparseable JSON


@dataclass
class Completion:
    text: str
    tool_calls: list[ToolCall]
    input_tokens: int
    output_tokens: int
    latency_seconds: float
    stop_reason: str
    request_id: str | None
    model: str
    cached: bool = False
    attempts: int = 1
    cost_usd: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Completion:
        return cls(**{**d, "tool_calls": [ToolCall(**t) for t in d["tool_calls"]]})


ErrorKind = Literal["rate_limited", "transient", "fatal"]


class ProviderError(Exception):
    """A classified provider failure. retry_after in seconds when the server said so."""

    def __init__(self, kind: ErrorKind, message: str, *, status: int | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind, self.status, self.retry_after = kind, status, retry_after


_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?"
                       r"(?:(\d+(?:\.\d+)?)ms)?$")


def _duration(text: str) -> float | None:
    """OpenAI's reset format: '1s', '6m0s', '250ms', '1h2m3s'."""
    m = _DURATION.match(text.strip())
    if not m or not any(m.groups()):
        return None
    h, mi, s, ms = (float(g) if g else 0.0 for g in m.groups())
    return h * 3600 + mi * 60 + s + ms / 1000


def retry_after_from(headers: Any, now: float | None = None) -> float | None:
    """Seconds to wait: retry-after(-ms), else the providers' reset headers (the latest one that binds)."""
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        v = headers.get(name)
        if v:
            try:
                return float(v) * scale
            except ValueError:
                pass
    waits = []
    for name in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"):  # OpenAI: durations
        v = headers.get(name)
        d = _duration(v) if v else None
        if d is not None:
            waits.append(d)
    now = time.time() if now is None else now
    for dim in ("requests", "tokens", "input-tokens", "output-tokens"):  # Anthropic: RFC 3339 times
        v = headers.get(f"anthropic-ratelimit-{dim}-reset")
        remaining = headers.get(f"anthropic-ratelimit-{dim}-remaining")
        if v and remaining in (None, "0"):
            with suppress(ValueError):
                waits.append(max(0.0, dt.datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp() - now))
    return max(waits) if waits else None


def classify_status(status: int, message: str, headers: Any) -> ProviderError:
    if status == 429:
        return ProviderError("rate_limited", message, status=status, retry_after=retry_after_from(headers))
    if status in (408, 409) or status >= 500:
        return ProviderError("transient", message, status=status, retry_after=retry_after_from(headers))
    return ProviderError("fatal", message, status=status)


@contextmanager
def sdk_errors(sdk: Any) -> Iterator[None]:
    """Turn the official SDKs' exceptions (same names in anthropic and openai) into ProviderError."""
    try:
        yield
    except sdk.APIStatusError as e:
        raise classify_status(e.status_code, str(e.message), e.response.headers) from e
    except sdk.APITimeoutError as e:
        raise ProviderError("transient", f"timeout: {e}") from e
    except sdk.APIConnectionError as e:
        raise ProviderError("transient", f"connection: {e}") from e
    except (sdk.APIResponseValidationError, ValueError) as e:  # a malformed body
        raise ProviderError("transient", f"malformed response: {e}") from e


def price(model: str, input_tokens: int, output_tokens: int, table: dict[str, tuple[float, float]]) -> float:
    p = table.get(model) or PRICES.get(model)
    return 0.0 if p is None else (input_tokens * p[0] + output_tokens * p[1]) / 1e6


class Provider(ABC):
    """One provider's SDK client. generate() raises ProviderError for every failure it can name."""

    name: str = "abstract"

    @abstractmethod
    def generate(self, req: Request) -> Completion: ...

    def close(self) -> None:  # noqa: B027 - optional hook
        pass

    @staticmethod
    def _timer() -> float:
        return time.monotonic()
