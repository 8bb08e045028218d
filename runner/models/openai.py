"""OpenAI Chat Completions with tools: requests as the official SDK makes them (its own retries off),
sent by runner/models/wire.py.

OpenAI caches prompt prefixes by itself; usage reports the cached part (priced apart). An assistant
turn never goes out with null content unless it carries tool calls (a 400 otherwise).
"""

from __future__ import annotations

import json
from typing import Any

from runner.models.base import (
    BATCHED_HEADER,
    Completion,
    PerObject,
    Provider,
    ProviderError,
    Request,
    ToolCall,
    nonblank,
    read_response,
)
from runner.models.wire import Wire, http_client

# what ChatCompletionAssistantMessageParam takes of a response's message (and what it says, not null)
ASSISTANT_KEYS = ("content", "tool_calls", "refusal", "audio", "function_call", "name")


def to_openai(system: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for m in messages:
        if m["role"] == "user":
            out.append({"role": "user", "content": nonblank(m["text"])})
        elif m["role"] == "assistant" and (m.get("received") or {}).get("api") == "openai":
            # as the model sent it: its content, tool calls (their arguments' own bytes) and refusal, only
            # what the request's assistant message takes (a response's annotations are not among those)
            sent = m["received"]["content"]
            out.append({"role": "assistant", **{k: v for k, v in sent.items() if k in ASSISTANT_KEYS}})
        elif m["role"] == "assistant":
            msg: dict[str, Any] = {"role": "assistant"}
            text = m.get("text") or ""
            if text.strip() or not m.get("tool_calls"):
                msg["content"] = nonblank(text)
            if m.get("tool_calls"):
                msg["tool_calls"] = [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {
                            "name": c["name"],
                            "arguments": c["args"] if isinstance(c["args"], str) else json.dumps(c["args"]),
                        },
                    }
                    for c in m["tool_calls"]
                ]
            out.append(msg)
        else:
            out += [
                {"role": "tool", "tool_call_id": r["id"], "content": nonblank(r["content"], "(empty)")}
                for r in m["results"]
            ]
    return out


def _args(raw: str) -> Any:
    try:
        return json.loads(raw or "{}")
    except json.JSONDecodeError:
        return raw  # the tool layer answers it with an invalid_arguments error


# the run's tool list in OpenAI's shape, built once per list object (one object for every call)
_function_tools: PerObject[list[dict[str, Any]]] = PerObject(
    lambda tools: [
        {
            "type": "function",
            "function": {"name": t["name"], "description": t["description"], "parameters": t["input_schema"]},
        }
        for t in tools
    ]
)


def request_body(req: Request) -> dict[str, Any]:
    return {
        "model": req.model,
        "messages": to_openai(req.system, req.messages),
        "tools": _function_tools(req.tools),
        "max_completion_tokens": req.max_output_tokens,
        **(req.sampling or {}),
        **(req.thinking or {}),
    }


class OpenAIProvider(Provider):
    """GPT models through OpenAI's Chat Completions; Azure OpenAI, which takes the same body, subclasses it
    with its own SDK client (runner/models/azure.py)."""

    name = "openai"

    def __init__(
        self,
        api_key: str,
        *,
        base_url: str | None,
        timeout: float,
        headers: dict[str, str] | None = None,
        lean: bool = True,
    ) -> None:
        import openai

        self._over(
            openai.OpenAI(
                api_key=api_key,
                base_url=base_url,
                timeout=timeout,
                max_retries=0,
                default_headers=headers,
                http_client=http_client(openai),
            ),
            timeout=timeout,
            lean=lean,
        )

    def _over(self, client: Any, *, timeout: float, lean: bool) -> None:
        """Calls through `client`: the openai SDK's OpenAI or AzureOpenAI."""
        import openai

        self.client = client
        self.wire = Wire(
            client,
            openai,
            "/chat/completions",
            timeout=timeout,
            options={"security": {"bearer_auth": True}},
            lean=lean,
            create=client.chat.completions.with_raw_response.create,
        )

    def generate(self, req: Request) -> Completion:
        t0 = self._timer()
        resp = self.wire.post(request_body(req))
        with read_response(resp) as body:
            if not body.get("choices"):
                raise ProviderError("transient", "response has no choices")
            choice = body["choices"][0]
            message = choice["message"]
            calls = [
                ToolCall(tc["id"], tc["function"]["name"], _args(tc["function"]["arguments"]))
                for tc in (message.get("tool_calls") or [])
                if tc.get("type") == "function"
            ]
            usage = body.get("usage") or {}
            prompt = usage.get("prompt_tokens") or 0
            cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
            return Completion(
                text=message.get("content") or "",
                tool_calls=calls,
                input_tokens=prompt - cached,
                cache_read_tokens=cached,
                output_tokens=usage.get("completion_tokens") or 0,
                latency_seconds=self._timer() - t0,
                # a refusal comes as a message field with finish_reason stop
                stop_reason="refusal" if message.get("refusal") else str(choice.get("finish_reason")),
                request_id=resp.headers.get("x-request-id"),
                model=req.model,
                received={
                    "api": "openai",
                    "content": {k: v for k, v in message.items() if v is not None and k != "role"},
                },
                batched=resp.headers.get(BATCHED_HEADER) == "1",
            )

    def close(self) -> None:
        self.wire.close()
        self.client.close()
