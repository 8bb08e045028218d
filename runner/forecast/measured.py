"""What an earlier output measured of the same runs: per record, the calls and tokens each role spent.

Only calls the providers answered count (a response-cache hit cost nothing, and a later run may not find
it); a record that ended in an error still cost what its calls cost. A harness that reports its calls one
by one (the built-in CRM's `model_calls`, each with its role) is measured per role; any other is measured
as one part, from its results' usage (the gateway's counts), with its cost as measured.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.forecast.need import Need
from runner.results.result import Result, Usage
from runner.results.sink import read_results, results_path

HARNESS = "calls"  # the one part of a harness whose calls are not told apart by role


@dataclass
class Measured:
    """One run's results read from earlier outputs: per record, per role, what its live calls spent."""

    run: str
    records: dict[str, dict[str, Need]] = field(default_factory=dict)  # record id -> role -> need
    # record id -> measured cost (None where unpriced)
    cost_usd: dict[str, float] = field(default_factory=dict)
    call_seconds: float = 0.0  # the calls' time, summed
    sources: list[str] = field(default_factory=list)

    @property
    def calls(self) -> float:
        return sum(n.calls for roles in self.records.values() for n in roles.values())

    def seconds_per_call(self) -> float | None:
        calls = self.calls
        return self.call_seconds / calls if calls and self.call_seconds else None


def _role(name: str) -> str:
    return "agent" if name == "student" else name


def _per_role(r: Result) -> dict[str, Need] | None:
    """The record's live calls by role, from a harness that lists them (the CRM's output.model_calls)."""
    calls = (r.output or {}).get("model_calls")
    if not isinstance(calls, list) or not calls:
        return None
    roles: dict[str, Need] = {}
    for c in calls:
        if not isinstance(c, dict) or c.get("cached"):
            continue
        write, read = float(c.get("cache_write_tokens") or 0), float(c.get("cache_read_tokens") or 0)
        n = Need(1.0, float(c.get("input_tokens") or 0), read, write, float(c.get("output_tokens") or 0))
        role = _role(str(c.get("role", "agent")))
        roles[role] = roles.get(role, Need()) + n
    return roles


def _of_usage(u: Usage) -> Need:
    return Need(
        float(max(0, u.llm_calls - u.cache_hits)),
        float(u.input_tokens),
        float(u.cache_read_tokens),
        float(u.cache_write_tokens),
        float(u.output_tokens),
    )


def of_rows(run: str, rows: Iterable[Result], source: str) -> Measured | None:
    """What `rows` (a run's latest result per record) spent; None where none spent anything."""
    m = Measured(run)
    for r in rows:
        roles = _per_role(r)
        live = roles if roles is not None else {HARNESS: _of_usage(r.usage)}
        if not any(n.calls for n in live.values()):
            continue
        m.records[r.record_id] = live
        if r.usage.cost_usd is not None:
            m.cost_usd[r.record_id] = r.usage.cost_usd
        m.call_seconds += r.usage.latency_seconds
    if not m.records:
        return None
    m.sources.append(source)
    return m


def read(run: str, out: Path) -> Measured | None:
    """The run's results in the output directory `out` (the latest result of a record trial wins)."""
    latest = {r.trial: r for r in read_results(results_path(out, run))}
    return of_rows(run, latest.values(), str(out))


def merge(a: Measured | None, b: Measured | None) -> Measured | None:
    """Two outputs' measurements of one run; a record both measured counts as `b` has it."""
    if a is None or b is None:
        return a or b
    out = Measured(
        a.run,
        {**a.records, **b.records},
        {**a.cost_usd, **b.cost_usd},
        a.call_seconds + b.call_seconds,
        a.sources + b.sources,
    )
    return out


def describe(m: Measured) -> dict[str, Any]:
    return {"records": len(m.records), "calls": round(m.calls), "from": m.sources}
