"""`python -m opsagent -p PROMPT [--output-format json] [--model M] [--max-turns N]`, in the working directory
it is to work in. Like Claude Code's print mode: one prompt, tool calls until the model answers, the answer
on stdout (with --output-format json, one result object: subtype, is_error, result, num_turns, session_id,
usage), exit 1 when it could not finish. Its session, every model call and tool call with when it started,
goes to .opsagent/session.jsonl; what AGENT.md in the directory says is its system prompt."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anthropic
import psycopg

from opsagent.tools import TOOLS, as_text, run_tool

DEFAULT_INSTRUCTIONS = "You are an operations assistant for a CRM. Use the tools; never guess ids. Answer briefly."


def _at(unix: float) -> str:
    return dt.datetime.fromtimestamp(unix, dt.UTC).isoformat(timespec="microseconds")


class Session:
    """The session file: a line per event, as the harness reads it afterwards."""

    def __init__(self, workdir: Path) -> None:
        self.id = uuid.uuid4().hex[:12]
        (workdir / ".opsagent").mkdir(exist_ok=True)
        self.file = (workdir / ".opsagent" / "session.jsonl").open("w", encoding="utf-8")

    def log(self, event: dict[str, Any]) -> None:
        self.file.write(json.dumps(event, default=str) + "\n")
        self.file.flush()


def least_thinking(client: anthropic.Anthropic, model: str) -> dict[str, Any]:
    """The least thinking the model takes, as its Models API says (`capabilities.thinking.types`): "disabled"
    where supported, else "between_tools", which Claude Sonnet 5.5 takes instead (it refuses "disabled" with a
    400: Anthropic's "What's new in Claude Sonnet 5.5", read 2026-11-26); nothing where it names neither."""
    info = client.models.retrieve(model).model_dump()
    types = ((info.get("capabilities") or {}).get("thinking") or {}).get("types") or {}
    for kind in ("disabled", "between_tools"):
        if (types.get(kind) or {}).get("supported"):
            return {"type": kind}
    return {}


def _ask(client: anthropic.Anthropic, model: str, system: str, messages: list[dict[str, Any]],
         session: Session, thinking: dict[str, Any]) -> anthropic.types.Message:
    began = time.time()
    extra: dict[str, Any] = {"thinking": thinking} if thinking else {}
    answer = client.messages.create(model=model, max_tokens=1024, system=system, tools=TOOLS, messages=messages,
                                    **extra)
    u = answer.usage
    calls = [{"id": b.id, "name": b.name, "args": b.input} for b in answer.content if b.type == "tool_use"]
    session.log({"type": "assistant", "started_at": _at(began), "seconds": round(time.time() - began, 6),
                 "model": answer.model, "id": answer.id, "stop_reason": answer.stop_reason,
                 "usage": {"input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
                           "cache_read_tokens": u.cache_read_input_tokens or 0,
                           "cache_write_tokens": u.cache_creation_input_tokens or 0},
                 "text": "".join(b.text for b in answer.content if b.type == "text"), "tool_calls": calls})
    return answer


def run(prompt: str, model: str, max_turns: int, workdir: Path) -> dict[str, Any]:
    guide = workdir / "AGENT.md"
    system = guide.read_text() if guide.is_file() else DEFAULT_INSTRUCTIONS
    session = Session(workdir)
    client = anthropic.Anthropic()  # ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY from the environment
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    session.log({"type": "user", "text": prompt})
    usage = {"input_tokens": 0, "output_tokens": 0}
    thinking = least_thinking(client, model)
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        for turn in range(1, max_turns + 1):
            answer = _ask(client, model, system, messages, session, thinking)
            usage["input_tokens"] += answer.usage.input_tokens
            usage["output_tokens"] += answer.usage.output_tokens
            # the turn as it came, thinking blocks and all: the API wants them back unchanged
            messages.append({"role": "assistant", "content": [b.to_dict() for b in answer.content]})
            calls = [b for b in answer.content if b.type == "tool_use"]
            if not calls:
                text = "".join(b.text for b in answer.content if b.type == "text")
                (workdir / "report.md").write_text(f"# {prompt}\n\n{text}\n", encoding="utf-8")
                return {"type": "result", "subtype": "success", "is_error": False, "result": text,
                        "num_turns": turn, "session_id": session.id, "usage": usage}
            results = []
            for call in calls:
                began = time.time()
                outcome = run_tool(conn, call.name, dict(call.input))
                session.log({"type": "tool", "id": call.id, "name": call.name, "args": call.input,
                             "ok": outcome["ok"], "result": outcome.get("result"), "error": outcome.get("error"),
                             "started_at": _at(began), "seconds": round(time.time() - began, 6)})
                results.append({"type": "tool_result", "tool_use_id": call.id, "content": as_text(outcome),
                                "is_error": not outcome["ok"]})
            messages.append({"role": "user", "content": results})
    return {"type": "result", "subtype": "error_max_turns", "is_error": True, "result": "",
            "num_turns": max_turns, "session_id": session.id, "usage": usage}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="opsagent", description=__doc__)
    ap.add_argument("-p", "--print", dest="prompt", required=True, help="the task, answered once")
    ap.add_argument("--output-format", choices=["text", "json"], default="text")
    ap.add_argument("--model", default=os.environ.get("OPSAGENT_MODEL", "claude-sonnet-5-5"))
    ap.add_argument("--max-turns", type=int, default=8)
    args = ap.parse_args(argv)
    result = run(args.prompt, args.model, args.max_turns, Path.cwd())
    print(json.dumps(result) if args.output_format == "json" else result["result"] or result["subtype"])
    return 1 if result["is_error"] else 0


if __name__ == "__main__":
    sys.exit(main())
