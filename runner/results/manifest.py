"""An output's manifest.json, typed: what ran, on what, how it ended, and what every invocation added.

Written by the run (runner/run/job.py) at its start and end, and by `runner merge`; read by the report,
`runner report A B`, the benchmarks and a resume, which refuses an output of another configuration. Keys
this version does not know (an output written by a newer one) are kept as they are when it is rewritten.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from runner import __version__
from runner.errors import ResumeMismatch
from runner.results.atomic import write_atomically
from runner.results.sink import writing

NAME = "manifest.json"
# 2: format_version, requests typed, forecasts and spent (runner plan, --budget); 1: before (no
# format_version). Each version reads the earlier ones; docs/manifest.schema.json is this version's schema.
FORMAT_VERSION = 2


class Rejected(BaseModel):
    """Lines of the records file skipped (--skip-invalid): never silently."""

    count: int
    lines: list[int] = Field(default_factory=list)  # the first 100
    file: str | None = None  # where they are written with their reasons


class InFlight(BaseModel):
    """Records in flight over the last invocation: the report draws them against the capacity."""

    capacity: int = 0
    samples: list[tuple[int | float, ...]] = Field(default_factory=list)  # (seconds, in flight[, target])


class SentRequest(BaseModel):
    """What one of a run's models is sent (runner/models/preflight.py), as its start line says it."""

    model_config = ConfigDict(extra="forbid")
    role: str
    provider: str
    model: str
    params: dict[str, Any] = Field(default_factory=dict)  # sampling and thinking parameters sent
    dropped: list[str] = Field(default_factory=list)  # sampling the model does not take, left out
    thinking: str = ""  # the thinking plan, in words
    thinks: bool = False
    max_tokens: int | None = None
    prompt_cache: bool | str = False  # Anthropic: on or off; OpenAI: "automatic"
    prices_known: bool = True
    capabilities: str | None = None  # where they came from: the provider's models endpoint, or the table
    prices: str | None = None  # a cloud's model: whose prices it is billed at (the first-party ones, said so)


CloudOverride = dict[str, str | float | None]  # a run's own settings for its cloud (runner/config.py)


class RunModel(BaseModel):
    """A model a run names besides its own (Atlas's teacher), as written: the config's ModelRef, its values
    unchecked so that an output an earlier version wrote still reads."""

    model_config = ConfigDict(extra="allow")
    provider: str | None = None
    model: str | None = None
    sim_model: str | None = None
    original_model: str | None = None
    thinking: str | None = None
    effort: str | None = None
    thinking_tokens: int | None = None
    bedrock: CloudOverride | None = None
    vertex: CloudOverride | None = None
    azure: CloudOverride | None = None

    def provider_model(self) -> tuple[str | None, str | None]:
        """(provider, model) it calls."""
        return self.provider, self.model


class RunCap(BaseModel):
    """What a run may spend (the config's SpendCap)."""

    model_config = ConfigDict(extra="allow")
    usd: float | None = None
    tokens: int | None = None


class RunEntry(RunModel):
    """One run as the output keeps it: its spec in the config when it ran (runner/config.RunSpec, dumped).
    Only its name is required and no value is checked beyond its type: an earlier version's runs (fields since
    removed or added) read, and keys this version does not know are kept."""

    name: str
    params: dict[str, Any] = Field(default_factory=dict)  # the harness's own: any JSON
    env: dict[str, str] = Field(default_factory=dict)
    agent: str | None = None
    teacher: RunModel | None = None
    batch: bool | None = None
    budget: RunCap | None = None
    temperature: float | None = None
    max_output_tokens: int | None = None
    step_limit: int | None = None

    def provider_model(self) -> tuple[str | None, str | None]:
        """(provider, model) the run's agent calls: its own fields (the built-in agents) or its params (a
        harness's, by convention)."""
        return (
            self.provider or _text(self.params.get("provider")),
            self.model or _text(self.params.get("model")),
        )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


Usd = dict[str, float | None]  # band (low, expected, high) -> USD; None: a price unknown


class ForecastNeed(BaseModel):
    """Calls and tokens at one band (runner/forecast/need.py): `input_tokens` excludes what a prompt cache
    read or wrote, `output_tokens` includes thinking."""

    model_config = ConfigDict(extra="allow")
    calls: float = 0.0
    input_tokens: float = 0.0
    cache_read_tokens: float = 0.0
    cache_write_tokens: float = 0.0
    output_tokens: float = 0.0


