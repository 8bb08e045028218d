"""The `filter` of Google's list methods, as the simulator reads it for batchPredictionJobs.list: the
subset of AIP-160 (google.aip.dev/160, read 2026-11-29) that the method's reference documents
(projects.locations.batchPredictionJobs/list: "`display_name` supports =, != comparisons, and : wildcard",
`state` = and !=, `create_time` =, !=, <, <=, >, >= on an RFC 3339 time, `labels.key=value` and
`labels.key:*`, with the examples `state!="JOB_STATE_FAILED" OR display_name="my_job"` and
`NOT display_name="my_job"`).

Terms are joined by AND and OR (OR binds tighter than AND, as AIP-160 has it), each may be negated with
NOT (or a leading -); a field may be spelled as the proto has it (display_name) or as the REST page does
(displayName). Parentheses, and fields the reference does not list, are refused with why.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping

_TERM = re.compile(r'^(?P<field>[A-Za-z_][\w.]*)\s*(?P<op>!=|>=|<=|=|>|<|:)\s*(?P<value>"[^"]*"|[^\s"]+)$')
_FIELDS = {"display_name": "display_name", "displayName": "display_name", "state": "state",
           "create_time": "create_time", "createTime": "create_time"}  # fmt: skip
_OPS = {
    "display_name": ("=", "!=", ":"),
    "state": ("=", "!="),
    "create_time": ("=", "!=", "<", "<=", ">", ">="),
}

# a job's fields as the filter reads them: its display name, state, create time (RFC 3339) and labels
Fields = Mapping[str, object]
Test = Callable[[Fields], bool]


def _wildcard(value: str, pattern: str) -> bool:
    return re.fullmatch(".*".join(re.escape(p) for p in pattern.split("*")), value) is not None


# (the job's value, the filter's): RFC 3339 times in UTC with a Z compare as strings
_COMPARE: dict[str, Callable[[str, str], bool]] = {
    ":": _wildcard,
    "=": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def _term(text: str) -> Test | str:
    negated = False
    if text.startswith("NOT "):
        negated, text = True, text[4:].strip()
    elif text.startswith("-"):
        negated, text = True, text[1:].strip()
    m = _TERM.match(text)
    if m is None:
        return f"Unsupported filter term: {text!r}"
    name, op, value = m["field"], m["op"], m["value"].strip('"')
    if name.startswith("labels."):
        key = name.removeprefix("labels.")
        if op not in ("=", "!=", ":"):
            return f"labels support =, != and : ({text!r})"

        def label(job: Fields) -> bool:
            labels = job.get("labels") or {}
            assert isinstance(labels, Mapping)
            have = labels.get(key)
            if op == ":":
                return have is not None and (value == "*" or have == value)
            return (have == value) == (op == "=")

        test: Test = label
    else:
        field = _FIELDS.get(name)
        if field is None:
            return f"Unsupported filter field: {name!r} (display_name, state, create_time, labels.KEY)"
        if op not in _OPS[field]:
            return f"{field} supports {', '.join(_OPS[field])} ({text!r})"

        holds = _COMPARE[op]

        def compare(job: Fields) -> bool:
            return holds(str(job[field]), value)

        test = compare
    return (lambda job: not test(job)) if negated else test


def parse(text: str) -> Test | str:
    """The filter as a test of a job's fields, or why the simulator does not read it (a 400)."""
    if "(" in text or ")" in text:
        return "Parentheses in a filter: the simulator does not read them"
    clauses: list[list[Test]] = []
    for conjunct in re.split(r"\s+AND\s+", text.strip()) if text.strip() else []:
        alternatives = []
        for part in re.split(r"\s+OR\s+", conjunct.strip()):
            term = _term(part.strip())
            if isinstance(term, str):
                return term
            alternatives.append(term)
        clauses.append(alternatives)
    return lambda job: all(any(t(job) for t in alternatives) for alternatives in clauses)
