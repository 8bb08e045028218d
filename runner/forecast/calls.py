"""A record's foreseen calls (runner/harness/base.CallShape) in tokens, as one model bills and limits them.

Prompt caching, as the providers document it (and the simulator plays it): Anthropic caches what a request
marks (the runner marks the end of every prompt when `prompt_cache` is on): a prefix the previous call
sent is read, the rest written, for prompts of at least the model's minimum; OpenAI caches prompts of 1,024
tokens or more by itself, in 128-token steps past the first 1,024. A record's first call reads the tool list
and system prompt that other records' first calls wrote (a run's calls come minutes apart at most). In
batch mode a record's next call comes a batch's turnaround later: the runner writes Anthropic's entries for
an hour there (runner/gateway/), billed at the hour's price (runner/forecast/forecast.py); OpenAI's keep
their own lifetimes, read as interactive calls read them.

Thinking: no provider publishes how much its models think per call. THINKING gives, per effort, the
forecast's low and expected tokens for a short agentic step (choose a tool, answer the user); its high
figure is the run's whole thinking allowance (`thinking_tokens`) on every call. Claude's thinking blocks
go back with the turn that carried them (the agents echo each turn as received), so they lengthen the
prompts of the record's later calls. A measured run replaces all of this (runner/forecast/measured.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from runner.forecast.need import Need
from runner.harness.base import CallShape
from runner.models.capabilities import Capabilities
from runner.models.thinking import ThinkingPlan

OPENAI_CACHE_MIN, OPENAI_CACHE_STEP = 1024, 128
# Thinking tokens per call by effort: (low, expected). Orders of magnitude, not measurements (see above).
THINKING: dict[str, tuple[float, float]] = {
    "minimal": (0.0, 50.0),
    "low": (50.0, 200.0),
    "medium": (100.0, 400.0),
    "high": (200.0, 800.0),
    "xhigh": (400.0, 1600.0),
    "max": (800.0, 3200.0),
}
DEFAULT_EFFORT = "medium"
# How far a model may stray from the record's gold path, for a forecast from the records alone: fewer
# calls (it answers early, or skips a lookup) or more (it explores, retries a failed call, or loops to the
# step limit). Measured runs of the simulator's agents land within 5 % of the gold path's calls.
CALLS_LOW, CALLS_HIGH = 0.85, 1.5
PROMPT_LOW, PROMPT_HIGH = 0.85, 1.8  # more calls lengthen every later prompt of the record as well
ANSWER_LOW, ANSWER_HIGH = 0.6, 2.0


@dataclass(frozen=True)
class ThinkingBand:
    """What one role's calls think: tokens per call at the forecast's low, expected and high."""

    low: float = 0.0
    expected: float = 0.0
    high: float = 0.0
    echoed: bool = False  # the thinking goes back in the record's later prompts (Claude)

    @classmethod
    def of(cls, plan: ThinkingPlan, effort: str | None, allowance: int, provider: str) -> ThinkingBand:
        if not plan.thinks:
            return cls()
        low, expected = THINKING.get(effort or DEFAULT_EFFORT, THINKING[DEFAULT_EFFORT])
        return cls(low, expected, float(max(allowance, expected)), echoed=provider == "anthropic")


def need(
    shapes: Sequence[CallShape],
    caps: Capabilities,
    *,
    prompt_cache: bool,
    thinking: ThinkingBand,
    band: str = "expected",
    first: bool = False,
) -> Need:
    """The tokens of one role's calls of one record (`band`: low, expected or high). `first`: the run's first
    record, whose first call finds no fixed part in the cache (it writes it for the others)."""
    think = getattr(thinking, band)
    calls_k, prompt_k, answer_k = {
        "low": (CALLS_LOW, PROMPT_LOW, ANSWER_LOW),
        "expected": (1.0, 1.0, 1.0),
        "high": (CALLS_HIGH, PROMPT_HIGH, ANSWER_HIGH),
    }[band]
    fixed = shapes[0].marked_prefix_tokens if shapes else 0  # a first call's prefix: tools and system prompt
    echoed = 0.0  # thinking of earlier calls the transcript carries
    uncached = read = written = output = 0.0
    anthropic = caps.provider == "anthropic"
    for i, shape in enumerate(shapes):
        prompt = shape.prompt_tokens * prompt_k + echoed
        prefix = float(shape.marked_prefix_tokens if anthropic else shape.prefix_tokens)
        if first and i == 0:
            prefix = 0.0
        if prefix > fixed:  # a transcript's prefix: scaled as prompts are, and with the thinking it carried
            prefix = prefix * prompt_k + max(0.0, echoed - think)
        u, r, w = _cached(caps, prompt, min(prefix, prompt), prompt_cache)
        uncached, read, written = uncached + u, read + r, written + w
        output += shape.answer_tokens * answer_k + think
        if thinking.echoed:
            echoed += think
    k = calls_k
    return Need(len(shapes) * k, uncached * k, read * k, written * k, output * k)


def _cached(
    caps: Capabilities, prompt: float, prefix: float, prompt_cache: bool
) -> tuple[float, float, float]:
    """One prompt's input tokens: (uncached, read from, written to) the provider's prompt cache."""
    if caps.provider == "anthropic":
        if not prompt_cache or prompt < caps.min_cache_tokens:
            return prompt, 0.0, 0.0
        read = prefix if prefix >= caps.min_cache_tokens else 0.0
        return 0.0, read, prompt - read
    if prompt < OPENAI_CACHE_MIN or prefix < OPENAI_CACHE_MIN:
        return prompt, 0.0, 0.0
    read = OPENAI_CACHE_MIN + (prefix - OPENAI_CACHE_MIN) // OPENAI_CACHE_STEP * OPENAI_CACHE_STEP
    return prompt - read, read, 0.0
