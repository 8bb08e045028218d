"""Anthropic Messages API with tools, on the official SDK (its own retries off)."""

from __future__ import annotations

from typing import Any

from runner.models.base import Completion, Provider, Request, ToolCall, sdk_errors


def to_anthropic(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": m["text"]}] if m.get("text") else []
            blocks += [{"type": "tool_use", "id": c["id"], "name": c["name"],
                        "input": c["args"] if isinstance(c["args"], dict) else {}} for c in m.get("tool_calls", [])]
            out.append({"role": "assistant", "content": blocks or [{"type": "text", "text": "(no answer)"}]})
            continue
        if m["role"] == "tool":
            content: list[dict[str, Any]] = [{"type": "tool_result", "tool_use_id": r["id"], "content": r["content"],
                                              "is_error": bool(r.get("is_error"))} for r in m["results"]]
        else:
            content = [{"type": "text", "text": m["text"]}]
        if out and out[-1]["role"] == "user":  # roles must alternate: merge tool results and text
            out[-1]["content"] = list(out[-1]["content"]) + content
        else:
            out.append({"role": "user", "content": content})
    return out


class AnthropicProvider(Provider):
    name = "anthropic"

    def __init__(self, api_key: str, *, base_url: str | None, timeout: float) -> None:
        import anthropic

        self._sdk = anthropic
        self.client = anthropic.Anthropic(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0)

    def generate(self, req: Request) -> Completion:
        t0 = self._timer()
        with sdk_errors(self._sdk):
            resp = self.client.messages.create(
                model=req.model, system=req.system, messages=to_anthropic(req.messages),  # type: ignore[arg-type]
                tools=req.tools, max_tokens=req.max_output_tokens,  # type: ignore[arg-type]
                # SDK 2.x dropped the keyword; the seeds' models (Sonnet 4.5) still accept it on the wire.
                extra_body={"temperature": req.temperature})
        text = "".join(b.text for b in resp.content if b.type == "text")
        calls = [ToolCall(b.id, b.name, b.input) for b in resp.content if b.type == "tool_use"]
        return Completion(text=text, tool_calls=calls, input_tokens=resp.usage.input_tokens,
                          output_tokens=resp.usage.output_tokens, latency_seconds=self._timer() - t0,
                          stop_reason=str(resp.stop_reason), request_id=getattr(resp, "_request_id", None),
                          model=req.model)

    def close(self) -> None:
        self.client.close()
