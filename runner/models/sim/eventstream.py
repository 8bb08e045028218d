"""AWS event-stream framing (`application/vnd.amazon.eventstream`), as Bedrock's InvokeModelWithResponseStream
answers: one binary message per event (bedrock.streaming, aws-eventstream):

    total length (4 bytes, big-endian) | headers length (4) | CRC32 of those 8 bytes (4)
    | headers | payload | CRC32 of everything before it (4)

Each header is its name's length (1 byte), the name, a value type (7: string), the value's length (2 bytes)
and the value. A chunk event carries `:message-type: event`, `:event-type: chunk`, `:content-type:
application/json` and the payload `{"bytes": "<base64 of one Anthropic stream event's JSON>"}` (a blob,
base64 in restJson1: bedrock.streaming.chunk_payload); an error inside the stream is an `exception` message
naming its type (bedrock.streaming.exception_events).
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from collections.abc import Iterator
from typing import Any

STRING = 7  # the header value type of a UTF-8 string
CONTENT_TYPE = "application/vnd.amazon.eventstream"
# bytes each other header value type holds (bool true/false, byte, short, int, long, timestamp, uuid);
# bytes (6) and strings (7) carry a 2-byte length
_FIXED = {0: 0, 1: 0, 2: 1, 3: 2, 4: 4, 5: 8, 8: 8, 9: 16}


def message(headers: dict[str, str], payload: bytes) -> bytes:
    """One framed message."""
    head = b"".join(_header(name, value) for name, value in headers.items())
    total = 12 + len(head) + len(payload) + 4
    prelude = struct.pack(">II", total, len(head))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    body = prelude + head + payload
    return body + struct.pack(">I", zlib.crc32(body))


def _header(name: str, value: str) -> bytes:
    n, v = name.encode(), value.encode()
    return struct.pack(">B", len(n)) + n + struct.pack(">BH", STRING, len(v)) + v


def chunk(event: dict[str, Any]) -> bytes:
    """A chunk event carrying one Anthropic stream event (message_start, content_block_delta, ...)."""
    data = base64.b64encode(json.dumps(event, separators=(",", ":")).encode()).decode()
    return message(
        {":message-type": "event", ":event-type": "chunk", ":content-type": "application/json"},
        json.dumps({"bytes": data}).encode(),
    )


def exception(kind: str, text: str) -> bytes:
    """An error inside the stream: `kind` is a ResponseStream member (throttlingException, ...)."""
    headers = {":message-type": "exception", ":exception-type": kind, ":content-type": "application/json"}
    return message(headers, json.dumps({"message": text}).encode())


class Frames:
    """Whole messages out of bytes as they arrive (a relayed stream's chunks end anywhere): (headers, payload)
    each, both CRCs checked (ValueError for a message that fails them)."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> Iterator[tuple[dict[str, str], bytes]]:
        self._buf += data
        while len(self._buf) >= 12:
            total, head = struct.unpack(">II", self._buf[:8])
            if len(self._buf) < total:
                return
            one, self._buf = self._buf[:total], self._buf[total:]
            if struct.unpack(">I", one[8:12])[0] != zlib.crc32(one[:8]) or struct.unpack(">I", one[-4:])[
                0
            ] != zlib.crc32(one[:-4]):
                raise ValueError("event-stream message fails its CRC")
            yield _headers(one[12 : 12 + head]), one[12 + head : -4]


def _headers(raw: bytes) -> dict[str, str]:
    out, at = {}, 0
    while at < len(raw):
        n = raw[at]
        name, kind = raw[at + 1 : at + 1 + n].decode(), raw[at + 1 + n]
        at += 2 + n
        if kind in (6, STRING):
            size = struct.unpack(">H", raw[at : at + 2])[0]
            value, at = raw[at + 2 : at + 2 + size], at + 2 + size
            out[name] = value.decode(errors="replace")
        else:
            at += _FIXED[kind]
    return out


def events(raw: bytes) -> Iterator[dict[str, Any]]:
    """The Messages stream events a framed stream carries: its chunks' payloads, decoded."""
    frames = Frames()
    for headers, payload in frames.feed(raw):
        if (event := chunk_event(headers, payload)) is not None:
            yield event


def chunk_event(headers: dict[str, str], payload: bytes) -> dict[str, Any] | None:
    """A chunk message's event (None for another message, or a payload that is not one)."""
    if headers.get(":message-type") != "event" or headers.get(":event-type") != "chunk":
        return None
    try:
        event = json.loads(base64.b64decode(json.loads(payload)["bytes"]))
    except (ValueError, KeyError, TypeError):
        return None
    return event if isinstance(event, dict) else None
