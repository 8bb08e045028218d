"""The two wire formats the simulator speaks, to and from the policy's neutral messages."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from runner.models.sim.policy import Action, Call, Msg
from runner.models.sim.thinking import Signed


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def anthropic_messages(body: dict[str, Any]) -> list[Msg]:
    out: list[Msg] = []
    for m in body.get("messages", []):
        content = m.get("content")
        if m.get("role") == "assistant":
            blocks: list[dict[str, Any]] = (
                content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
            )
            uses = [b for b in blocks if b.get("type") == "tool_use"]
            out.append(
                Msg(
                    "assistant",
                    _text_of(blocks),
                    [Call(b["name"], dict(b.get("input") or {})) for b in uses],
                    [b["id"] for b in uses],
                )
            )
            continue
        if isinstance(content, list):
            for b in content:
                if b.get("type") == "tool_result":
                    out.append(
                        Msg(
                            "tool",
                            _text_of(b.get("content"))
                            if not isinstance(b.get("content"), str)
                            else b["content"],
                            call_id=b.get("tool_use_id", ""),
                        )
                    )
            text = _text_of(content)
            if text:
                out.append(Msg("user", text))
        else:
            out.append(Msg("user", content or ""))
    return out


def openai_messages(body: dict[str, Any]) -> list[Msg]:
    out: list[Msg] = []
    for m in body.get("messages", []):
        role = m.get("role")
        if role == "assistant":
            tcs = m.get("tool_calls") or []
            calls = []
            for tc in tcs:
                try:
                    args = json.loads(tc["function"].get("arguments") or "{}")
                except json.JSONDecodeError:
                    args = {}
                calls.append(Call(tc["function"]["name"], args if isinstance(args, dict) else {}))
            out.append(Msg("assistant", _text_of(m.get("content")), calls, [tc["id"] for tc in tcs]))
        elif role == "tool":
            out.append(Msg("tool", _text_of(m.get("content")), call_id=m.get("tool_call_id", "")))
        elif role == "user":
            out.append(Msg("user", _text_of(m.get("content"))))
    return out


def anthropic_content(
    action: Action, rid: str, thought: str | None, updates_as_thinking: bool
) -> list[dict[str, Any]]:
    """An answer's blocks: its thinking first (if it thought), then its words and calls. A model whose
    text between tool calls comes back in thinking blocks (Claude Sonnet 5.5: "What's new in Claude Sonnet
    5.5", read 2026-11-26) says what it is about to do in one, and a few words before each further call in
    another, so a turn reads [thinking, thinking, tool_use, thinking, tool_use]; a final answer stays text.
    Signatures are added by `sign_thinking` once the whole answer is known."""
    content: list[dict[str, Any]] = [{"type": "thinking", "thinking": thought}] if thought else []
    if action.calls and action.text:
        content.append(
            {"type": "thinking", "thinking": action.text}
            if updates_as_thinking
            else {"type": "text", "text": action.text}
        )
    elif action.text:
        content.append({"type": "text", "text": action.text})
    for i, c in enumerate(action.calls):
        if i and updates_as_thinking:
            content.append({"type": "thinking", "thinking": f"Next, {c.name}."})
        content.append(
            {"type": "tool_use", "id": f"toolu_{rid[:16]}{i:02d}", "name": c.name, "input": c.args}
        )
    return content


def sign_thinking(
    content: list[dict[str, Any]], signer: Callable[[str, Signed], str], rid: str, prefix: str
) -> None:
    """Each thinking block's signature: its text, its place among the answer's thinking blocks, the run of
    consecutive ones it is in, and the conversation before the answer (runner/models/sim/thinking.py)."""
    thinking = [i for i, b in enumerate(content) if b["type"] == "thinking"]
    run = 0
    for n, pos in enumerate(thinking):
        if n and pos != thinking[n - 1] + 1:
            run += 1
        content[pos]["signature"] = signer(
            content[pos]["thinking"], Signed(rid[:16], n, len(thinking), run, prefix)
        )


def anthropic_response(
    content: list[dict[str, Any]],
    action: Action,
    model: str,
    rid: str,
    usage: dict[str, int],
    *,
    stop: str | None = None,
) -> dict[str, Any]:
    return {
        "id": f"msg_{rid[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop or ("tool_use" if action.calls else "end_turn"),
        "stop_sequence": None,
        "usage": usage,
    }


def openai_response(
    action: Action, model: str, rid: str, usage: dict[str, Any], *, stop: str | None = None
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": action.text or ("" if stop else None),
        "refusal": None,
    }
    if action.calls:
        message["tool_calls"] = [
            {
                "id": f"call_{rid[:16]}{i:02d}",
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.args)},
            }
            for i, c in enumerate(action.calls)
        ]
    return {
        "id": f"chatcmpl-{rid[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": stop or ("tool_calls" if action.calls else "stop"),
            }
        ],
        "usage": usage,
    }


def anthropic_error(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    kind = {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        500: "api_error",
        529: "overloaded_error",
    }.get(status, "api_error")
    return {
        "type": "error",
        "error": {"type": code or kind, "message": message},
        "request_id": f"req_sim{int(time.time() * 1000) % 10**12:012d}",
    }


def openai_error(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    kind = {
        400: "invalid_request_error",
        401: "invalid_request_error",
        404: "invalid_request_error",
        429: "requests",
        500: "server_error",
        503: "server_error",
    }.get(status, "server_error")
    default_code = {401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded"}.get(status)
    if code == "insufficient_quota":
        kind = code
    return {"error": {"message": message, "type": kind, "param": param, "code": code or default_code}}
