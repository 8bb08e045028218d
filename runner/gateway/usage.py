"""What a proxied call cost: usage read from an answer, whole or streamed, in either API's format.

Anthropic: `usage.input_tokens` (uncached), `cache_read_input_tokens`, `cache_creation_input_tokens`,
`output_tokens`; streamed, in `message_start` and the final `message_delta`. OpenAI chat:
`usage.prompt_tokens` (cached ones inside, `prompt_tokens_details.cached_tokens`),
`completion_tokens`; streamed, in the last chunk when `stream_options.include_usage` is set.
OpenAI responses: `usage.input_tokens` / `output_tokens`; streamed, in `response.completed`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

from runner.models.capabilities import Prices, Usage, cost


@dataclass
class CallUsage:
    input_tokens: int = 0  # uncached input
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def add(self, u: dict[str, Any], api: str) -> None:
        """Fold one usage object in (streamed answers carry several, each with running totals)."""
        if api == "anthropic":
            for field, key in (("input_tokens", "input_tokens"), ("output_tokens", "output_tokens"),
                               ("cache_read_tokens", "cache_read_input_tokens"),
                               ("cache_write_tokens", "cache_creation_input_tokens")):
                if isinstance(u.get(key), int):
                    setattr(self, field, max(getattr(self, field), u[key]))
            return
        prompt = u.get("prompt_tokens", u.get("input_tokens"))
        details = u.get("prompt_tokens_details") or u.get("input_tokens_details") or {}
        cached = int(details.get("cached_tokens") or 0)
        if isinstance(prompt, int):
            self.input_tokens, self.cache_read_tokens = prompt - cached, cached
        out = u.get("completion_tokens", u.get("output_tokens"))
        if isinstance(out, int):
            self.output_tokens = out


@dataclass
class Tally:
    """Counts for one run or one worker, named as the result's `usage` fields (runner/results/result.py)."""

    llm_calls: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    retries: int = 0
    rate_limited: int = 0
    errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0  # of the calls with a known price
    input_cost_usd: float = 0.0
    cache_saved_usd: float = 0.0
    unpriced_calls: int = 0
    latency_seconds: float = 0.0

    def answered(self, u: CallUsage, prices: Prices | None, latency: float) -> None:
        """One upstream answer: its tokens, and its cost at the caller's model's prices."""
        self.input_tokens += u.input_tokens
        self.output_tokens += u.output_tokens
        self.cache_read_tokens += u.cache_read_tokens
        self.cache_write_tokens += u.cache_write_tokens
        self.latency_seconds += latency
        total, inp, saved = cost(prices, Usage(u.input_tokens, u.output_tokens, u.cache_write_tokens,
                                                u.cache_read_tokens))
        if total is None:
            self.unpriced_calls += 1
        else:
            self.cost_usd += total
            self.input_cost_usd += inp or 0.0
            self.cache_saved_usd += saved

    def add(self, other: Tally) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def as_dict(self) -> dict[str, Any]:
        return {f.name: round(v, 6) if isinstance(v := getattr(self, f.name), float) else v for f in fields(self)}

def from_body(body: dict[str, Any], api: str) -> CallUsage:
    u = CallUsage()
    if isinstance(body.get("usage"), dict):
        u.add(body["usage"], api)
    return u


class StreamUsage:
    """Reads server-sent events as they pass and keeps the usage they report."""

    def __init__(self, api: str) -> None:
        self.api, self.usage, self._buf = api, CallUsage(), b""

    def feed(self, chunk: bytes) -> None:
        self._buf += chunk
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            if line.startswith(b"data:"):
                self._event(line[5:].strip())

    def _event(self, data: bytes) -> None:
        if not data or data == b"[DONE]":
            return
        try:
            ev = json.loads(data)
        except ValueError:
            return
        if not isinstance(ev, dict):
            return
        for holder in (ev, ev.get("message"), ev.get("response")):
            if isinstance(holder, dict) and isinstance(holder.get("usage"), dict):
                self.usage.add(holder["usage"], self.api)
