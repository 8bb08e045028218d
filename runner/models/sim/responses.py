"""OpenAI's Responses API (`POST /v1/responses`) played by the simulator through its Chat Completions path.

A request is checked against the installed SDK's `ResponseCreateParams` types, turned into the
equivalent chat request (instructions -> system message, input items -> messages, function tools ->
tools, max_output_tokens -> max_completion_tokens, reasoning.effort -> reasoning_effort), answered by
the same policy, limits and faults as any chat request, and the answer is given back in the Responses
shape: output items (reasoning, message, function_call), usage with reasoning tokens, `incomplete`
with `max_output_tokens` when the limit cut it, or as the documented stream of typed events.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from runner.models.sim.stream import sse

_TEXT_PIECE = 24


def shape_error(body: dict[str, Any]) -> str | None:
    """What the real API would say is wrong with the request's shape (the SDK's own types), or None."""
    from openai.types.responses import response_create_params as r

    from runner.models.sim.strict import check

    td = r.ResponseCreateParamsStreaming if body.get("stream") else r.ResponseCreateParamsNonStreaming
    if not body.get("model"):
        return "Missing required parameter: 'model'."
    if body.get("previous_response_id"):
        return "previous_response_id: the simulator keeps no responses; send the whole input."
    return check(body, td, "")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The chat request that asks the same."""
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    items = body.get("input")
    for item in [{"role": "user", "content": items}] if isinstance(items, str) else items or []:
        kind = item.get("type", "message")
        if kind == "message":
            role = "system" if item.get("role") == "developer" else item.get("role", "user")
            messages.append({"role": role, "content": _text(item.get("content"))})
        elif kind == "function_call":
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item.get("arguments") or "{}"},
            }
            if messages and messages[-1]["role"] == "assistant" and messages[-1].get("tool_calls"):
                messages[-1]["tool_calls"].append(call)  # parallel calls: one assistant turn
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": item["call_id"],
                    "content": output if isinstance(output, str) else json.dumps(output),
                }
            )
        # reasoning items (and others) carry nothing the simulator's policy reads
    chat: dict[str, Any] = {"model": body["model"], "messages": messages}
    tools = [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t.get("description") or "",
                "parameters": t.get("parameters") or {"type": "object"},
            },
        }
        for t in body.get("tools") or []
        if t.get("type") == "function"
    ]
    if tools:
        chat["tools"] = tools
    if body.get("max_output_tokens") is not None:
        chat["max_completion_tokens"] = body["max_output_tokens"]
    if (body.get("reasoning") or {}).get("effort"):
        chat["reasoning_effort"] = body["reasoning"]["effort"]
    if body.get("stream"):
        chat["stream"] = True
    return chat


def from_chat(chat: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """A chat completion in the Responses API's shape."""
    choice = chat["choices"][0]
    message, usage = choice["message"], chat.get("usage") or {}
    rid = chat["id"].removeprefix("chatcmpl-")
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    # encrypted_content by default, as the current API reference says (an older guide made it opt-in through
    # `include`): a stateless caller sends the item back whole
    output: list[dict[str, Any]] = (
        [{"type": "reasoning", "id": f"rs_{rid}", "summary": [], "encrypted_content": f"sim-rs-{rid}"}]
        if reasoning
        else []
    )
    if message.get("content"):
        output.append(
            {
                "type": "message",
                "id": f"msg_{rid}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": message["content"], "annotations": []}],
            }
        )
    for i, call in enumerate(message.get("tool_calls") or []):
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{rid}{i:02d}",
                "call_id": call["id"],
                "name": call["function"]["name"],
                "arguments": call["function"]["arguments"],
                "status": "completed",
            }
        )
    cut = choice.get("finish_reason") == "length"
    prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
    return {
        "id": f"resp_{rid}",
        "object": "response",
        "created_at": chat.get("created", int(time.time())),
        "status": "incomplete" if cut else "completed",
        "model": chat["model"],
        "output": output,
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "error": None,
        "instructions": body.get("instructions"),
        "metadata": body.get("metadata") or {},
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "temperature": body.get("temperature", 1.0),
        "top_p": body.get("top_p", 1.0),
        "max_output_tokens": body.get("max_output_tokens"),
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        "usage": {
            "input_tokens": prompt,
            "input_tokens_details": {
                "cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
            },
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": prompt + completion,
        },
    }


def events(response: dict[str, Any]) -> Iterator[bytes]:
    """The documented event stream of a response: created, each item added, its deltas, done, completed."""
    n = 0

    def ev(kind: str, **data: Any) -> bytes:
        nonlocal n
        n += 1
        return sse(kind, {"type": kind, "sequence_number": n - 1, **data})

    begun = {**response, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    yield ev("response.created", response=begun)
    yield ev("response.in_progress", response=begun)
    for i, item in enumerate(response["output"]):
        if item["type"] == "message":
            yield ev(
                "response.output_item.added",
                output_index=i,
                item={**item, "status": "in_progress", "content": []},
            )
            part = item["content"][0]
            yield ev(
                "response.content_part.added",
                item_id=item["id"],
                output_index=i,
                content_index=0,
                part={**part, "text": ""},
            )
            for k in range(0, len(part["text"]), _TEXT_PIECE):
                yield ev(
                    "response.output_text.delta",
                    item_id=item["id"],
                    output_index=i,
                    content_index=0,
                    delta=part["text"][k : k + _TEXT_PIECE],
                    logprobs=[],
                )
            yield ev(
                "response.output_text.done",
                item_id=item["id"],
                output_index=i,
                content_index=0,
                text=part["text"],
                logprobs=[],
            )
            yield ev(
                "response.content_part.done", item_id=item["id"], output_index=i, content_index=0, part=part
            )
        elif item["type"] == "function_call":
            yield ev(
                "response.output_item.added",
                output_index=i,
                item={**item, "status": "in_progress", "arguments": ""},
            )
            yield ev(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=i,
                delta=item["arguments"],
            )
            yield ev(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=i,
                arguments=item["arguments"],
            )
        else:
            yield ev("response.output_item.added", output_index=i, item=item)
        yield ev("response.output_item.done", output_index=i, item=item)
    yield ev(
        "response.incomplete" if response["status"] == "incomplete" else "response.completed",
        response=response,
    )
