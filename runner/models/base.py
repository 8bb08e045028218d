"""The provider interface: one call in (a neutral request), one completion out, errors classified.

Transcripts are kept in one neutral shape; each provider converts it to its wire format:
    {"role": "user", "text": str}
    {"role": "assistant", "text": str, "tool_calls": [{"id", "name", "args"}], "received": Received?}
    {"role": "tool", "results": [{"id", "content", "is_error"}]}
An assistant turn that carries `received` (the model's answer as it came: `Completion.received`) goes back
to that provider exactly so, block for block, in order: the APIs refuse a rebuilt turn that carries
thinking blocks, and Claude Sonnet 5.5 returns its words between tool calls as thinking blocks. The text and
calls beside it are what the agent read; a turn the agent changed (a teacher's revision) has no `received`.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import hashlib
import json
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from typing import Any, Generic, Literal, TypeVar

import orjson

from runner.errors import ErrorKind as OutcomeKind

T = TypeVar("T")


class PerObject(Generic[T]):
    """f(value) computed once per object (a run's tool list: the same object for every call), for up
    to `size` objects; held with the object, so a reused id() of a freed one never hits."""

    def __init__(self, f: Callable[[Any], T], size: int = 64) -> None:
        self.f, self.size = f, size
        self.seen: dict[int, tuple[Any, T]] = {}

    def __call__(self, value: Any) -> T:
        hit = self.seen.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
        out = self.f(value)
        if len(self.seen) < self.size:
            self.seen[id(value)] = (value, out)
        return out


_tools_digest: PerObject[str] = PerObject(
    lambda tools: hashlib.sha256(
        json.dumps(tools, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
)


def _json(value: Any) -> bytes:
    """Compact UTF-8 JSON. orjson: the stdlib's encoder was 5 % of a worker's CPU at 64 conversations
    in flight (each call's body and its token estimate serialize the whole transcript)."""
    try:
        return orjson.dumps(value)
    # what orjson refuses and the stdlib takes (an integer past 64 bits from a model's args)
    except TypeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


# the tool list was half of what each call's estimate serialized; bytes, as the simulator counts a prompt
_json_length: PerObject[int] = PerObject(lambda v: len(_json(v)))


# Which trial of its record the calling thread runs (config epochs; the slot sets it around each record):
# trial 1 is the request a single-trial run makes, so its cached answers serve; every later trial has cache
# keys of its own, an independent sample rather than a replay of the first.
trial: ContextVar[int] = ContextVar("trial", default=1)
BATCHED_HEADER = "x-runner-batched"  # the run's gateway marks an answer a batch API gave (priced so)
TRIAL_HEADER = "x-sim-trial"  # how the runner tells the simulator (only) which trial a call belongs to
# On a cloud's route the path names the cloud's model; this names the simulator model that answers it (on the
# first-party routes the body names the simulator model and x-sim-plays the real one).
SIM_MODEL_HEADER = "x-sim-model"


@dataclass(frozen=True)
class Request:
    model: str
    system: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]  # neutral: name, description, input_schema
    temperature: float | None = 0.0  # what the run asks for; `sampling` is what is sent
    max_output_tokens: int = 800
    sampling: dict[str, float] | None = None  # set by the client from the model's capabilities
    prompt_cache: bool = False  # Anthropic cache_control breakpoints (OpenAI caches by itself)
    thinking: dict[str, Any] | None = None  # set by the client: thinking / output_config / reasoning_effort

    def cache_key(self, provider: str) -> str:
        """SHA-256 of everything that decides the answer: never keys, timeouts, base URLs or cache markers."""
        # A plain dict, not dataclasses.asdict (that deep-copies the transcript and schemas); the tool list
        # is the same object call after call, so its digest is computed once.
        body = {
            "provider": provider,
            "model": self.model,
            "system": self.system,
            "messages": self.messages,
            "tools": _tools_digest(self.tools),
            "sampling": self.sampling or {},
            "max_output_tokens": self.max_output_tokens,
            **({"thinking": self.thinking} if self.thinking else {}),
            **({"trial": t} if (t := trial.get()) > 1 else {}),
        }
        return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    def estimated_input_tokens(self) -> int:
        text = len(_json([self.system, self.messages]))
        return max(1, (text + _json_length(self.tools)) // 4)


# Stop reasons (Anthropic's stop_reason, OpenAI's finish_reason) that mean the turn is not the model's whole
# answer: recorded as the record's outcome, never as a normal (perhaps empty) turn.
CUT_STOP_REASONS: dict[str, OutcomeKind] = {
    "max_tokens": "max_tokens",
    "length": "max_tokens",
    "refusal": "refusal",
    "content_filter": "refusal",
    "model_context_window_exceeded": "context_window",
    "pause_turn": "pause_turn",
}


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
    cost_usd: float | None = 0.0  # None: the model has no known price
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_1h_tokens: int = 0  # of cache_write_tokens, the one-hour lifetime's (billed apart)
    input_cost_usd: float | None = 0.0
    cache_saved_usd: float = 0.0
    # The assistant turn exactly as the provider sent it ({"api": ..., "content": ...}: Anthropic's content
    # blocks, every type, unknown ones too; OpenAI's message): it goes back unchanged (see the module doc).
    received: dict[str, Any] | None = None
    batched: bool = False  # answered through a batch API (the run's gateway says so): billed at its price

    @property
    def thinking(self) -> list[dict[str, Any]]:
        """The turn's thinking and redacted thinking blocks, in order
        (for logs and tests: they go back as part of `received`, never on their own)."""
        blocks = (self.received or {}).get("content")
        return (
            [b for b in blocks if isinstance(b, dict) and b.get("type") in ("thinking", "redacted_thinking")]
            if isinstance(blocks, list)
            else []
        )

    @property
    def cut(self) -> OutcomeKind | None:
        """Why the answer stopped short, as an outcome kind; None for a complete turn."""
        return CUT_STOP_REASONS.get(self.stop_reason)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Completion:
        known = {f for f in cls.__dataclass_fields__}
        return cls(
            **{
                **{k: v for k, v in d.items() if k in known},
                "tool_calls": [ToolCall(**t) for t in d["tool_calls"]],
            }
        )


# rate_limited / transient: retried. rejected: this request's own fault (400, 413, 422): the
# conversation fails, the run goes on. fatal: every later request would fail too: the run stops.
ErrorKind = Literal["rate_limited", "transient", "rejected", "fatal"]


class ProviderError(Exception):
    """A classified provider failure. retry_after in seconds when the server said so."""

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        cause: str | None = None,
        param: str | None = None,
        detail: str | None = None,
    ) -> None:
        super().__init__(message)
        self.kind, self.status, self.retry_after, self.cause = kind, status, retry_after, cause
        self.param = param  # the request parameter the provider names, where it names one
        self.detail = detail  # the provider's own words (its error body's message: no request id)


_DURATION = re.compile(
    r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?"
    r"(?:(\d+(?:\.\d+)?)ms)?$"
)


def _duration(text: str) -> float | None:
    """OpenAI's reset format: '1s', '6m0s', '250ms', '1h2m3s'."""
    m = _DURATION.match(text.strip())
    if not m or not any(m.groups()):
        return None
    h, mi, s, ms = (float(g) if g else 0.0 for g in m.groups())
    return h * 3600 + mi * 60 + s + ms / 1000


def _seconds(value: str, now: float) -> float | None:
    """retry-after: delta-seconds or an HTTP-date (RFC 9110)."""
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    with suppress(TypeError, ValueError):
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - now)
    return None


