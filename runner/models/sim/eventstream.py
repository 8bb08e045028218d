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
from typing import Any

STRING = 7  # the header value type of a UTF-8 string
CONTENT_TYPE = "application/vnd.amazon.eventstream"


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
    return message({":message-type": "event", ":event-type": "chunk", ":content-type": "application/json"},
                   json.dumps({"bytes": data}).encode())


def exception(kind: str, text: str) -> bytes:
    """An error inside the stream: `kind` is a ResponseStream member (throttlingException, ...)."""
    headers = {":message-type": "exception", ":exception-type": kind, ":content-type": "application/json"}
    return message(headers, json.dumps({"message": text}).encode())
