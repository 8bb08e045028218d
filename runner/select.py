"""Which records a run takes: `-k EXPR` over ids, tags and fields (pytest's way), `--ids`, `--lf`.

`-k` words match as substrings of a record's id, its tags and its string fields (case-insensitive),
combined with `and`, `or`, `not` and parentheses: `-k "refund and not hard"`, `-k "crm-7-0000 or (quote and
big)"`. A selection narrows what runs now; it is not part of what makes two runs comparable (resume
keeps every result already there).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from runner.errors import ConfigError

_TOKEN = re.compile(r"\(|\)|[^\s()]+")
_OPERATORS = {"and", "or", "not"}


def _haystack(record_id: str, data: dict[str, Any]) -> str:
    """Everything a -k word may match: the id, the tags, the record's strings (one level of nesting)."""
    parts = [record_id]
    for v in data.values():
        if isinstance(v, str):
            parts.append(v)
        elif isinstance(v, list):
            parts += [x for x in v if isinstance(x, str)]
        elif isinstance(v, dict):
            parts += [x for x in v.values() if isinstance(x, str)]
    return "\n".join(parts).lower()


def keyword(expr: str) -> Callable[[str, dict[str, Any]], bool]:
    """A predicate for `-k EXPR`; ConfigError naming the problem for an expression that does not parse."""
    tokens = _TOKEN.findall(expr)
    if not tokens:
        raise ConfigError("-k: an empty expression selects nothing", where="command line")
    # Safe to evaluate: every word becomes a quoted string literal; only and/or/not/parentheses stay code.
    code = " ".join(t if t in _OPERATORS or t in "()" else f"({t.lower()!r} in h)" for t in tokens)
    try:
        compiled = compile(code, "<-k>", "eval")
        # two words with no operator between compile, then fail
        eval(compiled, {"__builtins__": {}}, {"h": ""})
    except (SyntaxError, TypeError):
        raise ConfigError(
            f"-k {expr!r}: words joined by and, or, not and parentheses (pytest's -k)", where="command line"
        ) from None

    def match(record_id: str, data: dict[str, Any]) -> bool:
        return bool(eval(compiled, {"__builtins__": {}}, {"h": _haystack(record_id, data)}))

    return match


def chosen(
    records: Iterable[tuple[str, dict[str, Any]]], expr: str | None, ids: list[str] | None
) -> set[str] | None:
    """The ids to run, or None for all: those matching -k and among --ids (both when both are given)."""
    if expr is None and ids is None:
        return None
    match = keyword(expr) if expr is not None else None
    wanted = set(ids) if ids is not None else None
    return {
        rid
        for rid, data in records
        if (wanted is None or rid in wanted) and (match is None or match(rid, data))
    }
