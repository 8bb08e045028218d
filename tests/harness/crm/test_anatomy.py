"""Failure anatomy: which call and argument were wrong, and how the final database differs, row by row.
Before, a result said only `state_match: false`; finding account 1 used instead of account 2 took
opening the dataset by hand."""

from __future__ import annotations

import json
from pathlib import Path

from runner.harness.crm import db
from runner.harness.crm.anatomy import anatomy, arg_diffs, table_diff
from runner.harness.crm.dataset import Conversation, load_conversations
from runner.harness.crm.scoring import CallRecord, expected_state
from runner.harness.crm.tools import execute
from runner.sandbox.base import Sandbox

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "crm-sample.jsonl"


def test_argument_differences_ignore_formatting_and_name_what_differs() -> None:
    assert arg_diffs({"amount": 5000, "name": "Acme  Corp"}, {"amount": "5,000", "name": "acme corp"}) == []
    assert arg_diffs({"account_id": 2, "stage": "proposal"}, {"account_id": 1, "limit": 5}) == [
        {"arg": "account_id", "expected": 2, "got": 1}, {"arg": "stage", "expected": "proposal", "got": "(missing)"},
        {"arg": "limit", "expected": "(not given)", "got": 5}]


def test_rows_are_missing_extra_or_changed() -> None:
    expected = [{"id": 1, "name": "Ada", "city": "Leeds", "kind": "a"}, {"id": 2, "name": "Bo", "city": "Oslo",
                                                                          "kind": "b"}]
    actual = [{"id": 1, "name": "Ada", "city": "York", "kind": "a"}, {"id": 9, "name": "Zed", "city": "Rome",
                                                                       "kind": "z"}]
    d = table_diff(expected, actual)
    assert d is not None
    assert d["changed"] == [{"id": 1, "columns": {"city": {"expected": "Leeds", "got": "York"}}}]
    assert [r["name"] for r in d["missing"]] == ["Bo"] and [r["name"] for r in d["extra"]] == ["Zed"]
    assert table_diff(expected, [dict(r, id=r["id"] + 100) for r in reversed(expected)]) is None  # ids ignored


def _table(key: str) -> str:
    return "opportunities" if key == "opportunity_id" else key.removesuffix("_id") + "s"


def _wrong_target(conv: Conversation) -> tuple[str, str, int, int] | None:
    """(tool, id argument, right id, another seed row's id) of the conversation's first update of a seed row."""
    for t in conv.turns:
        for g in t.gold_calls:
            if g.expect_error or not g.tool.startswith("update"):
                continue
            for k, v in g.args.items():
                others = [r["id"] for r in conv.seed.get(_table(k), []) if r["id"] != v] if k.endswith("_id") else []
                if isinstance(v, int) and v < 1001 and others:
                    return g.tool, k, v, others[0]
    return None


def test_a_call_on_the_wrong_record_is_named_with_the_row_it_changed(shared_local_sandbox: Sandbox) -> None:
    conn = db.connect(shared_local_sandbox.dsn("crm"))
    conv, (tool, key, right, other) = next((c, w) for c in load_conversations(SAMPLE)
                                           if (w := _wrong_target(c)) is not None)
    expected_state(conn, conv)  # as a run does first
    db.reset(conn, conv.seed)
    calls: list[list[CallRecord]] = []
    done = False
    for turn in conv.turns:  # the gold calls, but that update goes to the other record
        calls.append([])
        for g in turn.gold_calls:
            args = dict(g.args)
            if not done and g.tool == tool and args.get(key) == right:
                args[key], done = other, True
            out = execute(conn, g.tool, args)
            calls[-1].append(CallRecord(g.tool, args, out.ok))
    before = db.digest(conn)
    why = anatomy(conn, conv, calls, state_match=False)
    assert db.digest(conn) == before  # the agent's state is left as it was (runner debug shows it)
    made = [e for t in why["turns"] for e in t["expected"] if e["tool"] == tool and e["wrong_args"]]
    assert made[0]["wrong_args"] == [{"arg": key, "expected": right, "got": other}], made
    assert not all(t["right"] for t in why["turns"])
    diff = why["state"][_table(key)]
    assert {c["id"] for c in diff["changed"]} == {right, other}, diff  # one changed by mistake, one not changed
    json.dumps(why)  # it goes into the result as it is
