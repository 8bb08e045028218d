"""The expected final state without a replay when the agent's writes were the gold's, with one
(rolled back, the agent's state kept) otherwise: both ways give the state the gold replay gives."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from runner.harness.crm import db
from runner.harness.crm.dataset import Conversation, load_conversations
from runner.harness.crm.episode import Expectations
from runner.harness.crm.scoring import CallRecord, expected_state, made_gold_writes
from runner.harness.crm.tools import TOOLS, execute
from runner.sandbox.base import Sandbox

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "crm-sample.jsonl"


def _gold(conv: Conversation) -> list[list[CallRecord]]:
    return [[CallRecord(g.tool, g.args, not g.expect_error) for g in t.gold_calls] for t in conv.turns]


def _writing(convs: list[Conversation]) -> Conversation:
    return next(c for c in convs if sum(TOOLS[g.tool].writes for t in c.turns for g in t.gold_calls) >= 2)


def test_the_gold_writes_in_order_with_any_reads_between() -> None:
    conv = _writing(load_conversations(SAMPLE))
    gold = _gold(conv)
    assert made_gold_writes(conv, gold)
    lookup = CallRecord("search_accounts", {"query": "anything"}, True)
    assert made_gold_writes(conv, [[lookup, *turn, lookup] for turn in gold])
    assert made_gold_writes(conv, [[c for c in turn if TOOLS[c.tool].writes] for turn in gold])  # no reads at all
    writes = [c for turn in gold for c in turn if TOOLS[c.tool].writes]
    assert not made_gold_writes(conv, [writes[:-1]])  # one missing
    assert not made_gold_writes(conv, [list(reversed(writes))])  # out of order
    assert not made_gold_writes(conv, [[*writes, writes[-1]]])  # one made twice
    failed = CallRecord(writes[0].tool, writes[0].args, not writes[0].ok)
    assert not made_gold_writes(conv, [[failed, *writes[1:]]])  # same call, other outcome


def _as_floats(calls: list[list[CallRecord]]) -> list[list[CallRecord]]:
    """Every whole number written as a float, as some models send them (29100000.0)."""
    def f(v: Any) -> Any:
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v
    return [[CallRecord(c.tool, {k: f(v) for k, v in c.args.items()}, c.ok) for c in turn] for turn in calls]


def test_arguments_compare_as_the_tool_validated_them() -> None:
    conv = _writing(load_conversations(SAMPLE))
    gold = _gold(conv)
    assert made_gold_writes(conv, _as_floats(gold))  # 2.0 is the id 2; 5000.0 the amount 5000
    writes = [c for turn in gold for c in turn if TOOLS[c.tool].writes]
    i, k = next((i, k) for i, c in enumerate(writes) for k, v in c.args.items()
                if isinstance(v, int) and not isinstance(v, bool))
    nudged = CallRecord(writes[i].tool, {**writes[i].args, k: writes[i].args[k] + 0.5}, writes[i].ok)
    assert not made_gold_writes(conv, [[*writes[:i], nudged, *writes[i + 1:]]])
    unparsable = CallRecord(writes[0].tool, "{not json", False)
    assert not made_gold_writes(conv, [[unparsable, *writes[1:]]])


def test_every_numeric_column_has_a_fixed_scale() -> None:
    """What lets equal decimals (5000 and 5000.0) count as the same write: both store as 5000.00."""
    schema = (Path(__file__).resolve().parents[3] / "runner" / "harness" / "crm" / "schema.sql").read_text()
    numerics = re.findall(r"\bnumeric\b(\s*\([^)]*\))?", schema, flags=re.IGNORECASE)
    assert numerics, "the CRM schema has numeric columns"
    assert all(re.fullmatch(r"\s*\(\s*\d+\s*,\s*\d+\s*\)", n) for n in numerics), numerics


def _run_as_agent(conn: Any, conv: Conversation, calls: list[list[CallRecord]]) -> dict[str, Any]:
    db.reset(conn, conv.seed)
    for turn in calls:
        for c in turn:
            execute(conn, c.tool, c.args)
    return db.digest(conn)


def test_both_ways_reach_the_replayed_state_and_keep_the_agents(any_sandbox: Sandbox) -> None:
    conn = db.connect(any_sandbox.dsn("crm"))
    convs = load_conversations(SAMPLE)
    replayed = {c.id: expected_state(conn, c) for c in convs}
    shortcut, wrong = Expectations(), Expectations()
    for conv in convs:
        gold = _gold(conv)
        as_floats = _as_floats(gold)  # no replay for these either: the state must still be the replayed one
        assert made_gold_writes(conv, as_floats), conv.id
        final = _run_as_agent(conn, conv, as_floats)
        assert shortcut.after(conn, conv, as_floats, final) == replayed[conv.id], conv.id
        writes = [c for turn in gold for c in turn if TOOLS[c.tool].writes]
        if not writes:
            continue
        partial = [writes[:-1]]  # the last write left out: the state differs, the replay must run
        final = _run_as_agent(conn, conv, partial)
        assert final != replayed[conv.id], conv.id
        assert wrong.after(conn, conv, partial, final) == replayed[conv.id], conv.id
        assert db.digest(conn) == final, conv.id  # the replay was rolled back: the agent's state is there
        assert wrong.known(conv) == replayed[conv.id]


class _Store:
    def __init__(self) -> None:
        self.states: dict[str, dict[str, Any]] = {}

    def get_state(self, key: str) -> dict[str, Any] | None:
        return self.states.get(key)

    def put_state(self, key: str, value: dict[str, Any]) -> None:
        self.states[key] = value


def test_known_states_come_from_the_record_memory_or_the_shared_store() -> None:
    conv = _writing(load_conversations(SAMPLE))
    store = _Store()
    first = Expectations(store)
    assert first.known(conv) is None
    final = {"accounts": [1, "x"]}
    first.after(None, conv, _gold(conv), final)  # type: ignore[arg-type]  # no replay: no database needed
    assert first.known(conv) == final
    assert Expectations(store).known(conv) == final  # another worker, the same store
    given = conv.model_copy(update={"expected_state": {"from": "the record"}})
    assert Expectations().known(given) == {"from": "the record"}
