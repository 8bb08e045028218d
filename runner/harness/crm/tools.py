"""The CRM tools: each defined once (pydantic arguments -> JSON Schema -> Anthropic/OpenAI formats).

Model-supplied arguments are untrusted: they are validated against the tool's model, every value
reaches SQL as a bound parameter, and identifiers come only from our own field names. Failures go
back to the model as structured errors; each call runs in its own transaction, so a failed call
leaves the connection and the conversation usable.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from pydantic import ValidationError

from runner.harness.crm.tool_args import (
    STAGE_PROBABILITY,
    Args,
    CreateAccount,
    CreateCase,
    CreateContact,
    CreateOpportunity,
    CreateQuote,
    GetAccount,
    LogActivity,
    SearchAccounts,
    SearchCases,
    SearchContacts,
    SearchOpportunities,
    SearchProducts,
    UpdateAccount,
    UpdateCaseStatus,
    UpdateContact,
    UpdateOpportunity,
    UpdateOpportunityStage,
)

__all__ = [
    "STAGE_PROBABILITY",
    "TOOLS",
    "Tool",
    "ToolFailure",
    "ToolOutcome",
    "anthropic_tools",
    "execute",
    "openai_tools",
]


class ToolFailure(Exception):
    """A failure to report to the model (not found, bad reference): not a crash."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


# ---------------------------------------------------------------- helpers
Cur = psycopg.Cursor[dict[str, Any]]


