"""Why a conversation failed, in the terms its author wrote it: per turn, the expected calls against the
calls the agent made, argument by argument; and the final database against the expected one, row by
row (missing, extra, and changed columns of rows that are the same record).

Built only for conversations that did not succeed, so a successful result stays small. Rows are
compared as the score compares them (`sandbox_digest`: without `id` and `created_at`), so the diff is
empty exactly when `state_match` is true.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg
from psycopg import sql

from runner.harness.crm.dataset import SEED_TABLES, Conversation, GoldCall
from runner.harness.crm.scoring import CallRecord, normalize, replay_gold
from runner.harness.crm.tools import TOOLS

IGNORED = ("id", "created_at")  # as sandbox_digest: assigned by the database, not by the agent
MAX_ROWS_SHOWN = 20


def arg_diffs(gold: dict[str, Any], got: Any) -> list[dict[str, Any]]:
    """Each argument that differs after normalising (case, spacing, number and date formats)."""
    got = got if isinstance(got, dict) else {}
    out = [
        {"arg": k, "expected": v, "got": got.get(k, "(missing)")}
        for k, v in gold.items()
        if k not in got or normalize(got[k]) != normalize(v)
    ]
    out += [{"arg": k, "expected": "(not given)", "got": v} for k, v in got.items() if k not in gold]
    return out


def _match(g: GoldCall, calls: list[CallRecord], used: set[int]) -> dict[str, Any]:
    best: tuple[int, list[dict[str, Any]]] | None = None
    for j, c in enumerate(calls):
        if j in used or c.tool != g.tool:
            continue
        diffs = arg_diffs(g.args, c.args)
        if best is None or len(diffs) < len(best[1]):
            best = (j, diffs)
    if best is None:
        return {"tool": g.tool, "args": g.args, "made": False}
    used.add(best[0])
    return {"tool": g.tool, "args": g.args, "made": True, "ok": calls[best[0]].ok, "wrong_args": best[1]}


def call_diff(conv: Conversation, calls_per_turn: list[list[CallRecord]]) -> list[dict[str, Any]]:
    """Per turn: each expected call (made or not, its wrong arguments) and the calls nobody expected."""
    turns = []
    for i, turn in enumerate(conv.turns):
        calls = calls_per_turn[i] if i < len(calls_per_turn) else []
        used: set[int] = set()
        expected = [_match(g, calls, used) for g in turn.gold_calls if not g.expect_error]
        unexpected = [
            {
                "tool": c.tool,
                "args": c.args,
                "ok": c.ok,
                "writes": bool(TOOLS.get(c.tool) and TOOLS[c.tool].writes),
            }
            for j, c in enumerate(calls)
            if j not in used
        ]
        right = all(e["made"] and not e["wrong_args"] for e in expected) and not any(
            u["writes"] and u["ok"] for u in unexpected
        )
        turns.append(
            {
                "turn": i + 1,
                "user": turn.user,
                "expect": turn.expect,
                "right": right,
                "expected": expected,
                "unexpected": unexpected,
            }
        )
    return turns


def rows(conn: psycopg.Connection[Any]) -> dict[str, list[dict[str, Any]]]:
    """Every seedable table's rows, ordered by id."""
    out = {}
    for t in SEED_TABLES:
        q = sql.SQL("SELECT to_jsonb(r) FROM {} r ORDER BY id").format(sql.Identifier(t))
        out[t] = [r[0] for r in conn.execute(q).fetchall()]
    return out


def _key(row: dict[str, Any]) -> str:
    return repr(sorted((k, normalize(v)) for k, v in row.items() if k not in IGNORED))


def _same_record(a: dict[str, Any], b: dict[str, Any]) -> int:
    """How many columns two rows share (the pairing of a missing row with an extra one)."""
    return sum(1 for k, v in a.items() if k not in IGNORED and normalize(b.get(k)) == normalize(v))


def _unmatched(rows: list[dict[str, Any]], others: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with no equal row left among `others` (as multisets: duplicates count)."""
    left = Counter(map(_key, others))
    out = []
    for r in rows:
        k = _key(r)
        if left[k] > 0:
            left[k] -= 1
        else:
            out.append(r)
    return out


def table_diff(expected: list[dict[str, Any]], actual: list[dict[str, Any]]) -> dict[str, Any] | None:
    missing, extra = _unmatched(expected, actual), _unmatched(actual, expected)
    changed = []
    for m in list(missing):
        columns = [k for k in m if k not in IGNORED]
        shared, best = max(((_same_record(m, x), x) for x in extra), key=lambda t: t[0], default=(0, None))
        if best is not None and shared * 2 >= len(columns):  # the same record, some columns wrong
            missing.remove(m)
            extra.remove(best)
            changed.append(
                {
                    "id": best.get("id"),
                    "columns": {
                        k: {"expected": m[k], "got": best.get(k)}
                        for k in columns
                        if normalize(best.get(k)) != normalize(m[k])
                    },
                }
            )
    if not (missing or extra or changed):
        return None
    return {
        "missing": missing[:MAX_ROWS_SHOWN],
        "extra": extra[:MAX_ROWS_SHOWN],
        "changed": changed[:MAX_ROWS_SHOWN],
    }


def state_diff(conn: psycopg.Connection[Any], conv: Conversation) -> dict[str, Any]:
    """The final state against the expected one, per table with a difference. The expected rows come
    from replaying the gold calls inside a transaction that is rolled back: the agent's state stays
    in the database (`runner debug` leaves it up for inspection)."""
    actual = rows(conn)
    with conn.transaction(force_rollback=True):
        replay_gold(conn, conv)
        expected = rows(conn)
    return {t: d for t in SEED_TABLES if (d := table_diff(expected[t], actual[t])) is not None}


def anatomy(
    conn: psycopg.Connection[Any],
    conv: Conversation,
    calls_per_turn: list[list[CallRecord]],
    state_match: bool,
) -> dict[str, Any]:
    return {
        "turns": call_diff(conv, calls_per_turn),
        "state": None if state_match or conv.expected_state is not None else state_diff(conn, conv),
    }
