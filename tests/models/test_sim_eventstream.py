"""AWS event-stream framing (runner/models/sim/eventstream.py), read back by botocore's own decoder: the
prelude and message CRCs, typed string headers, base64 chunk payloads; a flipped byte is caught."""

from __future__ import annotations

import base64
import json
import struct
import zlib

import pytest
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer

from runner.models.sim import eventstream


def test_a_chunk_is_a_framed_message_botocore_reads() -> None:
    event = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "héllo"}}
    raw = eventstream.chunk(event)
    total, head = struct.unpack(">II", raw[:8])
    assert total == len(raw) and struct.unpack(">I", raw[8:12])[0] == zlib.crc32(raw[:8])
    assert struct.unpack(">I", raw[-4:])[0] == zlib.crc32(raw[:-4])
    buf = EventStreamBuffer()
    buf.add_data(raw[:5])  # in pieces, as a socket hands them over
    assert list(buf) == []
    buf.add_data(raw[5:])
    [message] = list(buf)
    assert message.headers == {":message-type": "event", ":event-type": "chunk",
                               ":content-type": "application/json"}
    assert json.loads(base64.b64decode(json.loads(message.payload)["bytes"])) == event
    assert len(message.headers) == 3 and head == len(raw) - 16 - len(message.payload)


def test_an_exception_message_names_its_type() -> None:
    [message] = list(_read(eventstream.exception("throttlingException", "slow down")))
    assert message.headers[":message-type"] == "exception"
    assert message.headers[":exception-type"] == "throttlingException"
    assert json.loads(message.payload) == {"message": "slow down"}


def test_a_flipped_byte_fails_the_checksum() -> None:
    raw = bytearray(eventstream.chunk({"type": "ping"}))
    raw[-10] ^= 0xFF
    with pytest.raises(ChecksumMismatch):
        list(_read(bytes(raw)))


def _read(raw: bytes) -> EventStreamBuffer:
    buf = EventStreamBuffer()
    buf.add_data(raw)
    return buf