def _like(text: str) -> str:
    """A LIKE pattern matching TEXT literally anywhere (its own % and _ escaped)."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _jsonable(v: Any) -> Any:
    if isinstance(v, Decimal):
        return float(v)
    if isinstance(v, dt.date | dt.datetime):
        return v.isoformat()
    return v


def _rows(cur: Cur) -> list[dict[str, Any]]:
    return [{k: _jsonable(v) for k, v in r.items()} for r in cur.fetchall()]


def _one(cur: Cur, what: str, ident: int) -> dict[str, Any]:
    rows = _rows(cur)
    if not rows:
        raise ToolFailure("not_found", f"{what} {ident} does not exist")
    return rows[0]


def _owner_id(cur: Cur, email: str | None) -> int | None:
    if email is None:
        return None
    cur.execute("SELECT id FROM users WHERE lower(email) = lower(%s) AND active", (email,))
    row = cur.fetchone()
    if row is None:
        raise ToolFailure("not_found", f"no active user with email {email}")
    return int(row["id"])


def _exists(cur: Cur, table: str, ident: int) -> None:
    cur.execute(sql.SQL("SELECT 1 FROM {} WHERE id = %s").format(sql.Identifier(table)), (ident,))
    if cur.fetchone() is None:
        raise ToolFailure("not_found", f"{table.rstrip('s')} {ident} does not exist")


def _search(
    cur: Cur, table: str, cols: str, filters: list[tuple[str, Any]], limit: int, order: str = "id"
) -> dict[str, Any]:
    where = [sql.SQL(cond) for cond, v in filters if v is not None]
    params = [v for _, v in filters if v is not None]
    q = sql.SQL("SELECT {} FROM {} {} ORDER BY {} LIMIT %s").format(
        sql.SQL(cols),
        sql.Identifier(table),
        sql.SQL("WHERE ") + sql.SQL(" AND ").join(where) if where else sql.SQL(""),
        sql.SQL(order),
    )
    cur.execute(q, [*params, limit])
    rows = _rows(cur)
    return {"count": len(rows), "results": rows}


def _insert(cur: Cur, table: str, values: dict[str, Any], returning: str = "*") -> dict[str, Any]:
    cols = [k for k, v in values.items() if v is not None]
    q = sql.SQL("INSERT INTO {} ({}) VALUES ({}) RETURNING {}").format(
        sql.Identifier(table),
        sql.SQL(", ").join(map(sql.Identifier, cols)),
        sql.SQL(", ").join(sql.Placeholder() * len(cols)),
        sql.SQL(returning),
    )
    cur.execute(q, [values[c] for c in cols])
    return _rows(cur)[0]


def _update(cur: Cur, table: str, ident: int, values: dict[str, Any]) -> dict[str, Any]:
    sets = {k: v for k, v in values.items() if v is not None}
    if not sets:
        raise ToolFailure("invalid_arguments", "nothing to update: give at least one field")
    q = sql.SQL("UPDATE {} SET {} WHERE id = %s RETURNING *").format(
        sql.Identifier(table), sql.SQL(", ").join(sql.SQL("{} = %s").format(sql.Identifier(k)) for k in sets)
    )
    cur.execute(q, [*sets.values(), ident])
    return _one(cur, table.rstrip("s"), ident)


def _no_ts(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "created_at"}


# ---------------------------------------------------------------- handlers
def search_accounts(cur: Cur, a: SearchAccounts) -> Any:
    return _search(
        cur,
        "accounts",
        "id, name, industry, type, billing_city, billing_country, owner_id",
        [
            ("lower(name) LIKE lower(%s)", _like(a.query) if a.query else None),
            ("industry = %s", a.industry),
            ("type = %s", a.type),
            ("lower(billing_city) = lower(%s)", a.city),
        ],
        a.limit,
    )


def get_account(cur: Cur, a: GetAccount) -> Any:
    cur.execute("SELECT * FROM accounts WHERE id = %s", (a.account_id,))
    acct = _no_ts(_one(cur, "account", a.account_id))
    cur.execute(
        "SELECT id, first_name, last_name, email, title FROM contacts WHERE account_id = %s ORDER BY id",
        (a.account_id,),
    )
    acct["contacts"] = _rows(cur)
    cur.execute(
        "SELECT id, name, stage, amount, close_date FROM opportunities WHERE account_id = %s ORDER BY id",
        (a.account_id,),
    )
    acct["opportunities"] = _rows(cur)
    cur.execute(
        "SELECT id, subject, priority, status FROM cases WHERE account_id = %s ORDER BY id", (a.account_id,)
    )
    acct["cases"] = _rows(cur)
    return acct


def create_account(cur: Cur, a: CreateAccount) -> Any:
    v = a.model_dump(exclude={"owner_email"})
    v["owner_id"] = _owner_id(cur, a.owner_email)
    return _no_ts(_insert(cur, "accounts", v))


def update_account(cur: Cur, a: UpdateAccount) -> Any:
    v = a.model_dump(exclude={"account_id", "owner_email"})
    v["owner_id"] = _owner_id(cur, a.owner_email)
    return _no_ts(_update(cur, "accounts", a.account_id, v))


def search_contacts(cur: Cur, a: SearchContacts) -> Any:
    return _search(
        cur,
        "contacts",
        "id, account_id, first_name, last_name, email, phone, title",
        [
            ("lower(first_name || ' ' || last_name) LIKE lower(%s)", _like(a.query) if a.query else None),
            ("account_id = %s", a.account_id),
            ("lower(email) = lower(%s)", a.email),
        ],
        a.limit,
    )


def create_contact(cur: Cur, a: CreateContact) -> Any:
    _exists(cur, "accounts", a.account_id)
    return _no_ts(_insert(cur, "contacts", a.model_dump()))


def update_contact(cur: Cur, a: UpdateContact) -> Any:
    return _no_ts(_update(cur, "contacts", a.contact_id, a.model_dump(exclude={"contact_id"})))


def search_opportunities(cur: Cur, a: SearchOpportunities) -> Any:
    return _search(
        cur,
        "opportunities",
        "id, account_id, name, stage, amount, close_date, probability",
        [
            ("account_id = %s", a.account_id),
            ("stage = %s", a.stage),
            ("lower(name) LIKE lower(%s)", _like(a.query) if a.query else None),
        ],
        a.limit,
    )


def create_opportunity(cur: Cur, a: CreateOpportunity) -> Any:
    _exists(cur, "accounts", a.account_id)
    v = a.model_dump()
    if v["probability"] is None:
        v["probability"] = STAGE_PROBABILITY[a.stage]
    return _no_ts(_insert(cur, "opportunities", v))


def update_opportunity_stage(cur: Cur, a: UpdateOpportunityStage) -> Any:
    prob = a.probability if a.probability is not None else STAGE_PROBABILITY[a.stage]
    return _no_ts(_update(cur, "opportunities", a.opportunity_id, {"stage": a.stage, "probability": prob}))


def update_opportunity(cur: Cur, a: UpdateOpportunity) -> Any:
    return _no_ts(_update(cur, "opportunities", a.opportunity_id, a.model_dump(exclude={"opportunity_id"})))


def search_products(cur: Cur, a: SearchProducts) -> Any:
    pat = _like(a.query) if a.query else None
    cur.execute(
        "SELECT id, sku, name, unit_price FROM products WHERE active AND (%(p)s::text IS NULL "
        "OR lower(name) LIKE lower(%(p)s) OR lower(sku) LIKE lower(%(p)s)) ORDER BY id",
        {"p": pat},
    )
    rows = _rows(cur)
    return {"count": len(rows), "results": rows}


def create_quote(cur: Cur, a: CreateQuote) -> Any:
    _exists(cur, "opportunities", a.opportunity_id)
    skus = [ln.sku for ln in a.lines]
    cur.execute("SELECT id, sku, unit_price FROM products WHERE sku = ANY(%s) AND active", (skus,))
    products = {r["sku"]: r for r in cur.fetchall()}
    unknown = [s for s in skus if s not in products]
    if unknown:
        raise ToolFailure("not_found", f"unknown product SKU(s): {', '.join(unknown)}; use search_products")
    quote = _insert(
        cur, "quotes", {"opportunity_id": a.opportunity_id, "name": a.name, "valid_until": a.valid_until}
    )
    total = Decimal(0)
    for ln in a.lines:
        price = products[ln.sku]["unit_price"]
        _insert(
            cur,
            "quote_lines",
            {
                "quote_id": quote["id"],
                "product_id": products[ln.sku]["id"],
                "quantity": ln.quantity,
                "unit_price": price,
                "discount_pct": ln.discount_pct,
            },
        )
        total += price * ln.quantity * (1 - ln.discount_pct / 100)
    cur.execute("UPDATE quotes SET total = round(%s, 2) WHERE id = %s RETURNING *", (total, quote["id"]))
    out = _no_ts(_rows(cur)[0])
    out["lines"] = [ln.model_dump(mode="json") for ln in a.lines]
    return out


def create_case(cur: Cur, a: CreateCase) -> Any:
    _exists(cur, "accounts", a.account_id)
    if a.contact_id is not None:
        _exists(cur, "contacts", a.contact_id)
    return _no_ts(_insert(cur, "cases", {**a.model_dump(), "status": "new"}))


def search_cases(cur: Cur, a: SearchCases) -> Any:
    return _search(
        cur,
        "cases",
        "id, account_id, contact_id, subject, priority, status",
        [
            ("account_id = %s", a.account_id),
            ("status = %s", a.status),
            ("priority = %s", a.priority),
            ("lower(subject) LIKE lower(%s)", _like(a.query) if a.query else None),
        ],
        a.limit,
    )


def update_case_status(cur: Cur, a: UpdateCaseStatus) -> Any:
    return _no_ts(_update(cur, "cases", a.case_id, {"status": a.status, "resolution": a.resolution}))


def log_activity(cur: Cur, a: LogActivity) -> Any:
    _exists(
        cur,
        {"opportunity": "opportunities", "case": "cases"}.get(a.related_type, a.related_type + "s"),
        a.related_id,
    )
    return _no_ts(_insert(cur, "activities", a.model_dump()))


# ---------------------------------------------------------------- registry
@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    args: type[Args]
    run: Callable[[Cur, Any], Any]
    writes: bool

    def json_schema(self) -> dict[str, Any]:
        return _inline_refs(self.args.model_json_schema())

    def anthropic(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.json_schema()}

    def openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.json_schema(),
            },
        }


def _inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """Inline $defs and drop pydantic's titles: smaller, and accepted by every provider."""
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return walk(defs[node["$ref"].rsplit("/", 1)[-1]])
            return {k: walk(v) for k, v in node.items() if k != "title"}
        if isinstance(node, list):
            return [walk(x) for x in node]
        return node

    out: dict[str, Any] = walk(schema)
    return out


