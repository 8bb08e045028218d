"""What a conversation's seed may hold, read from the CRM's own schema.sql: each table's columns, their
types and which seed table they reference. A seed row with an unknown column, a value of the wrong
type or a reference to a row the seed does not hold would fail (or be silently dropped by
jsonb_populate_recordset) only when the conversation runs; checked here, it fails `dataset validate`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

SCHEMA = Path(__file__).resolve().parent / "schema.sql"
_TABLE = re.compile(r"^CREATE TABLE (\w+) \($")
_COLUMN = re.compile(r"^    (\w+)\s+(\w+)(.*)$")
_REFERENCES = re.compile(r"REFERENCES (\w+)")
_NOT_COLUMNS = {"CONSTRAINT", "PRIMARY", "UNIQUE", "CHECK", "FOREIGN", "EXCLUDE"}
# SQL type -> the JSON values jsonb_populate_recordset turns into it
_ACCEPTS: dict[str, tuple[type, ...]] = {
    "bigint": (int,),
    "integer": (int,),
    "smallint": (int,),
    "numeric": (int, float, str),
    "boolean": (bool,),
    "text": (str,),
    "timestamptz": (str,),
    "date": (str,),
}


@cache
def columns() -> dict[str, dict[str, tuple[str, str | None]]]:
    """table -> column -> (SQL type, referenced table or None), from schema.sql."""
    tables: dict[str, dict[str, tuple[str, str | None]]] = {}
    current: dict[str, tuple[str, str | None]] | None = None
    for line in SCHEMA.read_text().splitlines():
        if m := _TABLE.match(line):
            current = tables.setdefault(m.group(1), {})
        elif line.startswith(")"):
            current = None
        elif current is not None and (m := _COLUMN.match(line)) and m.group(1).upper() not in _NOT_COLUMNS:
            ref = _REFERENCES.search(m.group(3))
            current[m.group(1)] = (m.group(2), ref.group(1) if ref else None)
    return tables


def _type_ok(value: Any, sql_type: str) -> bool:
    if value is None:
        return True
    accepted = _ACCEPTS.get(sql_type, (object,))
    return isinstance(value, accepted) and not (isinstance(value, bool) and bool not in accepted)


def check_seed(seed: Mapping[str, list[dict[str, Any]]], seed_tables: tuple[str, ...]) -> None:
    """Raise ValueError naming table, row and column for the first row that cannot load as written."""
    schema = columns()
    ids = {t: {row.get("id") for row in seed.get(t, [])} for t in seed_tables}
    for table, rows in seed.items():
        for n, row in enumerate(rows):
            where = f"seed.{table}[{n}] (id {row.get('id')})"
            for col, value in row.items():
                if col not in schema[table]:
                    raise ValueError(
                        f"{where}: {table} has no column {col!r} (its columns: {', '.join(schema[table])})"
                    )
                sql_type, target = schema[table][col]
                if not _type_ok(value, sql_type):
                    raise ValueError(f"{where}: {col} is {sql_type}, got {type(value).__name__} {value!r}")
                if target in ids and value is not None and value not in ids[target]:
                    raise ValueError(
                        f"{where}: {col} = {value} points to a {target} row the seed does not hold"
                    )
