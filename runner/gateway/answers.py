"""The response cache as the gateway keeps answers: keyed by the canonical request (whatever the key order,
spacing or `stream`; no headers), served in the form each caller asks for -- a message to a plain caller, a
stream cut from it to a streaming one (server-sent events, or Bedrock's AWS event-stream frames), and a
streamed answer kept as the message it adds up to (replay.py)."""

from __future__ import annotations

import hashlib
import json

from aiohttp import web

from runner.cache import ResponseCache
from runner.gateway.incoming import Incoming
from runner.gateway.replay import as_stream, final_message
from runner.gateway.request import canonical
from runner.gateway.upstream import UpstreamAnswer
from runner.models.sim.eventstream import CONTENT_TYPE as EVENT_STREAM

UNCACHED = {"/v1/messages/count_tokens"}


class Answers:
    def __init__(self, cache: ResponseCache | None) -> None:
        self.cache = cache  # None: no cache, nothing is keyed

    def key(self, call: Incoming, trial: int) -> str | None:
        """The call's key; None for a call never cached. Trial 1 keys as a single-trial run's calls; each
        later trial apart (as models/base.py Request)."""
        if self.cache is None or call.path in UNCACHED:
            return None
        canon = call.raw if call.body is None else canonical(call.body)
        told = f"\0trial {trial}".encode() if trial > 1 else b""
        path = call.route.key_path  # a cloud's names its model (not in the body), and streams or not alike
        return hashlib.sha256(call.provider.encode() + path.encode() + b"\0" + canon + told).hexdigest()

    def get(self, key: str, call: Incoming) -> web.Response | None:
        """The cached answer in the form this caller asked for; None (a miss) if it cannot be given so."""
        assert self.cache is not None  # keyed
        entry = self.cache.get(key)
        if entry is None or "body" not in entry:
            return None
        if entry["content_type"] == "text/event-stream":
            # Kept as raw events: replayable to a streaming caller only.
            return _sse(entry["body"].encode()) if call.streaming and not call.route.event_stream else None
        message = json.loads(entry["body"])
        if not call.streaming:
            if call.path == "/v1/chat/completions" and not message.get("usage"):
                return None  # cut from a stream without usage: a plain caller expects it
            return web.json_response(message)
        stream = as_stream(call.path, message, call.body or {}, event_stream=call.route.event_stream)
        return _stream_response(stream, call.route.event_stream) if stream is not None else None

    def put(self, key: str, call: Incoming, answer: UpstreamAnswer) -> None:
        assert self.cache is not None  # keyed
        entry = {"body": answer.body.decode(errors="replace"), "content_type": "application/json"}
        if call.streaming:
            framed = call.route.event_stream
            message = final_message(call.path, answer.body, event_stream=framed)
            replayed = (
                message is not None
                and as_stream(call.path, message, call.body or {}, event_stream=framed) is not None
            )
            if replayed:
                entry["body"] = json.dumps(message)
            elif framed:
                return  # binary frames: kept only as the message they add up to
            else:
                entry["content_type"] = "text/event-stream"
        self.cache.put(key, call.provider, call.model, entry)


def _stream_response(body: bytes, event_stream: bool) -> web.Response:
    """A stream replayed: server-sent events, or (Bedrock) AWS event-stream messages."""
    if event_stream:
        return web.Response(
            body=body,
            headers={"content-type": EVENT_STREAM, "x-amzn-bedrock-content-type": "application/json"},
        )
    return _sse(body)


def _sse(body: bytes) -> web.Response:
    return web.Response(body=body, headers={"content-type": "text/event-stream", "cache-control": "no-cache"})
