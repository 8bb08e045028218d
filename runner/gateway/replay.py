"""A streamed answer kept as its final message, and a final message played back as a stream.

The cache holds what a non-streamed call would have returned, so one entry serves both kinds of
caller: a plain request gets the message, a streaming one gets a valid event stream cut from it
(the simulator's own stream writers, runner/models/sim/stream.py, which the SDKs' accumulators
turn back into the identical message; thinking blocks too, their signatures whole). Answers these
writers cannot reproduce (several choices, redacted thinking, citations, the Responses API's events)
are kept as their raw events and replayed verbatim to streaming callers only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from runner.models.sim import eventstream
from runner.models.sim.stream import anthropic_events, anthropic_stream, openai_chunks

REPLAYABLE_BLOCKS = {"text", "tool_use", "thinking"}


def events(raw: bytes) -> Iterator[dict[str, Any]]:
    """The JSON payloads of a server-sent event stream ([DONE] and non-JSON lines skipped)."""
    for line in raw.split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data and data != b"[DONE]":
            try:
                ev = json.loads(data)
            except ValueError:
                continue
            if isinstance(ev, dict):
                yield ev


def final_message(path: str, raw: bytes, *, event_stream: bool = False) -> dict[str, Any] | None:
    """The message a streamed answer adds up to, if it can be played back as a stream; else None.
    `event_stream`: the answer is AWS event-stream framed (Bedrock), each chunk one Messages event."""
    try:
        if path == "/v1/messages":
            return _anthropic_final(eventstream.events(raw) if event_stream else events(raw))
        if path == "/v1/chat/completions":
            return _chat_final(events(raw))
    except (KeyError, TypeError, ValueError, IndexError):
        return None
    return None


def _anthropic_final(evs: Iterator[dict[str, Any]]) -> dict[str, Any] | None:
    msg: dict[str, Any] | None = None
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = {}
    for ev in evs:
        kind = ev.get("type")
        if kind == "message_start":
            msg = dict(ev["message"])
        elif kind == "content_block_start":
            blocks[ev["index"]] = dict(ev["content_block"])
            if blocks[ev["index"]]["type"] == "tool_use":
                partial[ev["index"]] = ""
        elif kind == "content_block_delta":
            delta, i = ev["delta"], ev["index"]
            if delta["type"] == "text_delta":
                blocks[i]["text"] += delta["text"]
            elif delta["type"] == "input_json_delta":
                partial[i] += delta["partial_json"]
            elif delta["type"] == "thinking_delta":
                blocks[i]["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":  # the signature comes whole, after the thinking text
                blocks[i]["signature"] = delta["signature"]
            else:
                return None  # citations and the like: not ours to rebuild
        elif kind == "content_block_stop" and ev["index"] in partial:
            blocks[ev["index"]]["input"] = json.loads(partial[ev["index"]] or "{}")
        elif kind == "message_delta" and msg is not None:
            msg.update(ev["delta"])
            msg["usage"] = {**msg["usage"], **{k: v for k, v in ev.get("usage", {}).items() if v is not None}}
        elif kind == "error":
            return None
    if (
        msg is None
        or msg.get("stop_reason") is None
        or any(b["type"] not in REPLAYABLE_BLOCKS for b in blocks.values())
    ):
        return None
    msg["content"] = [blocks[i] for i in sorted(blocks)]
    return msg


def _chat_final(evs: Iterator[dict[str, Any]]) -> dict[str, Any] | None:
    head: dict[str, Any] | None = None
    message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
    calls: dict[int, dict[str, Any]] = {}
    finish, usage = None, None
    for ev in evs:
        head = head or ev
        usage = ev.get("usage") or usage
        for choice in ev.get("choices") or []:
            if choice.get("index", 0) != 0:
                return None  # n > 1: kept as events
            delta = choice.get("delta") or {}
            if delta.get("content") is not None:
                message["content"] = (message["content"] or "") + delta["content"]
            for call in delta.get("tool_calls") or []:
                c = calls.setdefault(
                    call["index"], {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
                )
                c["id"] = call.get("id") or c["id"]
                fn = call.get("function") or {}
                c["function"]["name"] += fn.get("name") or ""
                c["function"]["arguments"] += fn.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    if head is None or finish is None:
        return None
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return {
        "id": head["id"],
        "object": "chat.completion",
        "created": head["created"],
        "model": head["model"],
        "system_fingerprint": head.get("system_fingerprint"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": usage,
    }


def as_stream(
    path: str, message: dict[str, Any], request: dict[str, Any], *, event_stream: bool = False
) -> bytes | None:
    """The stream a caller asking for one would have received; None if it cannot be cut from `message`.
    `event_stream`: framed as Bedrock frames it."""
    if path == "/v1/messages":
        if any(b.get("type") not in REPLAYABLE_BLOCKS for b in message.get("content", [])):
            return None
        if event_stream:
            return b"".join(eventstream.chunk(event) for event in anthropic_stream(message))
        return b"".join(anthropic_events(message))
    if path == "/v1/chat/completions":
        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        if len(message.get("choices", [])) != 1 or (include_usage and not message.get("usage")):
            return None
        return b"".join(openai_chunks(message, include_usage=include_usage))
    return None
