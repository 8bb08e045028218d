"""Thinking as the current models do it, played from what the providers published (rulebook.py).

A model that thinks by default thinks on a request that says nothing (Claude Sonnet 5.5: adaptive at
effort high; GPT-5.5: reasoning at effort medium; GPT-5.4's default is none). Its thinking tokens are
output tokens and come out of the request's output limit first: a limit too small for thinking plus answer
cuts the answer (Anthropic: `stop_reason: max_tokens`, perhaps nothing but thinking; OpenAI:
`finish_reason: length`, empty content).

Claude's thinking blocks carry a signature. The simulator's binds each block to its text, to where it
stood in its answer (its index among the answer's thinking blocks, how many there were, which run of
consecutive thinking blocks it was in) and to the conversation before it (system, tools, messages, with
cache markers left out), so the checks (checks.py) can refuse what the API refuses: a block edited,
dropped, moved or regrouped in the latest assistant turn, or replayed after what came before it changed.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

import orjson

from runner.models.sim import rulebook

_KEY = b"pgsandbox-runner simulator thinking"  # signatures are the simulator's own: opaque to clients
# Thinking tokens per call by effort: the order of magnitude of a short agentic step.
TOKENS = {"minimal": 16, "low": 48, "medium": 160, "high": 320, "xhigh": 640, "max": 1200}
VERSION = "s2"


@dataclass(frozen=True)
class Mode:
    thinks: bool  # thinks before answering
    effort: str
    updates_as_thinking: bool = False  # text between tool calls comes back in thinking blocks


@dataclass(frozen=True)
class Signed:
    """What a signature says of its block (verified: the HMAC matched)."""

    answer: str  # the answer it came in
    index: int  # among that answer's thinking blocks
    count: int  # how many that answer had
    run: int  # which run of consecutive thinking blocks of that answer it was in
    prefix: str  # digest of the conversation before that answer


def prefix_digest(body: dict[str, Any], upto: int) -> str:
    """The conversation before message `upto`: system, tools and messages, cache markers left out (a marker
    moves from call to call without changing what was said)."""

    def bare(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: bare(v) for k, v in value.items() if k != "cache_control"}
        if isinstance(value, list):
            return [bare(v) for v in value]
        return value

    seen = bare([body.get("system"), body.get("tools"), (body.get("messages") or [])[:upto]])
    return hashlib.sha256(orjson.dumps(seen, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def sign(model: str, text: str, where: Signed) -> str:
    head = f"{VERSION}.{where.answer}.{where.index}.{where.count}.{where.run}.{where.prefix}"
    mac = hmac.new(_KEY, f"{model}\0{head}\0{text}".encode(), hashlib.sha256).hexdigest()
    return f"{head}.{mac}"


def verify(model: str, text: str, signature: str) -> Signed | None:
    """What a signature says, or None if it is not this simulator's for this model and text."""
    parts = signature.split(".")
    if len(parts) != 7 or parts[0] != VERSION:
        return None
    head, mac = ".".join(parts[:6]), parts[6]
    want = hmac.new(_KEY, f"{model}\0{head}\0{text}".encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(mac, want):
        return None
    try:
        return Signed(parts[1], int(parts[2]), int(parts[3]), int(parts[4]), parts[5])
    except ValueError:
        return None


def thought(rid: str, effort: str) -> tuple[str, int]:
    """The thinking text of one answer and its tokens (deterministic per request, +-25 %)."""
    base = TOKENS.get(effort, TOKENS["medium"])
    tokens = int(base * (0.75 + (int(rid[:4], 16) % 51) / 100))
    return "Let me check what the user asked and which tool answers it. " * max(1, tokens // 12), tokens


def mode(api: str, body: dict[str, Any], model: str) -> Mode:
    """Whether this request makes the model think, and how hard, by its published behaviour (a model the
    providers' pages do not describe does not think)."""
    b = rulebook.book(api).behaviour(model)
    if not b:
        return Mode(False, "none")
    if api == "anthropic":
        kind = (body.get("thinking") or {}).get("type")
        effort = (body.get("output_config") or {}).get("effort") or b.get("default_effort") or "high"
        updates = bool(b.get("text_between_tools_as_thinking"))
        if kind in ("adaptive", "enabled"):
            return Mode(True, effort if kind == "adaptive" else "high", updates)
        if kind == "between_tools":
            return Mode(False, effort, True)
        return Mode(kind is None and bool(b.get("thinks_by_default")), effort, updates and kind is None)
    effort = (
        body.get("reasoning_effort")
        or b.get("default_reasoning_effort")
        or ("medium" if b.get("reasoning_model") else "none")
    )
    return Mode(bool(b.get("reasoning_model")) and effort != "none", effort)
