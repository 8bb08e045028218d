"""The committed sample: every gold call behaves as labelled, and states are deterministic."""

from __future__ import annotations

from pathlib import Path

import pytest
from psycopg import sql

from runner.harness.crm import db
from runner.harness.crm.dataset import load_conversations
from runner.harness.crm.scoring import expected_state
from runner.harness.crm.tools import execute
from runner.sandbox.base import Sandbox

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "crm-sample.jsonl"


def test_sample_is_about_sixty_varied_conversations() -> None:
    convs = load_conversations(SAMPLE)
    assert 50 <= len(convs) <= 80
    tags = {t for c in convs for t in c.tags}
    assert {"ambiguous_reference", "clarify", "refuse", "close_case_by_number", "add_two_contacts"} <= tags
    assert {len(c.turns) for c in convs} >= {1, 2, 3, 4}


def test_gold_calls_replay_to_the_expected_state(any_sandbox: Sandbox) -> None:
    conn = db.connect(any_sandbox.dsn("crm"))
    for conv in load_conversations(SAMPLE):
        db.reset(conn, conv.seed)
        before = db.digest(conn)
        for turn in conv.turns:
            for call in turn.gold_calls:
                out = execute(conn, call.tool, call.args)
                assert out.ok != call.expect_error, (conv.id, call, out.error)
        final = db.digest(conn)
        writes = any(c.tool.startswith(("create", "update", "log")) and not c.expect_error
                     for t in conv.turns for c in t.gold_calls)
        assert (final != before) == writes, conv.id
        assert expected_state(conn, conv) == final


@pytest.mark.docker
def test_same_conversation_same_ids_and_digest_on_two_sandboxes(docker_sandbox: Sandbox,
                                                                local_sandbox: Sandbox) -> None:
    conv = next(c for c in load_conversations(SAMPLE) if any(
        g.tool.startswith("create") for t in c.turns for g in t.gold_calls))
    outs = []
    for sb in (docker_sandbox, local_sandbox):
        conn = db.connect(sb.dsn("crm"))
        db.reset(conn, conv.seed)
        ids = [execute(conn, g.tool, g.args).result for t in conv.turns for g in t.gold_calls if not g.expect_error]
        outs.append(([r.get("id") for r in ids if isinstance(r, dict)], db.digest(conn)))
    assert outs[0] == outs[1]


# The digest as it was written first: one dynamic query per table. The function is one static
# query now (its plan kept by the session); it must say the same of every state.
_PER_TABLE = ("SELECT count(*), coalesce(md5(string_agg(h, ',' ORDER BY h)), '') FROM "
              "(SELECT md5((to_jsonb(r) - 'id' - 'created_at')::text) AS h FROM {} r) x")


def test_the_digest_equals_the_per_table_reference_on_every_gold_state(any_sandbox: Sandbox) -> None:
    conn = db.connect(any_sandbox.dsn("crm"))
    for conv in load_conversations(SAMPLE):
        db.reset(conn, conv.seed)
        for turn in conv.turns:
            for call in turn.gold_calls:
                execute(conn, call.tool, call.args)
        reference = {}
        for table in ("accounts", "contacts", "opportunities", "quotes", "quote_lines", "cases", "activities"):
            n, h = conn.execute(sql.SQL(_PER_TABLE).format(sql.Identifier(table))).fetchone()  # type: ignore[misc]
            reference[table] = {"rows": n, "hash": h}
        assert db.digest(conn) == reference, conv.id
