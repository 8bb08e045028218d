"""Server-sent event streams in both wire formats, cut from the non-streamed answer.

Built from the same payload the simulator would return without `stream`, so a client that
accumulates the stream ends with the identical message.

Anthropic: message_start, then per content block content_block_start / content_block_delta
(text_delta, or input_json_delta for tool input) / content_block_stop, a ping, message_delta
(stop reason, output usage), message_stop.
OpenAI: chat.completion.chunk objects (role first, then content or tool_call deltas, then the
finish reason), a usage chunk with empty choices when stream_options.include_usage, then [DONE].
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

TEXT_PIECE = 24  # characters per text delta
JSON_PIECE = 32  # characters per partial_json / arguments delta


def _pieces(text: str, n: int) -> list[str]:
    return [text[i : i + n] for i in range(0, len(text), n)] or [""]


def sse(event: str | None, data: Any) -> bytes:
    head = f"event: {event}\n" if event else ""
    body = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"{head}data: {body}\n\n".encode()


def anthropic_events(payload: dict[str, Any]) -> Iterator[bytes]:
    """The Messages API's stream as server-sent events, each named by its type."""
    return (sse(event["type"], event) for event in anthropic_stream(payload))


def anthropic_stream(payload: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The Messages API's stream events, however framed (server-sent events, Bedrock's event-stream)."""
    usage = dict(payload["usage"])
    start_usage = {**usage, "output_tokens": 1}
    message = {**payload, "content": [], "stop_reason": None, "stop_sequence": None, "usage": start_usage}
    yield {"type": "message_start", "message": message}
    for i, block in enumerate(payload["content"]):
        if block["type"] == "text":
            yield {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}
            if i == 0:
                yield {"type": "ping"}
            for part in _pieces(block["text"], TEXT_PIECE):
                yield {
                    "type": "content_block_delta",
                    "index": i,
                    "delta": {"type": "text_delta", "text": part},
                }
        elif block["type"] == "thinking":  # its text in thinking_delta pieces, then its signature in one
            yield {
                "type": "content_block_start",
                "index": i,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""},
            }
            for part in _pieces(block["thinking"], TEXT_PIECE):
                yield {
                    "type": "content_block_delta",
                    "index": i,
                    "delta": {"type": "thinking_delta", "thinking": part},
                }
            yield {
                "type": "content_block_delta",
                "index": i,
                "delta": {"type": "signature_delta", "signature": block["signature"]},
            }
        else:
            yield {
                "type": "content_block_start",
                "index": i,
                "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}},
            }
            for part in _pieces(json.dumps(block["input"]), JSON_PIECE):
                yield {
                    "type": "content_block_delta",
                    "index": i,
                    "delta": {"type": "input_json_delta", "partial_json": part},
                }
        yield {"type": "content_block_stop", "index": i}
    yield {
        "type": "message_delta",
        "delta": {"stop_reason": payload["stop_reason"], "stop_sequence": None},
        "usage": {"output_tokens": usage["output_tokens"]},
    }
    yield {"type": "message_stop"}


def openai_chunks(payload: dict[str, Any], *, include_usage: bool) -> Iterator[bytes]:
    choice = payload["choices"][0]
    msg = choice["message"]
    base = {
        "id": payload["id"],
        "object": "chat.completion.chunk",
        "created": payload["created"],
        "model": payload["model"],
        "system_fingerprint": None,
    }
    if include_usage:
        base["usage"] = None

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse(
            None,
            {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]},
        )

    yield chunk(
        {"role": "assistant", "content": "" if msg.get("content") is not None else None, "refusal": None}
    )
    if msg.get("content"):
        for part in _pieces(msg["content"], TEXT_PIECE):
            yield chunk({"content": part})
    for i, call in enumerate(msg.get("tool_calls") or []):
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": i,
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": call["function"]["name"], "arguments": ""},
                    }
                ]
            }
        )
        for part in _pieces(call["function"]["arguments"], JSON_PIECE):
            yield chunk({"tool_calls": [{"index": i, "function": {"arguments": part}}]})
    yield chunk({}, choice["finish_reason"])
    if include_usage:
        yield sse(None, {**base, "choices": [], "usage": payload["usage"]})
    yield sse(None, "[DONE]")