# (remaining header, reset header) per budget; a budget's reset is no reason to wait unless it is exhausted
_OPENAI_DIMS = (
    ("x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"),
    ("x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"),
)
_ANTHROPIC_DIMS = tuple(
    (f"anthropic-ratelimit-{d}-remaining", f"anthropic-ratelimit-{d}-reset")
    for d in ("requests", "tokens", "input-tokens", "output-tokens")
)


def retry_after_from(headers: Any, now: float | None = None) -> float | None:
    """Seconds to wait: retry-after(-ms), else the reset of the budget that is exhausted.

    When no remaining-header says which budget ran out, the soonest reset is taken (the retry
    asks again then) rather than the longest, which can be minutes for a budget with room left.
    """
    if headers is None:
        return None
    now = time.time() if now is None else now
    v = headers.get("retry-after-ms")
    if v:
        with suppress(ValueError):
            return float(v) / 1000
    v = headers.get("retry-after")
    if v and (wait := _seconds(v, now)) is not None:
        return wait
    exhausted: list[float] = []
    others: list[float] = []
    for remaining_h, reset_h in _OPENAI_DIMS + _ANTHROPIC_DIMS:
        reset = headers.get(reset_h)
        if not reset:
            continue
        wait = _duration(reset) if reset_h.startswith("x-") else _rfc3339_wait(reset, now)
        if wait is None:
            continue
        remaining = headers.get(remaining_h)
        if remaining == "0":
            exhausted.append(wait)
        elif remaining is None:  # which budget ran out is not said: this one may be it
            others.append(wait)
    if exhausted:
        return max(exhausted)
    return min(others) if others else None


def _rfc3339_wait(value: str, now: float) -> float | None:
    with suppress(ValueError):
        return max(0.0, dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() - now)
    return None


_FIELD_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\[\]]{0,60}$")


