"""The agent's tools: search and update the pipeline and the support queue. Each answers JSON text,
{"ok": true, "result": ...} or {"ok": false, "error": {"type", "message"}}, for the model to read."""

from __future__ import annotations

import json
from typing import Any

import psycopg
from psycopg.rows import dict_row

STAGES = ["prospecting", "qualification", "proposal", "negotiation", "closed_won", "closed_lost"]
PROBABILITY = {"prospecting": 10, "qualification": 25, "proposal": 50, "negotiation": 75, "closed_won": 100,
               "closed_lost": 0}
STATUSES = ["new", "open", "pending", "resolved", "closed"]


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


TOOLS = [
    {"name": "search_opportunities", "description": "Search opportunities by name or stage.",
     "input_schema": _schema({"query": {"type": "string", "description": "Part of the opportunity name"},
                              "stage": {"type": "string", "enum": STAGES}}, [])},
    {"name": "update_opportunity_stage", "description": "Move an opportunity to a stage; probability follows it.",
     "input_schema": _schema({"opportunity_id": {"type": "integer"}, "stage": {"type": "string", "enum": STAGES}},
                             ["opportunity_id", "stage"])},
    {"name": "search_cases", "description": "Search support cases by subject or status.",
     "input_schema": _schema({"query": {"type": "string", "description": "Part of the subject"},
                              "status": {"type": "string", "enum": STATUSES}}, [])},
    {"name": "update_case_status", "description": "Change a case's status, with a resolution note if closing.",
     "input_schema": _schema({"case_id": {"type": "integer"}, "status": {"type": "string", "enum": STATUSES},
                              "resolution": {"type": "string"}}, ["case_id", "status"])},
]


class Failed(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _search(conn: psycopg.Connection[Any], sql: str, args: dict[str, Any], column: str) -> dict[str, Any]:
    query = f"%{args['query']}%" if args.get("query") else None
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(sql, {"q": query, "v": args.get(column)})
        rows = [{k: (float(v) if k == "amount" else str(v) if k == "close_date" else v) for k, v in r.items()}
                for r in cur.fetchall()]
    return {"count": len(rows), "results": rows}


def _update(conn: psycopg.Connection[Any], sql: str, values: tuple[Any, ...], what: str, ident: int) -> Any:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(sql, values)
        row = cur.fetchone()
    if row is None:
        raise Failed("not_found", f"{what} {ident} does not exist")
    return {k: (float(v) if k == "amount" else str(v) if k == "close_date" else v) for k, v in row.items()}


def _call(conn: psycopg.Connection[Any], name: str, a: dict[str, Any]) -> Any:
    if name == "search_opportunities":
        return _search(conn, "SELECT id, account, name, stage, amount, close_date, probability FROM opportunities "
                             "WHERE (%(q)s::text IS NULL OR name ILIKE %(q)s) AND (%(v)s::text IS NULL OR stage = "
                             "%(v)s) ORDER BY id", a, "stage")
    if name == "search_cases":
        return _search(conn, "SELECT id, account, subject, priority, status FROM cases WHERE (%(q)s::text IS NULL "
                             "OR subject ILIKE %(q)s) AND (%(v)s::text IS NULL OR status = %(v)s) ORDER BY id", a,
                       "status")
    if name == "update_opportunity_stage":
        if a.get("stage") not in PROBABILITY:
            raise Failed("invalid_arguments", f"stage must be one of {', '.join(STAGES)}")
        return _update(conn, "UPDATE opportunities SET stage = %s, probability = %s WHERE id = %s RETURNING *",
                       (a["stage"], PROBABILITY[a["stage"]], a["opportunity_id"]), "opportunity", a["opportunity_id"])
    if name == "update_case_status":
        if a.get("status") not in STATUSES:
            raise Failed("invalid_arguments", f"status must be one of {', '.join(STATUSES)}")
        return _update(conn, "UPDATE cases SET status = %s, resolution = %s WHERE id = %s RETURNING *",
                       (a["status"], a.get("resolution"), a["case_id"]), "case", a["case_id"])
    raise Failed("unknown_tool", f"no tool named {name}")


def run_tool(conn: psycopg.Connection[Any], name: str, args: dict[str, Any]) -> dict[str, Any]:
    try:
        return {"ok": True, "result": _call(conn, name, args)}
    except Failed as e:
        return {"ok": False, "error": {"type": e.kind, "message": str(e)}}
    except KeyError as e:
        return {"ok": False, "error": {"type": "invalid_arguments", "message": f"missing argument {e.args[0]}"}}


def as_text(outcome: dict[str, Any]) -> str:
    return json.dumps(outcome, sort_keys=True)
