"""Harnesses: what runs one record. The core picks one by the config's `harness.kind` through here.

crm      the built-in CRM agents (the demo and benchmark workload)   harness/crm/
python   a user's function fn(record, ctx) -> dict                   harness/python.py
command  a user's CLI over a JSONL chunk                             harness/command.py
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from runner.config import Config, resolve_path
from runner.harness.base import Defaults, Harness, Outcome, Task
from runner.records import Check, RecordSource
from runner.results.result import Result, as_group, as_success, dig, error_result, now_iso, read_score
from runner.sandbox.schema import DatabaseSpec, init_files

# The largest output a record may store (its JSON): results files are read whole by the report and the resume;
# a harness that returns a transcript with every tool result verbatim stays far below it.
OUTPUT_LIMIT_BYTES = 4 << 20


def output_problem(out: Any) -> str | None:
    """Why a harness's output cannot be stored as it is (None: it can): JSON has no bytes, no sets, no
    NaN (kept, it would be read back as null, silently), and the output has a size limit."""
    try:
        size = len(json.dumps(out, allow_nan=False, ensure_ascii=False).encode())
    except (TypeError, ValueError, RecursionError) as e:
        return f"the harness's output cannot be stored as JSON: {type(e).__name__}: {e}"
    if size > OUTPUT_LIMIT_BYTES:
        return (
            f"the harness's output is {size / (1 << 20):.1f} MiB as JSON, over the limit of "
            f"{OUTPUT_LIMIT_BYTES >> 20} MiB (docs/harness.md): keep large artifacts in files (ctx.scratch)"
        )
    return None


def harness_class(kind: str) -> type[Harness]:
    if kind == "crm":
        from runner.harness.crm.harness import CrmHarness

        return CrmHarness
    if kind == "python":
        from runner.harness.python import PythonHarness

        return PythonHarness
    if kind == "command":
        from runner.harness.command import CommandHarness

        return CommandHarness
    raise ValueError(f"unknown harness kind {kind!r}")


def database_spec(cfg: Config) -> DatabaseSpec:
    """The config's database, else the built-in CRM's (its schema, crm + atlas, role sandbox)."""
    if cfg.database is None:
        if cfg.harness.kind == "crm":
            from runner.harness.crm.harness import DATABASE

            return DATABASE
        return DatabaseSpec()
    d = cfg.database
    extra = tuple(
        (name, init_files([resolve_path(cfg, p) for p in files or []]))
        for name, files in d.extra_databases.items()
    )
    return DatabaseSpec(
        files=init_files([resolve_path(cfg, p) for p in d.schema_files]),
        name=d.name,
        user=d.user,
        extra=extra,
        postgres=d.postgres,
        shared=tuple(d.shared_databases),
    )


@dataclass(frozen=True)
class Reading:
    """How results of this config are read: success, report metrics and breakdowns."""

    success_field: str | None
    metrics: dict[str, str]
    group_by: dict[str, str]


def reading(cfg: Config) -> Reading:
    d: Defaults = harness_class(cfg.harness.kind).defaults
    return Reading(
        cfg.success_field if cfg.success_field is not None else d.success_field,
        dict(cfg.metrics if cfg.metrics is not None else d.metrics),
        dict(cfg.group_by if cfg.group_by is not None else d.group_by),
    )


def record_check(cfg: Config) -> Check | None:
    return harness_class(cfg.harness.kind).record_check()


def id_field(cfg: Config) -> str | None:
    return cfg.id_field if cfg.id_field or cfg.harness.kind != "crm" else "id"


def record_source(cfg: Config) -> RecordSource:
    """Where a worker reads its records, as this config's harness names them."""
    return RecordSource(cfg.dataset, id_field(cfg), cfg.skip_invalid)


def build_result(
    task: Task, outcome: Outcome, index: int, started: tuple[str, float], how: Reading, share: int = 1
) -> Result:
    """The runner's record of one task: the harness's dict verbatim, plus what the report reads from it.

    `share`: records that ran together in one chunk split its time evenly (a command harness).
    """
    started_at, t0 = started
    wall = round((time.monotonic() - t0) / share, 4)
    problem = None if outcome.output is None else output_problem(outcome.output)
    if outcome.error is not None or outcome.output is None or problem is not None:
        return error_result(
            task.run.name,
            task.record_id,
            index,
            outcome.error or problem or "no output",
            kind=outcome.error_kind or "harness_error",
            started_at=started_at,
            wall_seconds=wall,
            usage=outcome.usage,
        )
    out = outcome.output
    sources = {"record": task.record, "output": out}

    def find(path: str) -> Any:
        head, _, rest = path.partition(".")
        return dig(sources[head], rest) if head in sources and rest else dig(out, path)

    notes: dict[str, str] = {}
    success = None
    if how.success_field:
        success, note = as_success(find(how.success_field))
        if note:
            notes[f"success_field ({how.success_field})"] = note
    metrics = {}
    for k, p in how.metrics.items():
        metrics[k], note = read_score(find(p))
        if note:
            notes[f"metrics.{k} ({p})"] = note
    return Result(
        run=task.run.name,
        record_id=task.record_id,
        index=index,
        status="ok",
        success=success,
        started_at=started_at,
        finished_at=now_iso(),
        wall_seconds=wall,
        usage=outcome.usage,
        metrics=metrics,
        groups={k: as_group(find(p)) for k, p in how.group_by.items()},
        output=out,
        read_notes=notes,
    )
