"""Every tool against a real PostgreSQL (docker and local backends), including hostile arguments."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from runner.harness.crm import db
from runner.harness.crm.tools import TOOLS, anthropic_tools, execute, openai_tools
from runner.sandbox.base import Sandbox

SEED = {
    "accounts": [{"id": 1, "name": "Northwind Traders", "industry": "retail", "billing_city": "Berlin"},
                 {"id": 2, "name": "Northwind Logistics", "industry": "logistics", "billing_city": "Oslo"}],
    "contacts": [{"id": 1, "account_id": 1, "first_name": "Ava", "last_name": "Moreau", "email": "ava@nw.io"}],
    "opportunities": [{"id": 1, "account_id": 1, "name": "NW Renewal", "amount": 50000, "close_date": "2026-06-30",
                       "stage": "proposal", "probability": 50}],
    "cases": [{"id": 1, "account_id": 2, "subject": "login failures", "priority": "high", "status": "open"}],
}

# One valid call per tool: each must succeed on SEED.
VALID: dict[str, dict[str, Any]] = {
    "search_accounts": {"query": "northwind"},
    "get_account": {"account_id": 1},
    "create_account": {"name": "Cedar Labs", "industry": "software", "billing_city": "Lyon",
                       "owner_email": "marco.ruiz@example.com"},
    "update_account": {"account_id": 1, "type": "customer", "annual_revenue": 1200000},
    "search_contacts": {"query": "ava"},
    "create_contact": {"account_id": 2, "first_name": "Kofi", "last_name": "Okafor", "email": "kofi@nw.io"},
    "update_contact": {"contact_id": 1, "title": "CTO"},
    "search_opportunities": {"account_id": 1},
    "create_opportunity": {"account_id": 2, "name": "Oslo Pilot", "amount": 12000, "close_date": "2027-01-31"},
    "update_opportunity_stage": {"opportunity_id": 1, "stage": "negotiation"},
    "update_opportunity": {"opportunity_id": 1, "amount": 65000.5},
    "search_products": {"query": "seat"},
    "create_quote": {"opportunity_id": 1, "name": "Q1", "lines": [{"sku": "CRM-PRO", "quantity": 10,
                                                                   "discount_pct": 10}]},
    "create_case": {"account_id": 1, "subject": "export times out", "priority": "urgent", "contact_id": 1},
    "search_cases": {"status": "open"},
    "update_case_status": {"case_id": 1, "status": "resolved", "resolution": "fixed"},
    "log_activity": {"kind": "call", "subject": "pricing", "related_type": "opportunity", "related_id": 1},
}


@pytest.fixture
def crm(any_sandbox: Sandbox) -> psycopg.Connection[Any]:
    conn = db.connect(any_sandbox.dsn("crm"))
    db.reset(conn, SEED)
    return conn


def test_at_least_twelve_tools_in_both_formats() -> None:
    assert len(TOOLS) >= 12 and set(VALID) == set(TOOLS)
    a, o = anthropic_tools(), openai_tools()
    assert [t["name"] for t in a] == [t["function"]["name"] for t in o] == list(TOOLS)
    for t in a:
        assert t["input_schema"]["type"] == "object" and "$defs" not in json.dumps(t)


@pytest.mark.parametrize("name", sorted(VALID))
def test_every_tool_runs(crm: psycopg.Connection[Any], name: str) -> None:
    out = execute(crm, name, VALID[name])
    assert out.ok, out.error
    json.loads(out.to_content())


def test_results_are_right(crm: psycopg.Connection[Any]) -> None:
    found = execute(crm, "search_accounts", {"query": "Northwind", "city": "oslo"}).result
    assert [r["id"] for r in found["results"]] == [2]
    quote = execute(crm, "create_quote", VALID["create_quote"]).result
    assert quote["id"] == 1001 and quote["total"] == 810.0  # 10 x 90.00 less 10 %
    stage = execute(crm, "update_opportunity_stage", {"opportunity_id": 1, "stage": "closed_won"}).result
    assert stage["probability"] == 100


@pytest.mark.parametrize("name,args,kind", [
    ("drop_table", {}, "unknown_tool"),
    ("create_contact", {"account_id": "abc", "first_name": "A", "last_name": "B"}, "invalid_arguments"),
    ("create_contact", {"account_id": 1, "first_name": "A"}, "invalid_arguments"),
    ("create_contact", {"account_id": 1, "first_name": "A", "last_name": "B", "sql": "x"}, "invalid_arguments"),
    ("create_contact", "{not json", "invalid_arguments"),
    ("create_contact", {"account_id": 999, "first_name": "A", "last_name": "B"}, "not_found"),
    ("create_contact", {"account_id": 1, "first_name": "A", "last_name": "B", "email": "ava@nw.io"},
     "constraint_violation"),
    ("create_contact", {"account_id": 1, "first_name": "A", "last_name": "B", "email": "no-at-sign"},
     "constraint_violation"),
    ("update_opportunity_stage", {"opportunity_id": 1, "stage": "won"}, "invalid_arguments"),
    ("create_quote", {"opportunity_id": 1, "name": "Q", "lines": [{"sku": "NOPE", "quantity": 1}]}, "not_found"),
    ("update_contact", {"contact_id": 1}, "invalid_arguments"),
    ("update_case_status", {"case_id": 4242, "status": "closed"}, "not_found"),
])
def test_bad_calls_are_structured_errors_and_the_connection_survives(
        crm: psycopg.Connection[Any], name: str, args: Any, kind: str) -> None:
    before = db.digest(crm)
    out = execute(crm, name, args)
    assert not out.ok and out.error is not None and out.error["type"] == kind
    assert db.digest(crm) == before  # nothing half-done
    assert execute(crm, "search_accounts", {}).ok  # the connection is still usable


INJECTIONS = ["'; DROP TABLE accounts; --", "x' OR '1'='1", "\\'; DELETE FROM contacts; --", "%", "_",
              "Robert'); DROP TABLE contacts;--", "$$; TRUNCATE accounts; $$", "\x00"[:0] + "é'\"\\"]


@pytest.mark.parametrize("payload", INJECTIONS)
def test_injection_in_every_string_argument_is_stored_literally(crm: psycopg.Connection[Any], payload: str) -> None:
    for name, args in VALID.items():
        tool = TOOLS[name]
        props = tool.json_schema()["properties"]
        for field, schema in props.items():
            types = {schema.get("type")} | {s.get("type") for s in schema.get("anyOf", [])}
            if "string" not in types or "enum" in schema or any("enum" in s for s in schema.get("anyOf", [])):
                continue
            if schema.get("format") == "date" or any(s.get("format") == "date" for s in schema.get("anyOf", [])):
                continue
            db.reset(crm, SEED)
            out = execute(crm, name, {**args, field: payload})
            # stored literally or rejected as a value -- never executed
            counts = crm.execute("SELECT (SELECT count(*) FROM accounts), (SELECT count(*) FROM contacts)").fetchone()
            assert counts is not None and counts[0] >= 2 and counts[1] >= 1, (name, field)
            if out.ok and name.startswith(("create_", "update_")) and field in out.result:
                assert out.result[field] == payload, (name, field)
    # LIKE wildcards in a search match literally
    assert execute(crm, "search_accounts", {"query": "%"}).result["count"] == 0


def test_reset_is_deterministic_and_isolates_conversations(crm: psycopg.Connection[Any]) -> None:
    first = execute(crm, "create_account", VALID["create_account"]).result
    d1 = db.digest(crm)
    db.reset(crm, SEED)
    assert db.digest(crm) != d1  # the previous conversation's record is gone
    again = execute(crm, "create_account", VALID["create_account"]).result
    assert first["id"] == again["id"] == 1001
    assert db.digest(crm) == d1