_SPECS: list[tuple[Callable[[Cur, Any], Any], type[Args], bool, str]] = [
    (search_accounts, SearchAccounts, False, "Search accounts by name fragment, industry, type or city."),
    (get_account, GetAccount, False, "Get one account with its contacts, opportunities and cases."),
    (create_account, CreateAccount, True, "Create an account (company)."),
    (update_account, UpdateAccount, True, "Update fields of an account; only the fields given change."),
    (search_contacts, SearchContacts, False, "Search contacts by name, account or exact email."),
    (create_contact, CreateContact, True, "Create a contact at an account."),
    (update_contact, UpdateContact, True, "Update a contact's email, phone or title."),
    (search_opportunities, SearchOpportunities, False, "Search opportunities by account, stage or name."),
    (create_opportunity, CreateOpportunity, True, "Create an opportunity (deal) for an account."),
    (
        update_opportunity_stage,
        UpdateOpportunityStage,
        True,
        "Move an opportunity to a stage; probability follows the stage unless given.",
    ),
    (update_opportunity, UpdateOpportunity, True, "Change an opportunity's name, amount or close date."),
    (search_products, SearchProducts, False, "Search the product catalogue (SKU, name, list price)."),
    (create_quote, CreateQuote, True, "Create a quote for an opportunity with product lines (by SKU)."),
    (create_case, CreateCase, True, "Open a support case for an account."),
    (search_cases, SearchCases, False, "Search support cases by account, status, priority or subject."),
    (
        update_case_status,
        UpdateCaseStatus,
        True,
        "Change a case's status, with a resolution note if closing.",
    ),
    (log_activity, LogActivity, True, "Log a call, email, meeting, note or task against a record."),
]
TOOLS: dict[str, Tool] = {f.__name__: Tool(f.__name__, d, m, f, w) for f, m, w, d in _SPECS}