class ForecastPart(BaseModel):
    """One role of a run (an agent; Atlas's student and teacher) and its model."""

    model_config = ConfigDict(extra="allow")
    role: str = ""
    provider: str | None = None  # None: a harness whose calls the runner cannot tell apart
    model: str | None = None
    need: dict[str, ForecastNeed] = Field(default_factory=dict)  # band ->
    cost_usd: dict[str, Usd] = Field(default_factory=dict)  # mode (interactive, cached, batch) -> band ->


class ForecastRun(BaseModel):
    """A run's forecast: its items left, where the figures come from, its needs and cost."""

    model_config = ConfigDict(extra="allow")
    run: str = ""
    items: int = 0  # records x trials it had left to do
    source: str = "unknown"  # measured, records, unknown
    why: str = ""
    mode: str = "interactive"  # the cost mode it runs in: interactive, cached, batch
    need: dict[str, ForecastNeed] = Field(default_factory=dict)  # band ->
    cost_usd: dict[str, Usd] = Field(default_factory=dict)  # mode -> band ->
    seconds_per_call: float | None = None
    parts: list[ForecastPart] = Field(default_factory=list)


class ForecastBudget(BaseModel):
    """One rate-limit budget's floor (runner/forecast/floor.py): what its calls ask of it, its limits per
    minute, the seconds they force and the limit that binds."""

    model_config = ConfigDict(extra="allow")
    key: str = ""
    requests: int = 0
    input_tokens: int = 0  # as the limit counts them
    output_tokens: int = 0
    rpm: float | None = None
    itpm: float | None = None
    otpm: float | None = None
    limits_from: str = ""  # the config, a named tier, none
    seconds: float = 0.0
    bound_by: str | None = None


class ForecastEntry(BaseModel):
    """One invocation's forecast of what it had left to do (runner/forecast/forecast.py, `runner plan`)."""

    model_config = ConfigDict(extra="allow")
    run_id: str | None = None
    format: int = 1
    runs: list[ForecastRun] = Field(default_factory=list)
    cost_usd: dict[str, Usd] = Field(default_factory=dict)  # mode -> band -> USD, every run
    cost_expected_usd: float | None = None
    floor_seconds: float = 0.0
    bound_by: str | None = None  # the budget and limit that set the floor
    budgets: list[ForecastBudget] = Field(default_factory=list)
    concurrency: int = 0
    concurrency_why: str = ""
    wall_seconds: float | None = None  # expected, at that concurrency
    notes: list[str] = Field(default_factory=list)


# batch mode's counts (Manifest.batches) of calls that left batch mode for interactive ones, by why
INTERACTIVE_PREFIX = "interactive: "


class Manifest(BaseModel):
    model_config = ConfigDict(extra="allow")

    format_version: int = 1  # absent: written before versions were (1); Manifest.new writes FORMAT_VERSION
    package_version: str | None = None
    git_revision: str | None = None
    run_id: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    # what makes two invocations one run (a resume checks them)
    config_fingerprint: str | None = None
    config_parts: dict[str, str] | None = None
    dataset: str | None = None
    dataset_sha256: str | None = None
    shard: list[int] | None = None
    # what ran
    mode: str | None = None  # real, sim, or none (a harness that calls no model through the runner)
    sandbox: str | None = None
    image: str | None = None
    harness: str | None = None
    runs: list[RunEntry] = Field(default_factory=list)  # the runs' specs, in the report's order
    requests: dict[str, list[SentRequest]] = Field(default_factory=dict)  # per run: what its models are sent
    compare_to: str | None = None
    epochs: int = 1
    reducer: str = "mean"
    endpoints: dict[str, str] = Field(default_factory=dict)
    rejected: Rejected | None = None
    # what every invocation added
    in_flight: InFlight | None = None
    discarded: dict[str, int] = Field(default_factory=dict)  # results thrown away, by why
    # a user harness's calls, per run: counts
    gateway: dict[str, dict[str, float]] = Field(default_factory=dict)
    batches: dict[str, float] = Field(default_factory=dict)  # batch mode's counts (runner/gateway/batcher.py)
    batch_runs: list[str] = Field(default_factory=list)  # the runs in batch mode
    # what the simulator played, per model
    simulator: dict[str, dict[str, float]] = Field(default_factory=dict)
    resumed: bool = False
    # each invocation's forecast of what it had left to do (runner/forecast/), in order: their sum is the
    # forecast of every result the output holds (the report puts it beside what happened)
    forecasts: list[ForecastEntry] = Field(default_factory=list)
    # what every invocation spent, summed (USD, tokens), for the job and per run (runner/budget/spend.py): a
    # resume's caps count it
    spent: dict[str, list[float]] = Field(default_factory=dict)
    # how it ended
    interrupted: bool = False
    stopped_early: int | None = None  # the --maxfail (-x: 1) that stopped the run before its end
    error: str | None = None
    # runs stopped by a refusal all their requests repeat
    stopped_runs: dict[str, str] = Field(default_factory=dict)
    stopped_at_budget: str | None = None  # "stopped at budget: $X of $Y ...": a cap stopped the job or a run
    counts: dict[str, int] = Field(default_factory=dict)
    missing: dict[str, int] = Field(default_factory=dict)  # records with no result, per run
    complete: bool | None = None
    # runner merge
    merged_from: list[str] | None = None
    shards: list[list[int] | None] | None = None

    @classmethod
    def new(cls, **fields: Any) -> Manifest:
        return cls(
            format_version=FORMAT_VERSION,
            package_version=__version__,
            git_revision=git_revision(),
            started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            **fields,
        )

    def run_names(self) -> list[str]:
        return [r.name for r in self.runs]

    @property
    def simulated(self) -> bool:
        """Numbers from the simulator: the report says so above them."""
        return self.mode == "sim"


