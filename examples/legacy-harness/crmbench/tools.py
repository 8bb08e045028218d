"""The agent's tools: plain SQL against the CRM, parameters always bound."""

from __future__ import annotations

from typing import Any

import psycopg

TOOLS = [
    {"name": "find_account", "description": "Find accounts by name.",
     "input_schema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
    {"name": "add_contact", "description": "Add a contact to an account.",
     "input_schema": {"type": "object", "properties": {"account_id": {"type": "integer"}, "name": {"type": "string"},
                                                       "email": {"type": "string"}},
                      "required": ["account_id", "name", "email"]}},
    {"name": "move_deal", "description": "Move a deal to another stage.",
     "input_schema": {"type": "object", "properties": {"deal_id": {"type": "integer"},
                                                       "stage": {"type": "string",
                                                                 "enum": ["lead", "qualified", "proposal", "won",
                                                                          "lost"]}},
                      "required": ["deal_id", "stage"]}},
    {"name": "add_note", "description": "Attach a note to a deal.",
     "input_schema": {"type": "object", "properties": {"deal_id": {"type": "integer"}, "body": {"type": "string"}},
                      "required": ["deal_id", "body"]}},
]


def execute(conn: psycopg.Connection[Any], name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run one tool call inside a savepoint, so a failed call does not end the conversation's transaction."""
    try:
        with conn.transaction():
            if name == "find_account":
                rows = conn.execute("SELECT id, name, city FROM accounts WHERE name ILIKE %s ORDER BY id",
                                    [f"%{args['name']}%"]).fetchall()
                return {"ok": True, "accounts": [{"id": r[0], "name": r[1], "city": r[2]} for r in rows]}
            if name == "add_contact":
                row = conn.execute("INSERT INTO contacts (account_id, name, email) VALUES (%s, %s, %s) RETURNING id",
                                   [args["account_id"], args["name"], args["email"]]).fetchone()
                return {"ok": True, "id": row[0] if row else None}
            if name == "move_deal":
                n = conn.execute("UPDATE deals SET stage = %s WHERE id = %s", [args["stage"], args["deal_id"]]).rowcount
                return {"ok": n == 1, "updated": n}
            if name == "add_note":
                row = conn.execute("INSERT INTO notes (deal_id, body) VALUES (%s, %s) RETURNING id",
                                   [args["deal_id"], args["body"]]).fetchone()
                return {"ok": True, "id": row[0] if row else None}
            return {"ok": False, "error": f"unknown tool {name}"}
    except (psycopg.Error, KeyError) as e:
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}
