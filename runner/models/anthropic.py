"""Anthropic Messages API with tools: requests as the official SDK makes them (its own retries off),
sent by runner/models/wire.py.

Requests carry only what the API accepts: sampling parameters the model takes (none, under the
API version of the installed SDK), no empty or whitespace-only text (a 400), and, with prompt
caching on, cache_control breakpoints on the tool list, the system prompt and the end of the
transcript, so each call pays full price only for what is new since the last one.
"""

from __future__ import annotations

from typing import Any

from runner.models.base import (
    BATCHED_HEADER,
    Completion,
    PerObject,
    Provider,
    Request,
    ToolCall,
    nonblank,
    read_response,
)
from runner.models.wire import Wire, http_client

EPHEMERAL = {"type": "ephemeral"}
# the tool list with a breakpoint on its last tool, built once per list object
_marked_tools: PerObject[list[dict[str, Any]]] = PerObject(
    lambda tools: [*tools[:-1], {**tools[-1], "cache_control": EPHEMERAL}] if tools else []
)


def to_anthropic(messages: list[dict[str, Any]], *, cache: bool = False) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "assistant":
            out.append({"role": "assistant", "content": assistant_blocks(m)})
            continue
        if m["role"] == "tool":
            content: list[dict[str, Any]] = [
                {
                    "type": "tool_result",
                    "tool_use_id": r["id"],
                    "content": nonblank(r["content"], "(empty)"),
                    "is_error": bool(r.get("is_error")),
                }
                for r in m["results"]
            ]
        else:
            content = [{"type": "text", "text": nonblank(m["text"])}]
        if out and out[-1]["role"] == "user":  # one user turn: tool results and text together
            out[-1]["content"] = list(out[-1]["content"]) + content
        else:
            out.append({"role": "user", "content": content})
    if cache and out:  # the transcript so far: the next call reads it instead of paying for it again
        last = out[-1]
        last["content"] = [*last["content"][:-1], {**last["content"][-1], "cache_control": EPHEMERAL}]
    return out


def assistant_blocks(m: dict[str, Any]) -> list[dict[str, Any]]:
    """An assistant turn's content: as Claude sent it when it did (every block, in order, unmodified: the API
    refuses a rebuilt turn that carries thinking blocks), else built from its text and calls (another
    model's turn, or one the agent changed)."""
    received = m.get("received")
    if received is not None and received.get("api") == "anthropic":
        return list(received["content"])
    text = m.get("text") or ""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text.strip() else []
    blocks += [
        {
            "type": "tool_use",
            "id": c["id"],
            "name": c["name"],
            "input": c["args"] if isinstance(c["args"], dict) else {},
        }
        for c in m.get("tool_calls", [])
    ]
    return blocks or [{"type": "text", "text": nonblank(None)}]


def request_body(req: Request) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": req.model,
        "max_tokens": req.max_output_tokens,
        "messages": to_anthropic(req.messages, cache=req.prompt_cache),
        "tools": _marked_tools(req.tools) if req.prompt_cache else req.tools,
        **(req.sampling or {}),
        **(req.thinking or {}),
    }
    if req.system:
        body["system"] = (
            [{"type": "text", "text": req.system, "cache_control": EPHEMERAL}]
            if req.prompt_cache
            else req.system
        )
    return body


class AnthropicProvider(Provider):
    """Claude through the Anthropic API; the clouds that serve Claude in the same format (Bedrock, Vertex)
    subclass it with their own SDK client (runner/models/bedrock.py, vertex.py)."""

    name = "anthropic"
    request_id_header = "request-id"

    def __init__(
        self,
        api_key: str,
        *,
        base_url: str | None,
        timeout: float,
        headers: dict[str, str] | None = None,
        lean: bool = True,
    ) -> None:
        import anthropic

        self._over(
            anthropic.Anthropic(
                api_key=api_key,
                base_url=base_url,
                timeout=timeout,
                max_retries=0,
                default_headers=headers,
                http_client=http_client(anthropic),
            ),
            timeout=timeout,
            lean=lean,
        )

    def _over(self, client: Any, *, timeout: float, lean: bool) -> None:
        """Calls through `client`: the anthropic SDK's Anthropic, AnthropicBedrock or AnthropicVertex (their
        messages API is one; each moves the request where its service takes it)."""
        import anthropic

        self.client = client
        self.wire = Wire(
            client,
            anthropic,
            "/v1/messages",
            timeout=timeout,
            lean=lean,
            create=client.messages.with_raw_response.create,
        )

    def generate(self, req: Request) -> Completion:
        t0 = self._timer()
        resp = self.wire.post(request_body(req))
        with read_response(resp) as msg:
            blocks = msg["content"]
            text = "".join(b["text"] for b in blocks if b["type"] == "text")
            calls = [ToolCall(b["id"], b["name"], b["input"]) for b in blocks if b["type"] == "tool_use"]
            u = msg["usage"]
            hour = (u.get("cache_creation") or {}).get("ephemeral_1h_input_tokens") or 0
            return Completion(
                text=text,
                tool_calls=calls,
                input_tokens=u["input_tokens"],
                output_tokens=u["output_tokens"],
                cache_read_tokens=u.get("cache_read_input_tokens") or 0,
                cache_write_tokens=u.get("cache_creation_input_tokens") or 0,
                cache_write_1h_tokens=hour,
                latency_seconds=self._timer() - t0,
                stop_reason=str(msg.get("stop_reason")),
                request_id=resp.headers.get(self.request_id_header),
                model=req.model,
                received={"api": "anthropic", "content": blocks},
                batched=resp.headers.get(BATCHED_HEADER) == "1",
            )

    def close(self) -> None:
        self.wire.close()
        self.client.close()
