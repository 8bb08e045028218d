"""Thinking as the current models do it, played by the simulator from the capabilities table.

A model that thinks by default thinks on a request that says nothing (Claude 5: adaptive at effort
high; GPT-5.x: reasoning at effort medium). Its thinking tokens are output tokens and come out of the
request's output limit first: a limit too small for thinking plus answer cuts the answer (Anthropic:
`stop_reason: max_tokens`, perhaps nothing but thinking; OpenAI: `finish_reason: length`, empty content).
Claude's thinking blocks carry a signature and must come back unchanged, first in the assistant turn of
a tool-use loop; this module checks that, and refuses with the real APIs' 400s what they refuse: a
budget where only adaptive is taken and the reverse, `disabled` where thinking cannot be turned off, a
forced tool_choice while thinking, an effort the model does not take, `max_tokens` on a reasoning model.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

from runner.models.capabilities import Capabilities
from runner.models.sim.strict import Rejected

_KEY = b"pgsandbox-runner simulator thinking"  # signatures are the simulator's own: opaque to clients
# Thinking tokens per call by effort: the order of magnitude of a short agentic step.
TOKENS = {"minimal": 16, "low": 48, "medium": 160, "high": 320, "xhigh": 640, "max": 1200}


@dataclass(frozen=True)
class Mode:
    thinks: bool
    effort: str


def signature(model: str, text: str) -> str:
    return hmac.new(_KEY, f"{model}\0{text}".encode(), hashlib.sha256).hexdigest()


def thought(rid: str, effort: str) -> tuple[str, int]:
    """The thinking text of one answer and its tokens (deterministic per request, +-25 %)."""
    base = TOKENS.get(effort, TOKENS["medium"])
    tokens = int(base * (0.75 + (int(rid[:4], 16) % 51) / 100))
    return "Let me check what the user asked and which tool answers it. " * max(1, tokens // 12), tokens


def mode(api: str, body: dict[str, Any], caps: Capabilities | None) -> Mode:
    """Whether this request makes the model think, and how hard."""
    if caps is None or not caps.thinking:
        return Mode(False, "none")
    if api == "anthropic":
        kind = (body.get("thinking") or {}).get("type")
        effort = (body.get("output_config") or {}).get("effort") or caps.default_effort or "high"
        if kind in ("adaptive", "enabled"):
            return Mode(True, effort if kind == "adaptive" else "high")
        return Mode(kind is None and caps.thinks_by_default, effort)
    effort = body.get("reasoning_effort") or caps.default_effort or "medium"
    return Mode(effort != "none" and caps.thinks_by_default, effort)


def check(api: str, body: dict[str, Any], model: str, caps: Capabilities | None) -> None:
    """Raise Rejected as the real API would for this model's thinking settings."""
    if caps is None:
        return
    if api == "openai":
        _check_openai(body, model, caps)
    else:
        _check_anthropic(body, model, caps)


def _check_openai(body: dict[str, Any], model: str, caps: Capabilities) -> None:
    if "effort" in caps.thinking and body.get("max_tokens") is not None:
        raise Rejected("Unsupported parameter: 'max_tokens' is not supported with this model. Use "
                       "'max_completion_tokens' instead.", param="max_tokens", code="unsupported_parameter")
    effort = body.get("reasoning_effort")
    if effort is not None and effort not in caps.efforts:
        raise Rejected(f"Unsupported value: 'reasoning_effort' does not support '{effort}' with this model. "
                       f"Supported values are: {', '.join(repr(e) for e in caps.efforts) or 'none'}.",
                       param="reasoning_effort", code="unsupported_value")


def _check_anthropic(body: dict[str, Any], model: str, caps: Capabilities) -> None:
    kind = (body.get("thinking") or {}).get("type")
    if kind == "enabled" and "budget" not in caps.thinking:
        raise Rejected('"thinking.type.enabled" is not supported for this model. Use "thinking.type.adaptive" and '
                       '"output_config.effort" to control thinking behavior.')
    if kind == "adaptive" and "adaptive" not in caps.thinking:
        raise Rejected('"thinking.type.adaptive" is not supported for this model. Use "thinking.type.enabled" with '
                       '"thinking.budget_tokens".')
    if kind == "disabled" and not caps.can_disable_thinking:
        raise Rejected('"thinking.type.disabled" is not supported for this model. Use "thinking.type.adaptive".')
    if kind == "enabled":
        budget = int(body["thinking"].get("budget_tokens") or 0)
        if budget < 1024 or budget >= int(body.get("max_tokens") or 0):
            raise Rejected("thinking.budget_tokens: must be at least 1024 and less than max_tokens")
    effort = (body.get("output_config") or {}).get("effort")
    if effort is not None and effort not in caps.efforts:
        raise Rejected(f"output_config.effort: {effort!r} is not supported for this model")
    if not mode("anthropic", body, caps).thinks:
        return
    if (body.get("tool_choice") or {}).get("type") in ("any", "tool"):
        raise Rejected("Thinking may not be enabled when tool_choice forces tool use.")
    _check_thinking_blocks(body["messages"], model)


def _check_thinking_blocks(messages: list[dict[str, Any]], model: str) -> None:
    """Blocks passed back unchanged, and first in the assistant turn of the tool-use loop in progress."""
    for i, m in enumerate(messages):
        content = m.get("content")
        if m.get("role") != "assistant" or not isinstance(content, list):
            continue
        for j, b in enumerate(content):
            if b.get("type") == "thinking" and not hmac.compare_digest(
                    str(b.get("signature") or ""), signature(model, str(b.get("thinking") or ""))):
                raise Rejected(f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block")
    last = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "assistant"), None)
    if last is None or last != len(messages) - 2:  # only a tool-use loop in progress carries the rule
        return
    content = messages[last].get("content")
    blocks = content if isinstance(content, list) else []
    if any(b.get("type") == "tool_use" for b in blocks) and (
            not blocks or blocks[0].get("type") not in ("thinking", "redacted_thinking")):
        found = blocks[0].get("type") if blocks else "nothing"
        raise Rejected(f"messages.{last}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
                       f"`{found}`. When `thinking` is enabled, a final `assistant` message must start with a "
                       "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We "
                       "recommend you include thinking blocks from previous turns. To avoid this requirement, "
                       "disable `thinking`.")
