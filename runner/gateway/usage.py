"""What a proxied call cost: usage read from an answer, whole or streamed, in either API's format.

Anthropic: `usage.input_tokens` (uncached), `cache_read_input_tokens`, `cache_creation_input_tokens`,
`output_tokens`; streamed, in `message_start` and the final `message_delta`. OpenAI chat:
`usage.prompt_tokens` (cached ones inside, `prompt_tokens_details.cached_tokens`),
`completion_tokens`; streamed, in the last chunk when `stream_options.include_usage` is set.
OpenAI responses: `usage.input_tokens` / `output_tokens`; streamed, in `response.completed`.
A cloud's answers are its API's (Bedrock's stream in AWS event-stream frames, each chunk one Messages event).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from runner.config import API_OF
from runner.models.sim.eventstream import Frames, chunk_event
from runner.models.usage import Tokens


def read_usage(u: dict[str, Any], api: str, seen: Tokens) -> Tokens:
    """One usage object folded into what was seen before (streamed answers carry several: Anthropic's with
    running totals, OpenAI's once at the end)."""
    if api == "anthropic":

        def most(name: str, key: str) -> int:
            return max(getattr(seen, name), u[key]) if isinstance(u.get(key), int) else getattr(seen, name)

        hour = (u.get("cache_creation") or {}).get("ephemeral_1h_input_tokens")
        return Tokens(
            most("input_tokens", "input_tokens"),
            most("output_tokens", "output_tokens"),
            most("cache_write_tokens", "cache_creation_input_tokens"),
            most("cache_read_tokens", "cache_read_input_tokens"),
            max(seen.cache_write_1h_tokens, hour) if isinstance(hour, int) else seen.cache_write_1h_tokens,
        )
    prompt = u.get("prompt_tokens", u.get("input_tokens"))
    details = u.get("prompt_tokens_details") or u.get("input_tokens_details") or {}
    cached = int(details.get("cached_tokens") or 0)
    if isinstance(prompt, int):
        seen = replace(seen, input_tokens=prompt - cached, cache_read_tokens=cached)
    out = u.get("completion_tokens", u.get("output_tokens"))
    return replace(seen, output_tokens=out) if isinstance(out, int) else seen


def from_body(body: dict[str, Any], provider: str) -> Tokens:
    """A whole answer's usage (a cloud's as the API whose format it speaks)."""
    api = API_OF.get(provider, provider)
    return read_usage(body["usage"], api, Tokens()) if isinstance(body.get("usage"), dict) else Tokens()


class StreamUsage:
    """Reads server-sent events as they pass and keeps the usage they report."""

    def __init__(self, provider: str) -> None:
        self.api, self.usage, self._buf = API_OF.get(provider, provider), Tokens(), b""

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
        self.event(ev)

    def event(self, ev: dict[str, Any]) -> None:
        for holder in (ev, ev.get("message"), ev.get("response")):
            if isinstance(holder, dict) and isinstance(holder.get("usage"), dict):
                self.usage = read_usage(holder["usage"], self.api, self.usage)


class EventStreamUsage(StreamUsage):
    """The same of an AWS event stream (Bedrock's): each chunk message one Messages stream event."""

    def __init__(self, provider: str) -> None:
        super().__init__(provider)
        self._frames = Frames()

    def feed(self, chunk: bytes) -> None:
        try:
            for headers, payload in self._frames.feed(chunk):
                if (ev := chunk_event(headers, payload)) is not None:
                    self.event(ev)
        except ValueError:  # a corrupt message: the usage seen so far stands
            self._frames = Frames()