def _error_fields(body: Any) -> tuple[str, str, str | None, str | None]:
    """(error type, error code, the parameter it names, its message) from either provider's error body."""
    if not isinstance(body, dict):
        return "", "", None, None
    # anthropic's SDK keeps the whole body ({"type": "error", "error": {...}}); openai's keeps the inner error
    inner = body.get("error")
    err: dict[str, Any] = inner if isinstance(inner, dict) else body
    param = err.get("param")
    message = err.get("message") if isinstance(err.get("message"), str) else None
    if not param and message and ":" in message:  # Anthropic names it first: "max_tokens: 150000 > ..."
        head = message.split(":", 1)[0]
        param = head if _FIELD_PATH.match(head) else None
    return str(err.get("type") or ""), str(err.get("code") or ""), str(param) if param else None, message


_FATAL_CAUSE = {
    401: "authentication failed: check the API key",
    403: "permission denied for this key",
    404: "model not found, or not available to this key",
    402: "billing: payment required",
}


def classify_status(status: int, message: str, headers: Any, body: Any = None) -> ProviderError:
    etype, code, param, detail = _error_fields(body)
    if status == 429 and "insufficient_quota" in (etype, code):
        return ProviderError(
            "fatal",
            message,
            status=status,
            cause="quota exhausted (insufficient_quota): check the plan and billing details",
        )
    if status == 429:
        return ProviderError("rate_limited", message, status=status, retry_after=retry_after_from(headers))
    if status in (408, 409) or status >= 500:
        return ProviderError("transient", message, status=status, retry_after=retry_after_from(headers))
    if status in _FATAL_CAUSE:
        return ProviderError("fatal", message, status=status, cause=_FATAL_CAUSE[status])
    if etype == "billing_error" or "credit balance" in message.lower():
        return ProviderError("fatal", message, status=status, cause="billing: the account has no credit left")
    return ProviderError(
        "rejected",
        message,
        status=status,
        cause="the provider rejected this request",
        param=param,
        detail=detail,
    )


@contextmanager
def sdk_errors(sdk: Any) -> Iterator[None]:
    """Turn the official SDKs' exceptions (same names in anthropic and openai) into ProviderError."""
    try:
        yield
    except sdk.APIStatusError as e:
        raise classify_status(
            e.status_code, str(e.message), e.response.headers, getattr(e, "body", None)
        ) from e
    except sdk.APITimeoutError as e:
        raise ProviderError("transient", f"timeout: {e}") from e
    except sdk.APIConnectionError as e:
        raise ProviderError("transient", f"connection: {e}") from e
    except (sdk.APIResponseValidationError, json.JSONDecodeError) as e:
        # A malformed body (the SDKs parse JSON unguarded): the provider's fault, worth a retry. Any
        # other ValueError is a bug of ours (a request we built wrong) and must fail loudly, not retry.
        raise ProviderError("transient", f"malformed response: {e}") from e


@contextmanager
def read_response(response: Any) -> Iterator[dict[str, Any]]:
    """A success response's JSON body, for the fields a completion keeps.

    The SDKs' typed parse builds a model of the whole message (construct_type: ~120 us a response,
    a conversation makes six and keeps a handful of fields); the agents read those fields here from
    the body as it came (runner/models/wire.py). A body that is not the shape the API documents is
    the provider's fault, worth a retry, as a malformed body is under the SDKs' own parse."""
    try:
        data = orjson.loads(response.content)
        if not isinstance(data, dict):
            raise TypeError(f"a JSON {type(data).__name__}, not an object")
        yield data
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError) as e:
        raise ProviderError("transient", f"malformed response: {type(e).__name__}: {e}") from e


_json_text: PerObject[bytes] = PerObject(_json)


def json_body(body: dict[str, Any]) -> bytes:
    """A request body as the bytes sent, for the SDKs' `client.post(path, content=..., cast_to=...)`.

    Their typed `create()` methods copy every request's whole body first (a walk that drops unset
    fields and dumps pydantic models: a quarter of a worker's CPU at 64 conversations in flight,
    for a body of plain dicts that grows with the transcript and repeats the tool schemas); `post`
    keeps their auth, headers and error classes and sends these bytes as they are.
    The tool list, the same object for every call of a run, is serialized once."""
    tools = body.get("tools")
    if not tools:
        return _json(body)
    rest = _json({k: v for k, v in body.items() if k != "tools"})
    return b"".join((rest[:-1], b"," if len(rest) > 2 else b"", b'"tools":', _json_text(tools), b"}"))


PLACEHOLDER = "(no answer)"  # stands in for an empty turn: both APIs answer 400 to null or blank content


def nonblank(text: str | None, placeholder: str = PLACEHOLDER) -> str:
    return text if text and text.strip() else placeholder


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