def anthropic_tools() -> list[dict[str, Any]]:
    return [t.anthropic() for t in TOOLS.values()]


def openai_tools() -> list[dict[str, Any]]:
    return [t.openai() for t in TOOLS.values()]


@dataclass(frozen=True)
class ToolOutcome:
    ok: bool
    result: Any = None
    error: dict[str, Any] | None = None

    def to_content(self) -> str:
        """What the model sees: JSON text, the same for both providers."""
        body = {"ok": True, "result": self.result} if self.ok else {"ok": False, "error": self.error}
        return json.dumps(body, sort_keys=True, default=str)


def execute(conn: psycopg.Connection[Any], name: str, raw_args: Any) -> ToolOutcome:
    """Run one tool call; every failure becomes a structured error for the model.

    psycopg.OperationalError (the server went away) is not a tool error: it propagates, so the
    worker can tell a lost sandbox from a bad call.
    """
    tool = TOOLS.get(name)
    if tool is None:
        return ToolOutcome(
            False,
            error={"type": "unknown_tool", "message": f"no tool named {name!r}", "available": sorted(TOOLS)},
        )
    if isinstance(raw_args, str):
        try:
            raw_args = json.loads(raw_args or "{}")
        except json.JSONDecodeError as e:
            return ToolOutcome(
                False, error={"type": "invalid_arguments", "message": f"arguments are not JSON: {e}"}
            )
    if not isinstance(raw_args, dict):
        return ToolOutcome(
            False, error={"type": "invalid_arguments", "message": "arguments must be a JSON object"}
        )
    try:
        args = tool.args.model_validate(raw_args)
    except ValidationError as e:
        return ToolOutcome(
            False,
            error={
                "type": "invalid_arguments",
                "message": f"invalid arguments for {name}",
                # sorted: the same wrong call gets the same answer, whatever key order
                "details": sorted(
                    ({"field": ".".join(map(str, d["loc"])), "problem": d["msg"]} for d in e.errors()),
                    key=lambda x: (x["field"], x["problem"]),
                ),
            },
        )
    # Reads run without BEGIN/COMMIT (two of a lookup's three round trips): nothing else writes to a
    # sandbox's database while its conversation runs, so a snapshot per statement sees what one per
    # call would. Writes keep their transaction: all of a call's statements or none.
    scope = conn.transaction() if tool.writes else contextlib.nullcontext()
    try:
        with scope, conn.cursor(row_factory=dict_row) as cur:
            return ToolOutcome(True, result=tool.run(cur, args))
    except ToolFailure as e:
        return ToolOutcome(False, error={"type": e.kind, "message": str(e)})
    except psycopg.errors.IntegrityError as e:
        return ToolOutcome(
            False,
            error={
                "type": "constraint_violation",
                "message": (e.diag.message_primary or str(e)),
                "detail": e.diag.message_detail,
            },
        )
    except (psycopg.errors.DataError, psycopg.errors.ProgrammingError) as e:
        return ToolOutcome(
            False, error={"type": "invalid_arguments", "message": e.diag.message_primary or str(e)}
        )
