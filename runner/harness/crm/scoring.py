"""Scoring one conversation: tool selection per turn, argument correctness, final-state match.

The expected state is not trusted from the file: it is reached by replaying the gold calls on a
fresh seed in the same sandbox (as tau-bench does), so it always matches the schema in use.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

import psycopg
from pydantic import ValidationError

from runner.errors import BadRecord
from runner.harness.crm import db
from runner.harness.crm.dataset import Conversation, GoldCall
from runner.harness.crm.tools import TOOLS, execute


@dataclass(frozen=True)
class CallRecord:
    """One tool call the agent made, as scoring needs it."""

    tool: str
    args: Any
    ok: bool


@dataclass
class Scores:
    success: bool
    state_match: bool
    tool_selection: float
    args_exact: float
    args_normalized: float
    turn_tool_selection: list[float] = field(default_factory=list)
    gold_args: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def expected_state(conn: psycopg.Connection[Any], conv: Conversation) -> dict[str, Any]:
    """Replay the gold calls on a fresh seed and digest the result."""
    if conv.expected_state is not None:
        return conv.expected_state
    replay_gold(conn, conv)
    return db.digest(conn)


def replay_gold(conn: psycopg.Connection[Any], conv: Conversation) -> None:
    """The conversation's seed, then its gold calls: the state a perfect agent leaves."""
    db.reset(conn, conv.seed)
    for turn in conv.turns:
        for call in turn.gold_calls:
            out = execute(conn, call.tool, call.args)
            if out.ok == call.expect_error:
                raise BadRecord(
                    f"{conv.id}: gold call {call.tool}({call.args}) "
                    f"{'succeeded' if out.ok else 'failed'} unexpectedly: {out.error}"
                )


def made_gold_writes(conv: Conversation, calls_per_turn: list[list[CallRecord]]) -> bool:
    """The agent made the gold calls that write, in order, with the same arguments and outcomes (a
    failed write may still take identity values). Reads change nothing, so any number of them, gold
    or not, may come between. Arguments compare as the tool validated them, which is what reaches
    SQL: 29100000.0 and 29100000 are one amount (every numeric column has a fixed scale, so equal
    decimals store alike: tests/harness/crm/test_expectations.py holds the schema to that)."""

    def writes(calls: list[tuple[str, Any, bool]]) -> list[tuple[str, Any, bool]]:
        return [(t, _as_validated(t, a), ok) for t, a, ok in calls if t in TOOLS and TOOLS[t].writes]

    gold = writes([(g.tool, g.args, not g.expect_error) for t in conv.turns for g in t.gold_calls])
    made = writes([(c.tool, c.args, c.ok) for turn in calls_per_turn for c in turn])
    return made == gold


def _as_validated(tool: str, args: Any) -> Any:
    try:
        return TOOLS[tool].args.model_validate(json.loads(args) if isinstance(args, str) else args)
    except (ValidationError, ValueError):  # refused before SQL: compare what was sent, as JSON
        return json.dumps(args, sort_keys=True, default=str)


def _f1(gold: Counter[str], got: Counter[str]) -> float:
    if not gold and not got:
        return 1.0
    overlap = sum((gold & got).values())
    if overlap == 0:
        return 0.0
    p, r = overlap / sum(got.values()), overlap / sum(gold.values())
    return 2 * p * r / (p + r)


def normalize(v: Any) -> Any:
    """Equal after normalising: case, spacing, number formatting, dates."""
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int | float | Decimal):
        return Decimal(str(v)).normalize()
    if isinstance(v, str):
        s = " ".join(v.split()).casefold()
        try:
            return Decimal(s.replace(",", "").lstrip("$")).normalize()
        except InvalidOperation:
            pass
        try:
            return dt.date.fromisoformat(s).isoformat()
        except ValueError:
            return re.sub(r"[.\s]+$", "", s)
    if isinstance(v, list):
        return [normalize(x) for x in v]
    if isinstance(v, dict):
        return {k: normalize(x) for k, x in v.items()}
    return v


def _arg_matches(gold: GoldCall, call: CallRecord) -> tuple[int, int]:
    args = call.args if isinstance(call.args, dict) else {}
    exact = sum(1 for k, v in gold.args.items() if k in args and (args[k] == v))
    norm = sum(1 for k, v in gold.args.items() if k in args and normalize(args[k]) == normalize(v))
    return exact, norm


def score(
    conv: Conversation,
    calls_per_turn: list[list[CallRecord]],
    final_state: dict[str, Any] | None,
    expected: dict[str, Any] | None,
    *,
    completed: bool = True,
) -> Scores:
    """Scores for one conversation. `completed` is False when a turn hit its step limit or failed."""
    turn_scores: list[float] = []
    gold_args = exact = norm = 0
    for i, turn in enumerate(conv.turns):
        calls = calls_per_turn[i] if i < len(calls_per_turn) else []
        if turn.expect != "tools":
            turn_scores.append(0.0 if any(TOOLS[c.tool].writes for c in calls if c.tool in TOOLS) else 1.0)
            continue
        wanted = [g for g in turn.gold_calls if not g.expect_error]
        turn_scores.append(_f1(Counter(g.tool for g in wanted), Counter(c.tool for c in calls if c.ok)))
        for g in wanted:
            gold_args += len(g.args)
            candidates = [_arg_matches(g, c) for c in calls if c.tool == g.tool]
            if candidates:
                best = max(candidates, key=lambda t: (t[1], t[0]))
                exact, norm = exact + best[0], norm + best[1]
    state_match = final_state is not None and expected is not None and final_state == expected
    return Scores(
        success=bool(
            completed
            and state_match
            and all(s == 1.0 for s, t in zip(turn_scores, conv.turns, strict=True) if t.expect != "tools")
        ),
        state_match=state_match,
        tool_selection=sum(turn_scores) / len(turn_scores) if turn_scores else 1.0,
        args_exact=exact / gold_args if gold_args else 1.0,
        args_normalized=norm / gold_args if gold_args else 1.0,
        turn_tool_selection=turn_scores,
        gold_args=gold_args,
    )
