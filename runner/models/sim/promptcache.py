"""Prompt caching as the providers account for it, so usage fields and costs can be checked here.

A request is a sequence of segments in the order the providers cache them (tools, system,
messages block by block), each ~len(json)/4 tokens. Prefixes are keyed by a running SHA-256 of
the segments with their `cache_control` markers removed (a marker does not change the prefix).

Anthropic (explicit breakpoints): the longest cached prefix ending at or before the last
breakpoint is read (cache_read_input_tokens); the rest up to the last breakpoint is written
(cache_creation_input_tokens); what follows the last breakpoint is input_tokens. Prefixes shorter
than the model's minimum are not cached.
OpenAI (automatic): prompts of 1,024 tokens or more cache their prefixes; cached_tokens is the
longest cached prefix, counted in 128-token steps past the first 1,024; prompt_tokens includes it.
Entries live 5 minutes from their last use, or an hour where the breakpoint says `ttl: 1h` (its writes
reported apart, `cache_creation.ephemeral_1h_input_tokens`, as they are billed apart). A request answered
inside a batch whose turnaround the simulator runs faster than the providers' (`simulator.batches.scale`)
sees entries age at the providers' pace: a five-minute entry has expired across a batch's real wait.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass
from typing import Any

import orjson

TTL_SECONDS = 300.0
HOUR_TTL_SECONDS = 3600.0
OPENAI_MIN, OPENAI_STEP = 1024, 128


def tokens(obj: Any) -> int:
    """~4 bytes of compact JSON a token: the estimate the client-side limiter uses too."""
    return _tokens_of(_canonical(obj))


def _canonical(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


def _tokens_of(text: bytes) -> int:
    return max(1, math.ceil(len(text) / 4))


def _unmarked(seg: Any) -> Any:
    return {k: v for k, v in seg.items() if k != "cache_control"} if isinstance(seg, dict) else seg


@dataclass(frozen=True)
class Segment:
    tokens: int
    marked: bool  # carries a cache_control breakpoint
    digest: bytes  # running hash of the prefix that ends with this segment
    ttl: float = TTL_SECONDS  # its breakpoint's lifetime (`ttl: 1h`: an hour)


def segments(api: str, body: dict[str, Any]) -> list[Segment]:
    raw: list[Any] = []
    if api == "anthropic":
        system = body.get("system")
        raw += [{"type": "text", "text": system}] if isinstance(system, str) else list(system or [])
        for m in body.get("messages", []):
            content = m.get("content")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
            raw += [{"role": m.get("role"), **b} for b in blocks]
    else:
        raw += list(body.get("messages", []))
    tools = body.get("tools") or []
    # top level: a breakpoint on the last cacheable block
    if api == "anthropic" and body.get("cache_control"):
        if raw:
            raw[-1] = {**raw[-1], "cache_control": body["cache_control"]}
        elif tools:
            tools = [*tools[:-1], {**tools[-1], "cache_control": body["cache_control"]}]
    out, h = _tool_segments(str(body.get("model", "")), tools)
    h = h.copy()
    for seg in raw:
        text = _canonical(_unmarked(seg))  # once per segment: it is most of the simulator's CPU per request
        h.update(text)
        out.append(
            Segment(
                _tokens_of(text),
                isinstance(seg, dict) and "cache_control" in seg,
                h.copy().digest(),
                _ttl(seg),
            )
        )
    return out


# A run sends the same tool list, in the same order, with every call: its segments (a third of a
# request's segments, most of its bytes) are computed once per (model, list). Keyed by the list's
# bytes as sent (markers included), in insertion order: no sort, a few microseconds.
_TOOLS_MAX = 256
_tools_seen: dict[tuple[str, bytes], tuple[list[Segment], Any]] = {}
_last: dict[str, tuple[list[Any], tuple[list[Segment], Any]]] = {}  # model -> (the list object, its entry)


def _tool_segments(model: str, tools: list[Any]) -> tuple[list[Segment], Any]:
    """The segments of the tool list and the running hash after it (a new list: the caller appends)."""
    same = _last.get(model)
    if same is not None and same[0] is tools:  # the very list of the last request (models/sim/body.py)
        return list(same[1][0]), same[1][1]
    key = (model, orjson.dumps(tools))
    hit = _tools_seen.get(key)
    if hit is None:
        h = hashlib.sha256(model.encode())
        segs = []
        for seg in tools:
            text = _canonical(_unmarked(seg))
            h.update(text)
            segs.append(
                Segment(
                    _tokens_of(text),
                    isinstance(seg, dict) and "cache_control" in seg,
                    h.copy().digest(),
                    _ttl(seg),
                )
            )
        if len(_tools_seen) >= _TOOLS_MAX:
            _tools_seen.clear()
        hit = _tools_seen[key] = (segs, h)
    _last[model] = (tools, hit)
    return list(hit[0]), hit[1]


def _ttl(seg: Any) -> float:
    cc = seg.get("cache_control") if isinstance(seg, dict) else None
    return HOUR_TTL_SECONDS if isinstance(cc, dict) and cc.get("ttl") == "1h" else TTL_SECONDS


@dataclass
class CacheUsage:
    input_tokens: int  # anthropic: after the last breakpoint; openai: the whole prompt
    cache_write: int = 0
    cache_read: int = 0
    asked: bool = False  # the request carried a breakpoint (anthropic reports the fields then)
    cache_write_1h: int = 0  # of cache_write, written with the one-hour lifetime


class PromptCache:
    def __init__(self) -> None:
        self._entries: dict[bytes, tuple[float, float]] = {}  # digest -> (last used, lifetime)
        self._scale = 1.0  # the providers' seconds per second of this clock, for the request being accounted

    def _hit(self, digest: bytes, now: float) -> bool:
        found = self._entries.get(digest)
        if found is None or now - found[0] > found[1] / self._scale:
            return False
        self._entries[digest] = (now, found[1])
        return True

    def account(
        self, api: str, segs: list[Segment], *, min_tokens: int = 1024, scale: float = 1.0
    ) -> CacheUsage:
        """Usage of one admitted request (reads hits, writes its breakpoints); `scale`: the providers' seconds
        a second of this clock stands for where the request was answered (a batch run faster than real)."""
        total = sum(s.tokens for s in segs)
        now = time.monotonic()
        self._scale = max(scale, 1e-9)
        if api == "anthropic":
            return self._anthropic(segs, total, min_tokens, now)
        return self._openai(segs, total, now)

    def _anthropic(self, segs: list[Segment], total: int, min_tokens: int, now: float) -> CacheUsage:
        marks = [i for i, s in enumerate(segs) if s.marked]
        if not marks:
            return CacheUsage(total)
        last = marks[-1]
        prefix = [0]
        for s in segs:
            prefix.append(prefix[-1] + s.tokens)
        read = 0
        for i in range(last, -1, -1):
            if prefix[i + 1] >= min_tokens and self._hit(segs[i].digest, now):
                read = prefix[i + 1]
                break
        upto = prefix[last + 1]
        write = write_1h = 0
        if upto >= min_tokens:
            write = upto - read
            for i in marks:
                if prefix[i + 1] >= min_tokens:
                    self._entries[segs[i].digest] = (now, segs[i].ttl)
            # the written span's lifetime is its last breakpoint's (an hour-long mark keeps what precedes it)
            write_1h = write if segs[last].ttl > TTL_SECONDS else 0
        else:
            upto = read
        return CacheUsage(total - upto, write, read, asked=True, cache_write_1h=write_1h)

    def _openai(self, segs: list[Segment], total: int, now: float) -> CacheUsage:
        if total < OPENAI_MIN:
            return CacheUsage(total)
        prefix, cached = 0, 0
        for s in segs:
            prefix += s.tokens
            if prefix >= OPENAI_MIN:
                if self._hit(s.digest, now):
                    cached = prefix
                self._entries[s.digest] = (now, TTL_SECONDS)
        if cached:
            cached = OPENAI_MIN + (cached - OPENAI_MIN) // OPENAI_STEP * OPENAI_STEP
        return CacheUsage(total, 0, cached)

    def __len__(self) -> int:
        return len(self._entries)
