"""Whether a model thinks on a run's requests, what that takes on the wire, and how many tokens it may use.

Current models think unless told otherwise (the Claude 5 generation: adaptive thinking at effort high
when a request says nothing; GPT-5.x: reasoning at effort medium), and their thinking tokens are output
tokens counted against the same limit as the answer (`max_tokens`, `max_completion_tokens`). A run that
sends the seeds' `max_tokens: 800` to such a model gets answers cut before they begin. So the runner
decides per run, from the model's capabilities and the run's `thinking` / `effort` / `thinking_tokens`:

    thinking: model-default   send nothing; the model does what it does by default (stated at start)
    thinking: off             the lowest setting the model takes: thinking disabled; else (Claude Sonnet
                              5.5) between_tools at an effort that allows it; reasoning_effort none
                              (OpenAI); else a config error naming what the model allows
    thinking: on              adaptive thinking where the model takes it, else a budget_tokens budget

and the output limit sent is the answer's (`max_output_tokens`) plus `thinking_tokens` whenever the model
will think, so thinking cannot starve the answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runner.config import ModelRef
from runner.errors import ConfigError
from runner.models.capabilities import Capabilities

MIN_BUDGET_TOKENS = 1024  # Anthropic's smallest budget_tokens


@dataclass(frozen=True)
class ThinkingChoice:
    """What a run asks for (config: thinking, effort, thinking_tokens)."""

    mode: str = "model-default"
    effort: str | None = None
    tokens: int = 4096


def thinking_choice(ref: ModelRef) -> ThinkingChoice:
    return ThinkingChoice(ref.thinking, ref.effort, ref.thinking_tokens)


@dataclass(frozen=True)
class ThinkingPlan:
    """What goes on the wire: extra body parameters, the output limit, whether the model will think."""

    params: dict[str, Any]
    max_tokens: int
    thinks: bool
    note: str


def plan(caps: Capabilities, model: str, choice: ThinkingChoice, answer_tokens: int) -> ThinkingPlan:
    """The request parameters for `choice` on this model; ConfigError for what the model cannot do."""
    if choice.effort is not None and choice.effort not in caps.efforts:
        taken = ", ".join(caps.efforts) or "none (it takes no effort setting)"
        raise ConfigError(f"effort {choice.effort!r} is not taken by {model} (it takes: {taken})")
    if caps.provider == "anthropic":
        params, thinks, how = _anthropic(caps, model, choice)
    else:
        params, thinks, how = _openai(caps, model, choice)
    extra = choice.tokens if thinks else 0
    max_tokens = min(answer_tokens + extra, caps.max_output_tokens)
    if thinks and "budget_tokens" in params.get("thinking", {}):
        params["thinking"]["budget_tokens"] = max(
            MIN_BUDGET_TOKENS, min(choice.tokens, max_tokens - answer_tokens)
        )
    limit = f"{answer_tokens} + {extra} for thinking" if thinks else str(answer_tokens)
    return ThinkingPlan(params, max_tokens, thinks, f"{how}; output limit {limit}")


def _anthropic(caps: Capabilities, model: str, choice: ThinkingChoice) -> tuple[dict[str, Any], bool, str]:
    effort = {"output_config": {"effort": choice.effort}} if choice.effort else {}
    if choice.mode == "off":
        return _anthropic_off(caps, model, choice, effort)
    if choice.mode == "on" or (choice.mode == "model-default" and caps.thinks_by_default):
        if "adaptive" in caps.thinking:
            sent = {"thinking": {"type": "adaptive"}} if choice.mode == "on" else {}
            level = choice.effort or caps.default_effort or "default"
            how = (
                "adaptive thinking, effort "
                + level
                + ("" if choice.mode == "on" else " (the model's default)")
            )
            return {**sent, **effort}, True, how
        if "budget" in caps.thinking:
            return (
                {"thinking": {"type": "enabled", "budget_tokens": choice.tokens}},
                True,
                "thinking with a budget",
            )
        raise ConfigError(f"thinking: on: {model} does not think")
    return {}, False, "no thinking (the model's default)"


def _anthropic_off(
    caps: Capabilities, model: str, choice: ThinkingChoice, effort: dict[str, Any]
) -> tuple[dict[str, Any], bool, str]:
    if not caps.thinks_by_default:
        return {}, False, "no thinking (the model's default)"
    if caps.can_disable_thinking:
        return (
            {"thinking": {"type": "disabled"}, **effort},
            False,
            "thinking disabled (the model thinks by default)",
        )
    if "between_tools" in caps.thinking:
        level = choice.effort or caps.default_effort
        if level is not None and level not in caps.between_tools_efforts:
            raise ConfigError(
                f"thinking: off: {model} turns thinking off only with between_tools, which it takes at "
                f"effort {', '.join(caps.between_tools_efforts)}, not {level} (xhigh and max need "
                "adaptive thinking: thinking: on)"
            )
        how = "thinking off (between_tools: updates between tool calls come back as thinking blocks), effort "
        return {"thinking": {"type": "between_tools"}, **effort}, False, how + (level or "default")
    forms = ", ".join(sorted(caps.thinking)) or "none"
    raise ConfigError(
        f"thinking: off: {model} cannot turn thinking off (it takes thinking: {forms}; efforts "
        f"{', '.join(caps.efforts) or 'none'}): use thinking: on with effort low"
    )


def _openai(caps: Capabilities, model: str, choice: ThinkingChoice) -> tuple[dict[str, Any], bool, str]:
    reasons = "effort" in caps.thinking
    if choice.mode == "off":
        if not reasons:
            return {}, False, "no reasoning (the model's default)"
        if "none" not in caps.efforts or not caps.can_disable_thinking:
            raise ConfigError(
                f"thinking: off: {model} cannot turn reasoning off (it takes reasoning_effort "
                f"{', '.join(caps.efforts) or 'none'})"
            )
        # said even where none is the default: a default that changes would change the run silently
        return {"reasoning_effort": "none"}, False, "reasoning off (reasoning_effort none)"
    if not reasons:
        if choice.mode == "on":
            raise ConfigError(f"thinking: on: {model} does not reason")
        return {}, False, "no reasoning (the model's default)"
    effort = choice.effort or caps.default_effort
    if effort == "none":
        sent = {"reasoning_effort": "none"} if choice.effort else {}
        how = "reasoning off (reasoning_effort none" + (")" if choice.effort else ": the model's default)")
        return sent, False, how
    sent = {"reasoning_effort": choice.effort} if choice.effort else {}
    return sent, True, f"reasoning, effort {effort}" + ("" if choice.effort else " (the model's default)")
