"""One conversation, the team's way: BEGIN / TRUNCATE ... RESTART IDENTITY CASCADE / seed / turns / ROLLBACK."""

from __future__ import annotations

from typing import Any

from crmbench import agent, db
from crmbench.tools import execute


class _Rollback(Exception):
    pass


def run_conversation(conversation: dict[str, Any], *, provider: str = "standin", model: str = "oracle",
                     temperature: float = 0.0) -> dict[str, Any]:
    """Play every turn, compare the final state with the expected one, undo everything."""
    cid = conversation["conversation_id"]
    calls: list[str] = []
    errors: list[str] = []
    with db.connect() as conn:
        try:
            with conn.transaction():
                db.reset_and_seed(conn, conversation["seed"])

                def run_tool(name: str, args: dict[str, Any]) -> dict[str, Any]:
                    out = execute(conn, name, args)
                    if not out.get("ok"):
                        errors.append(f"{name}: {out.get('error', 'failed')}")
                    return out

                messages: list[dict[str, Any]] = []
                for n, turn in enumerate(conversation["turns"]):
                    messages.append({"role": "user", "content": turn["user"]})
                    if provider == "standin":
                        calls += agent.standin(cid, n, turn, model, run_tool)
                    elif provider == "anthropic":
                        calls += agent.anthropic_turn(messages, model, temperature, run_tool)
                    else:
                        calls += agent.openai_turn(messages, model, temperature, run_tool)
                final = db.state(conn)
                raise _Rollback
        except _Rollback:
            pass
    expected = conversation["expected"]
    matched = {t: final[t] == rows for t, rows in expected.items()}
    return {"conversation_id": cid, "overall_success": all(matched.values()) and not errors,
            "state_match": sum(matched.values()) / len(matched), "tool_calls": len(calls), "tools": calls,
            "tool_errors": errors, "model": model, "provider": provider}
