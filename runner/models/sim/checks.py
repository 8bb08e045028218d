"""The published rules applied to a request: the path conditions of rulebook.py, and the structural checks
the providers' pages describe that a condition on one field cannot express, each by its name there.

`refusal(...)` answers what the real API would: None, or the first rule the request breaks, as a
RequestRefused carrying the provider's status, error type and wording.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping
from typing import Any

from runner.models.sim import rulebook
from runner.models.sim import thinking as sim_thinking
from runner.models.sim.strict import RequestRefused

Check = Callable[[Mapping[str, Any], Mapping[str, str], str], bool]  # (body, headers, model) -> refused


def _latest_assistant(messages: list[Any]) -> int | None:
    return next(
        (
            i
            for i in range(len(messages) - 1, -1, -1)
            if isinstance(messages[i], dict) and messages[i].get("role") == "assistant"
        ),
        None,
    )


def _blocks(message: Any) -> list[Any]:
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else []


def _thinking(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "thinking"


def thinking_blocks_unmodified(body: Mapping[str, Any], headers: Mapping[str, str], model: str) -> bool:
    """In the latest assistant turn, the thinking blocks are the answer's own, unedited, none dropped or
    moved, and grouped in runs of consecutive blocks as they came (a text block taken from between two
    of them, or put between two that were together, changes the sequence)."""
    messages = list(body.get("messages") or [])
    at = _latest_assistant(messages)
    if at is None:
        return False
    content = _blocks(messages[at])
    seen: dict[str, list[tuple[int, sim_thinking.Signed]]] = {}  # answer -> (position in content, signed)
    for pos, b in enumerate(content):
        if not _thinking(b):
            continue
        signed = sim_thinking.verify(model, str(b.get("thinking") or ""), str(b.get("signature") or ""))
        if signed is None:
            return True
        seen.setdefault(signed.answer, []).append((pos, signed))
    for blocks in seen.values():
        if [s.index for _, s in blocks] != list(range(blocks[0][1].count)):
            return True  # one dropped, or the order changed
        for (pos_a, a), (pos_b, b) in itertools.pairwise(blocks):
            if (a.run == b.run) != (pos_b == pos_a + 1):
                return True  # a run split apart, or two runs joined
    return False


def thinking_blocks_returned_in_tool_loop(
    body: Mapping[str, Any], headers: Mapping[str, str], model: str
) -> bool:
    """Thinking on, and the tool-use loop in progress went back without its thinking: the latest assistant
    turn holds tool_use blocks the last message answers, and does not start with a thinking block."""
    if not sim_thinking.mode("anthropic", dict(body), model).thinks:
        return False
    messages = list(body.get("messages") or [])
    at = _latest_assistant(messages)
    if at is None or at != len(messages) - 2:
        return False
    content = _blocks(messages[at])
    if not any(isinstance(b, dict) and b.get("type") == "tool_use" for b in content):
        return False
    return not (
        content
        and isinstance(content[0], dict)
        and content[0].get("type") in ("thinking", "redacted_thinking")
    )


def thinking_block_prefix_unchanged(body: Mapping[str, Any], headers: Mapping[str, str], model: str) -> bool:
    """A thinking block replayed anywhere is bound to everything before its answer: refused when that
    changed (or when its signature is not one of this model's)."""
    messages = list(body.get("messages") or [])
    for i, m in enumerate(messages):
        if not (isinstance(m, dict) and m.get("role") == "assistant"):
            continue
        digest = None
        for b in _blocks(m):
            if not _thinking(b):
                continue
            signed = sim_thinking.verify(model, str(b.get("thinking") or ""), str(b.get("signature") or ""))
            if signed is None:
                return True
            digest = digest or sim_thinking.prefix_digest(dict(body), i)
            if signed.prefix != digest:
                return True
    return False


def last_message_is_assistant(body: Mapping[str, Any], headers: Mapping[str, str], model: str) -> bool:
    messages = list(body.get("messages") or [])
    return bool(messages) and isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant"


def budget_tokens_must_be_less_than_max_tokens(
    body: Mapping[str, Any], headers: Mapping[str, str], model: str
) -> bool:
    thinking = body.get("thinking") or {}
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        return False
    budget = thinking.get("budget_tokens")
    return isinstance(budget, int) and budget >= int(body.get("max_tokens") or 0)


def tool_type_not_supported(body: Mapping[str, Any], headers: Mapping[str, str], model: str) -> bool:
    return any(
        isinstance(t, dict) and t.get("type") in ("computer_20251124", "computer_20250124")
        for t in body.get("tools") or []
    )


def _betas(headers: Mapping[str, str]) -> set[str]:
    return {b.strip() for b in (headers.get("anthropic-beta") or "").split(",") if b.strip()}


def display_updates_without_beta_header(
    body: Mapping[str, Any], headers: Mapping[str, str], model: str
) -> bool:
    thinking = body.get("thinking") or {}
    return (
        isinstance(thinking, dict)
        and thinking.get("display") == "updates"
        and "thinking-display-updates-2026-08-18" not in _betas(headers)
    )


def output_format_without_beta_header(
    body: Mapping[str, Any], headers: Mapping[str, str], model: str
) -> bool:
    return "output_format" in body and "structured-outputs-2025-11-13" not in _betas(headers)


def between_tools_per_message_effort_change(
    body: Mapping[str, Any], headers: Mapping[str, str], model: str
) -> bool:
    if (body.get("thinking") or {}).get("type") != "between_tools":
        return False
    level = (body.get("output_config") or {}).get("effort") or "high"
    return any(
        isinstance(m, dict)
        and isinstance(m.get("output_config"), dict)
        and m["output_config"].get("effort") not in (None, level)
        for m in body.get("messages") or []
    )


_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def batch_custom_id_valid_and_unique(body: Mapping[str, Any], headers: Mapping[str, str], model: str) -> bool:
    ids = [r.get("custom_id") for r in body.get("requests") or [] if isinstance(r, dict)]
    return any(not isinstance(i, str) or not _CUSTOM_ID.match(i) for i in ids) or len(set(ids)) != len(ids)


def batch_request_count_limit(body: Mapping[str, Any], headers: Mapping[str, str], model: str) -> bool:
    limit = int(rulebook.book("anthropic").batch.get("max_requests") or 100_000)
    return len(body.get("requests") or []) > limit


CHECKS: dict[str, Check] = {
    f.__name__: f
    for f in (
        thinking_blocks_unmodified,
        thinking_blocks_returned_in_tool_loop,
        thinking_block_prefix_unchanged,
        last_message_is_assistant,
        budget_tokens_must_be_less_than_max_tokens,
        tool_type_not_supported,
        display_updates_without_beta_header,
        output_format_without_beta_header,
        between_tools_per_message_effort_change,
        batch_custom_id_valid_and_unique,
        batch_request_count_limit,
    )
}

# Named in the published rules, and why the simulator does not refuse requests for them here.
NOT_ENFORCED = {
    "reasoning_item_resolvable": "the simulator keeps every response (store true), so a reasoning item sent "
    "back by id always resolves; the refusal's form is not published either",
    "batch_input_file_valid": "an OpenAI batch's file is validated when the batch is created "
    "(runner/models/sim/batches.py), where a failure marks the batch failed",
    "batch_enqueued_prompt_tokens_within_limit": "the enqueued-token limit is applied by the batch queue "
    "(runner/models/sim/batches.py), which fails such a batch",
}


def refusal(
    api: str, endpoint: str, body: Mapping[str, Any], headers: Mapping[str, str], model: str
) -> RequestRefused | None:
    """The first published rule this request breaks, as the API words it; None if it breaks none."""
    for rule in rulebook.book(api).rules_for(endpoint, model):
        if rule.check is not None:
            check = CHECKS.get(rule.check)
            broken = check is not None and check(body, headers, model)
        else:
            broken = rule.holds(body)
        if broken:
            return RequestRefused(
                rule.wording(body, model),
                status=rule.status or 400,
                rule=rule.id,
                code=rule.error_type if api == "anthropic" else None,
            )
    return None
