"""The result record: what one run of one record produced. Every module reads and writes this type.

The harness's own answer is kept verbatim under `output`; everything else is the runner's:
identity (run, record, attempt, worker, sandbox), status and error kind, timing, model usage,
and the report's inputs (`success`, `metrics`, `groups`), extracted once from the output by the
config's dotted paths so the report never needs to know the harness.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from runner.errors import CUT_KINDS, ErrorKind

RESULT_VERSION = 3  # 3: `earlier`, the attempts a rerun replaced


class Usage(BaseModel):
    """Model calls a record caused, as the runner saw them (its own clients, later its gateway)."""

    model_config = ConfigDict(extra="forbid")
    llm_calls: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    retries: int = 0
    rate_limited: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_1h_tokens: int = 0  # of cache_write_tokens, with the one-hour lifetime (billed at 2 x input)
    cost_usd: float | None = 0.0
    input_cost_usd: float | None = 0.0
    cache_saved_usd: float = 0.0
    latency_seconds: float = 0.0
    batched_calls: int = 0  # answered through a batch API, billed at its price
    batch_saved_usd: float = 0.0  # what those cost less than interactive calls would have
    not_sent: int = 0  # calls refused at their run's gate without being sent (runner/budget/gates.py)


class Earlier(BaseModel):
    """A result of the same record trial that a later one replaced (--lf, --rerun-errors): kept, with its
    output, so a record that failed and then passed reads as flaky, the failure stays there to read, and
    what it cost stays in the run's bill."""

    model_config = ConfigDict(extra="forbid")
    attempt: int = 1
    status: Literal["ok", "error"]
    success: bool | None = None
    error: str | None = None
    error_kind: ErrorKind | None = None
    started_at: str
    finished_at: str
    wall_seconds: float = 0.0
    usage: Usage = Field(default_factory=Usage)
    metrics: dict[str, float | None] = Field(default_factory=dict)
    output: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class Result(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: int = RESULT_VERSION
    run: str
    record_id: str
    index: int = Field(description="the record's position in the file: results are written in this order")
    item_id: int | None = None
    attempt: int = 1
    epoch: int = Field(1, description="which trial of the record (config epochs: each record run N times)")
    worker: int | None = None
    sandbox_id: str | None = None
    status: Literal["ok", "error"]
    success: bool | None = None
    error: str | None = None
    error_kind: ErrorKind | None = None
    started_at: str
    finished_at: str
    wall_seconds: float = 0.0
    usage: Usage = Field(default_factory=Usage)
    metrics: dict[str, float | None] = Field(default_factory=dict)
    groups: dict[str, list[str]] = Field(default_factory=dict)
    output: dict[str, Any] | None = None
    read_notes: dict[str, str] = Field(
        default_factory=dict,
        description="success or metric fields not written as "
        "plain numbers: how each was read, or why it could not be",
    )
    discarded: list[str] = Field(
        default_factory=list,
        description="earlier attempts' results thrown away, "
        "and why (a sandbox that did not serve the whole record)",
    )
    earlier: list[Earlier] = Field(
        default_factory=list,
        description="results of this record trial that a rerun (--lf, --rerun-errors) replaced, oldest first",
    )

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def trial(self) -> tuple[str, int]:
        """What one result answers for: a record's trial (one per record without epochs)."""
        return self.record_id, self.epoch

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def replacing(self, before: Result) -> Result:
        """This result as the newest of its record trial, `before` (and what it had replaced) kept under
        `earlier`."""
        kept = Earlier.model_validate(before.model_dump(include=set(Earlier.model_fields)))
        return self.model_copy(update={"earlier": [*before.earlier, kept, *self.earlier]})

    def attempts_usage(self) -> list[Usage]:
        """What every attempt of this record trial cost, this one and those a rerun replaced: the bill."""
        return [*(e.usage for e in self.earlier), self.usage]


Outcome = Literal["success", "failure", "unscored", "cut", "error"]


def outcome(r: Result | Earlier) -> Outcome:
    """Exactly one of: success, failure (the agent's: a finished record that did not succeed), unscored (no
    success field), cut (the model did not finish a turn: output limit, refusal...) or error (a cause that is
    not the agent's: provider, sandbox, harness, time limit). Success rates count successes among successes
    and failures; errors and cuts are shown beside them, never folded in silently."""
    if r.ok:
        return "unscored" if r.success is None else "success" if r.success else "failure"
    return "cut" if r.error_kind in CUT_KINDS else "error"


def flaky(r: Result) -> bool:
    """It succeeded on a rerun after failing (an outcome of the agent's, not an error): the same record,
    asked again, went the other way."""
    return outcome(r) == "success" and any(e.ok and e.success is False for e in r.earlier)


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def error_result(
    run: str,
    record_id: str,
    index: int,
    error: str,
    *,
    kind: ErrorKind,
    started_at: str | None = None,
    **fields: Any,
) -> Result:
    """A failed record: the reason, prefixed by its kind, and no output."""
    now = now_iso()
    return Result(
        run=run,
        record_id=record_id,
        index=index,
        status="error",
        success=False,
        error=f"{kind}: {error}",
        error_kind=kind,
        started_at=started_at or now,
        finished_at=now,
        **fields,
    )


def dig(data: Any, path: str) -> Any:
    """`a.b.0.c` into nested dicts and lists; None where the path does not lead."""
    for part in path.split("."):
        if isinstance(data, dict):
            data = data.get(part)
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            return None
    return data


_TRUE, _FALSE = {"true", "yes", "pass", "passed", "y", "t"}, {"false", "no", "fail", "failed", "n", "f"}


def read_score(v: Any) -> tuple[float | None, str | None]:
    """A score as harnesses write them: a number, a boolean, or either as a string ("1.0", "true").
    Returns the number and, when it was not a plain number, a note saying how it was read (or why not)."""
    if v is None:
        return None, None
    if isinstance(v, bool):
        return float(v), None
    if isinstance(v, int | float):
        return float(v), None
    if isinstance(v, str):
        text = v.strip().lower()
        if text in _TRUE or text in _FALSE:
            return float(text in _TRUE), "read from a string"
        try:
            return float(text), "read from a string"
        except ValueError:
            pass
    shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
    return None, f"not a number: {shown}"


def as_success(v: Any) -> tuple[bool | None, str | None]:
    """success_field's value as a verdict: truthy strings like "0.0" or "false" are failures, not
    successes."""
    number, note = read_score(v)
    return (None if number is None else number > 0), note


def as_group(v: Any) -> list[str]:
    if v is None:
        return []
    return [str(x) for x in v] if isinstance(v, list) else [str(v)]


def share_metrics(rows: Iterable[Result]) -> set[str]:
    """The metrics that are shares (every value between 0 and 1, as the CRM's argument and state scores):
    shown as percentages, as success is; a count or a score on another scale keeps its own numbers."""
    seen: set[str] = set()
    other: set[str] = set()
    for r in rows:
        for k, v in r.metrics.items():
            if v is not None:
                (seen if 0.0 <= v <= 1.0 else other).add(k)
    return seen - other


def metric_cell(v: float | None, share: bool) -> str:
    """One record's or one run's metric: a share as a percentage (as success is), anything else as it is."""
    return "-" if v is None else f"{v:.1%}" if share else f"{v:.3g}"