def schema() -> dict[str, Any]:
    """This version's JSON Schema (docs/manifest.schema.json is it, written by `python -m
    runner.results.manifest`)."""
    doc = Manifest.model_json_schema()
    doc["$id"] = f"https://github.com/pgsandbox-runner/manifest/v{FORMAT_VERSION}"
    doc["description"] = (
        "An output's manifest.json (runner/results/manifest.py), format version "
        f"{FORMAT_VERSION}; earlier versions read too. Keys a newer version adds are kept."
    )
    return doc


def read(out: Path) -> Manifest:
    """An output's manifest, or an empty one for an output without (a hand-made results/)."""
    p = out / NAME
    return Manifest.model_validate_json(p.read_bytes()) if p.is_file() else Manifest()


def write(out: Path, m: Manifest) -> None:
    with writing(out / NAME):
        out.mkdir(parents=True, exist_ok=True)
    write_atomically(
        out / NAME,
        json.dumps(m.model_dump(mode="json", exclude_unset=True), indent=2, sort_keys=True, default=str),
    )


def check(out: Path, m: Manifest, *, force: bool) -> Manifest:
    """This invocation's manifest over the output's own, written back; an output of another run (dataset,
    shard, a run or setting changed) is refused unless forced."""
    if not (out / NAME).is_file():
        write(out, m)
        return m
    old = read(out)
    by_part = old.config_parts is not None and m.config_parts is not None  # older outputs: the whole hash
    keys = ("dataset_sha256", "shard") if by_part else ("config_fingerprint", "dataset_sha256", "shard")
    for key in keys:
        if getattr(old, key) != getattr(m, key) and not force:
            raise ResumeMismatch(
                f"{out} holds results of another run ({key} was {getattr(old, key)!r}, now "
                f"{getattr(m, key)!r}); "
                "use another --out, or --force-resume to resume anyway"
            )
    new = m.model_dump(exclude_unset=True, exclude={"started_at"})
    if old.config_parts is not None and m.config_parts is not None:
        # fewer runs (--runs) or more resume; a run or setting that changed would mix two configurations
        changed = [
            k for k in m.config_parts if k in old.config_parts and old.config_parts[k] != m.config_parts[k]
        ]
        if changed and not force:
            named = ", ".join(f"run {k[4:]}" if k.startswith("run:") else k for k in changed)
            raise ResumeMismatch(
                f"{out} holds results of another configuration: {named} changed since; use "
                "another --out, or --force-resume to add to them anyway"
            )
        new["config_parts"] = {**old.config_parts, **m.config_parts}  # runs left out this time keep theirs
        new["runs"] = _runs_kept(old.runs, m.runs)
    merged = Manifest.model_validate({**old.model_dump(exclude_unset=True), **new, "resumed": True})
    write(out, merged)
    return merged


def _runs_kept(old: list[RunEntry], new: list[RunEntry]) -> list[RunEntry]:
    """The output's runs in their first order: this invocation's specs, the runs it left out kept, new ones
    after (the report lists runs in this order)."""
    fresh = {r.name: r for r in new}
    return [fresh.pop(r.name, r) for r in old] + list(fresh.values())


def git_revision() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


if __name__ == "__main__":  # python -m runner.results.manifest > docs/manifest.schema.json
    print(json.dumps(schema(), indent=2, sort_keys=True))
