"""A job's forecast: per run, what it will call, spend and take, before anything is spent.

Per run, its items left to do (what `runner run` would run now: resume skips what is done) and, per role
(an agent; Atlas's student and teacher), its calls and tokens at three bands:

- measured: an earlier output of the same run (the config's own, or `--measured DIR`) ran some records. A
  harness that can foresee its calls (the built-in CRM) has each figure scaled by how the measured records
  compared with their own foresight, so a pilot of a few records carries over to the rest; any other harness
  has its measured mean per record times the records. The band is the mean's uncertainty (two standard
  errors, at least MEASURED_BAND).
- records: no measurement, but the harness foresees the calls from the records (runner/forecast/calls.py;
  its low and high allow for a model that strays from the records' gold path, and thinks less or more).
- unknown: neither (a user's harness never run): the plan says so, and how to measure.

Cost per role at its model's prices (runner/models/capabilities.py), three ways: every token at the input
price (interactive, no prompt cache), with prompt caching as the providers bill it, and through the batch
APIs (half price, caching too). Time: the rate-limit floor of each budget (runner/forecast/floor.py) under
the config's limits or a named tier, and the wall time to expect at the concurrency chosen: the longer of
the floor and the calls' own time spread over the slots, plus one record's length (the last records finish
after the last calls are admitted) and the start.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from runner.budget.concurrency import AUTO_CEILING, layout
from runner.budget.ratelimit import limiter_key
from runner.config import API_OF, Config, Limits, ModelRef, RunSpec, resolve_mode
from runner.forecast import calls, measured, tiers
from runner.forecast.floor import Floor, floor
from runner.forecast.measured import HARNESS, Measured
from runner.forecast.need import Need
from runner.harness import harness_class, id_field, record_check
from runner.harness.base import CallShape
from runner.models.capabilities import Capabilities, lookup
from runner.models.thinking import plan as plan_thinking
from runner.models.thinking import thinking_choice
from runner.models.usage import at_batch_price, cost
from runner.plan import WorkItem, make_plan
from runner.records import iter_records
from runner.results.result import Result, outcome
from runner.results.sink import read_results, results_path
from runner.select import chosen

BANDS = ("low", "expected", "high")
MODES = ("interactive", "cached", "batch")
MEASURED_BAND = 0.1  # a measured forecast's band is at least +-10 %: the records not yet run differ
REAL_CALL_SECONDS = 3.0  # a model call's time on the real APIs where nothing was measured (the seeds' p50)
START_SECONDS = 10.0  # sandboxes, workers and servers before the first record (docs/benchmarks.md)
FORMAT = 1


@dataclass(frozen=True)
class Part:
    """One role of one run: its model and what its calls need at each band."""

    role: str
    provider: str | None  # None: a harness whose calls the runner cannot tell apart (measured as a whole)
    model: str | None
    need: dict[str, Need]  # band -> calls and tokens
    cost: dict[str, dict[str, float | None]]  # mode -> band -> USD (None: price unknown)

    def as_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "provider": self.provider,
            "model": self.model,
            "need": {b: n.as_dict() for b, n in self.need.items()},
            "cost_usd": {m: {b: _usd(v) for b, v in by.items()} for m, by in self.cost.items()},
        }


@dataclass(frozen=True)
class RunForecast:
    run: str
    items: int  # items to do: records x trials not yet done
    source: str  # measured, records, unknown
    why: str  # where the figures come from, in words
    mode: str  # the cost mode the config runs in: cached (prompt caching on), interactive, batch
    parts: tuple[Part, ...] = ()
    seconds_per_call: float | None = None
    measured_cost: dict[str, float] | None = None  # a harness measured as a whole: USD per band

    def need(self, band: str = "expected") -> Need:
        return sum((p.need[band] for p in self.parts), Need())

    def cost(self, mode: str | None = None, band: str = "expected") -> float | None:
        if self.measured_cost is not None:
            return self.measured_cost[band]
        values = [p.cost[mode or self.mode][band] for p in self.parts]
        return (
            None if not values or any(v is None for v in values) else sum(v for v in values if v is not None)
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "items": self.items,
            "source": self.source,
            "why": self.why,
            "mode": self.mode,
            "need": {b: self.need(b).as_dict() for b in BANDS},
            "cost_usd": {m: {b: _usd(self.cost(m, b)) for b in BANDS} for m in MODES},
            "seconds_per_call": self.seconds_per_call,
            "parts": [p.as_dict() for p in self.parts],
        }


@dataclass(frozen=True)
class Forecast:
    runs: tuple[RunForecast, ...]
    floors: tuple[Floor, ...]
    concurrency: int
    concurrency_why: str
    wall_seconds: float | None  # expected, at that concurrency
    notes: tuple[str, ...] = ()

    @property
    def floor(self) -> Floor | None:
        return max(self.floors, key=lambda f: f.seconds, default=None)

    def cost(self, band: str = "expected", mode: str | None = None) -> float | None:
        values = [r.cost(mode, band) for r in self.runs if r.items]
        return None if any(v is None for v in values) else sum(v for v in values if v is not None)

    def per_item(self, key_of: Callable[[str, str], str]) -> dict[str, dict[str, tuple[float, float, float]]]:
        """Per run, per budget key (`key_of(provider, model)`): the calls, input tokens (as limited) and
        output tokens an item is expected to ask of it
        (the dispatcher's critical path: runner/budget/priority.py)."""
        out: dict[str, dict[str, tuple[float, float, float]]] = {}
        for r in self.runs:
            for p in r.parts:
                if p.provider is None or p.model is None or not r.items:
                    continue
                n = p.need["expected"].scaled(1 / r.items)
                key = key_of(p.provider, p.model)
                c, i, o = out.setdefault(r.run, {}).get(key, (0.0, 0.0, 0.0))
                out[r.run][key] = (c + n.calls, i + n.limited_input(p.provider), o + n.output_tokens)
        return out

    def as_dict(self) -> dict[str, Any]:
        f = self.floor
        return {
            "format": FORMAT,
            "runs": [r.as_dict() for r in self.runs],
            "cost_usd": {m: {b: _usd(self.cost(b, m)) for b in BANDS} for m in MODES},
            "cost_expected_usd": _usd(self.cost()),
            "floor_seconds": round(f.seconds, 1) if f else 0.0,
            "bound_by": _binding(f),
            "budgets": [x.as_dict() for x in self.floors],
            "concurrency": self.concurrency,
            "concurrency_why": self.concurrency_why,
            "wall_seconds": None if self.wall_seconds is None else round(self.wall_seconds, 1),
            "notes": list(self.notes),
        }


def _usd(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def _binding(f: Floor | None) -> str | None:
    return f"{f.key} {f.bound_by}" if f is not None and f.bound_by else None


class Foresight:
    """Each record's foreseen calls per run, from its harness (runner/harness/base.Harness.expected_calls),
    each worked out once."""

    def __init__(self, cfg: Config, records: Mapping[str, dict[str, Any]]) -> None:
        self.records = records
        self._foresee = harness_class(cfg.harness.kind).expected_calls
        self._runs = {r.name: r for r in cfg.runs}
        self._shapes: dict[tuple[str, str], list[CallShape] | None] = {}
        self._model_runs = [r.name for r in cfg.model_runs()] or list(self._runs)

    def of(self, run: str, rid: str) -> list[CallShape] | None:
        key = (run, rid)
        if key not in self._shapes:
            data = self.records.get(rid)
            self._shapes[key] = None if data is None else self._foresee(data, self._runs[run])
        return self._shapes[key]

    def work(self) -> dict[str, float] | None:
        """Each record's length in model calls (its longest run's), for the plan's longest-first order; None
        where the harness cannot foresee its calls."""
        out: dict[str, float] = {}
        for rid in self.records:
            for run in self._model_runs:
                shapes = self.of(run, rid)
                if shapes is None:
                    return None
                out[rid] = max(out.get(rid, 0.0), float(len(shapes)))
        return out


@dataclass
class Inputs:
    """What a forecast reads, gathered once: the records and their foresight, each run's latest results
    (what is done, and what earlier outputs measured), the tiers asked for."""

    foresight: Foresight
    latest: dict[str, list[Result]]
    measured: dict[str, Measured] = field(default_factory=dict)
    tier: Mapping[str, str] = field(default_factory=dict)  # provider -> a published tier's name


def gather(
    cfg: Config,
    *,
    records: Mapping[str, dict[str, Any]] | None = None,
    results: Mapping[str, Iterable[Result]] | None = None,
    foresight: Foresight | None = None,
    measured_from: Iterable[Path] = (),
    tier: Mapping[str, str] | None = None,
) -> Inputs:
    """Everything a forecast reads. Given (`runner run`): the records, their foresight and each run's latest
    results; else read here as `runner run` would, writing nothing (`runner plan`)."""
    if records is None:
        records = {
            r.id: r.data
            for r in iter_records(
                cfg.dataset, id_field=id_field(cfg), check=record_check(cfg), skip_invalid=cfg.skip_invalid
            )
        }
    out = cfg.output_dir.resolve()
    latest = {
        run.name: list(results[run.name])
        if results is not None and run.name in results
        else list({r.trial: r for r in read_results(results_path(out, run.name))}.values())
        for run in cfg.runs
    }
    inputs = Inputs(foresight or Foresight(cfg, records), latest, tier=dict(tier or {}))
    extra = [Path(p).resolve() for p in measured_from]
    for run in cfg.runs:
        m = measured.of_rows(run.name, latest[run.name], str(out))
        for other in extra:
            m = measured.merge(m, measured.read(run.name, other))
        if m is not None:
            inputs.measured[run.name] = m
    return inputs


def _items(cfg: Config, inputs: Inputs) -> list[WorkItem]:
    """What `runner run` would plan (runner/run/job.py): not what is done, only what -k, --ids and --lf
    choose, the longest records first."""
    records, latest = inputs.foresight.records, inputs.latest
    order = {rid: i for i, rid in enumerate(records)}
    picked: set[str] | set[tuple[str, str]] | None = chosen(records.items(), cfg.select, cfg.ids)
    done = {
        (run, r.record_id, r.epoch)
        for run, rows in latest.items()
        for r in rows
        if r.ok or not cfg.rerun_errors
    }
    if cfg.last_failed:
        failed = {
            (run, r.record_id, r.epoch)
            for run, rows in latest.items()
            for r in rows
            if outcome(r) in ("failure", "cut", "error")
        }
        done -= failed
        picked = {(run, rid) for run, rid, _ in failed if picked is None or rid in picked}
    return make_plan(cfg, order, done, picked, inputs.foresight.work())


def forecast(
    cfg: Config, inputs: Inputs, *, items: list[WorkItem] | None = None, concurrency: int | None = None
) -> Forecast:
    """`items`: what the run plans (else what `runner run` would, from `inputs`)."""
    items = _items(cfg, inputs) if items is None else items
    todo: dict[str, list[str]] = {r.name: [] for r in cfg.runs}
    for it in items:
        todo[it.run].append(it.record_id)
    notes: list[str] = []
    runs = tuple(_run(cfg, run, todo[run.name], inputs, notes) for run in cfg.runs)
    floors = _floors(cfg, runs, inputs.tier, notes)
    lay = layout(cfg, items=len(items) or 1, chunk=cfg.harness.chunk)
    slots = concurrency or lay.in_flight
    why = f"{slots} records in flight" + (
        " (--concurrency auto: the most it makes ready)"
        if cfg.concurrency == "auto" and slots == AUTO_CEILING
        else ""
    )
    return Forecast(runs, floors, slots, why, _wall(cfg, runs, floors, slots), tuple(notes))


def _roles(cfg: Config, run: RunSpec) -> list[tuple[str, ModelRef]]:
    if run not in cfg.model_runs():
        return []
    roles = [("agent", run.model_ref())]
    return roles + ([("teacher", run.teacher)] if run.teacher is not None else [])


def _mode(cfg: Config, run: RunSpec) -> str:
    return "batch" if run.name in cfg.batch_runs() else "cached" if cfg.prompt_cache else "interactive"


def _run(cfg: Config, run: RunSpec, todo: list[str], inputs: Inputs, notes: list[str]) -> RunForecast:
    mode, m = _mode(cfg, run), inputs.measured.get(run.name)
    roles = _roles(cfg, run)
    shapes = {
        rid: inputs.foresight.of(run.name, rid)
        for rid in set(todo) | set(m.records if m else ())
        if rid in inputs.foresight.records
    }
    if not todo:
        return RunForecast(run.name, 0, "done", "every item is done", mode)
    seconds = m.seconds_per_call() if m else None
    if m is not None and roles and all(shapes.get(rid) is not None for rid in m.records):
        parts = tuple(_scaled_part(cfg, role, ref, todo, shapes, m) for role, ref in roles)
        return RunForecast(
            run.name,
            len(todo),
            "measured",
            _from(m, "scaled by the records' own foresight"),
            mode,
            parts,
            seconds,
        )
    if m is not None:
        return _measured_whole(run.name, len(todo), m, mode)
    if roles and all(shapes.get(rid) is not None for rid in todo):
        parts = tuple(_foreseen_part(cfg, role, ref, todo, shapes) for role, ref in roles)
        return RunForecast(
            run.name,
            len(todo),
            "records",
            "foreseen from the records (no run measured yet)",
            mode,
            parts,
            seconds,
        )
    notes.append(
        f"{run.name}: its harness cannot foresee its calls and no earlier output measured it: run a few "
        f"records (runner run --limit 10 --runs {run.name}), then plan again"
    )
    return RunForecast(run.name, len(todo), "unknown", "cannot know before a run measures it", mode)


def _from(m: Measured, how: str) -> str:
    return f"measured on {len(m.records)} record(s) of {', '.join(m.sources)}, {how}"


def _caps(cfg: Config, ref: ModelRef) -> Capabilities:
    return lookup(ref.model, ref.provider, cfg.model_overrides())


def _thinking(cfg: Config, run: RunSpec, ref: ModelRef, caps: Capabilities) -> calls.ThinkingBand:
    choice = thinking_choice(ref)
    p = plan_thinking(caps, ref.model, choice, run.max_output_tokens)
    return calls.ThinkingBand.of(p, choice.effort or caps.default_effort, choice.tokens, API_OF[ref.provider])


def _role_shapes(shapes: list[CallShape] | None, role: str) -> list[CallShape]:
    return [s for s in shapes or [] if (s.role == "student" and role == "agent") or s.role == role]


def _foreseen(
    cfg: Config,
    role: str,
    ref: ModelRef,
    rids: Iterable[str],
    shapes: Mapping[str, list[CallShape] | None],
    run: RunSpec | None = None,
    starts: bool = False,
) -> dict[str, Need]:
    """`starts`: the first of `rids` is the run's first record (its first call writes the fixed part)."""
    caps = _caps(cfg, ref)
    think = _thinking(cfg, run, ref, caps) if run is not None else calls.ThinkingBand()
    total = {b: Need() for b in BANDS}
    for n, rid in enumerate(rids):
        mine = _role_shapes(shapes.get(rid), role)
        for b in BANDS:
            total[b] += calls.need(
                mine, caps, prompt_cache=cfg.prompt_cache, thinking=think, band=b, first=starts and n == 0
            )
    return total


def _run_of(cfg: Config, ref: ModelRef) -> RunSpec:
    return next(r for r in cfg.runs if r.provider is not None and (r.model_ref() == ref or r.teacher == ref))


def _part(cfg: Config, role: str, ref: ModelRef, need: dict[str, Need]) -> Part:
    caps = _caps(cfg, ref)
    prices = caps.prices
    costs: dict[str, dict[str, float | None]] = {}
    for mode in MODES:
        costs[mode] = {}
        for b in BANDS:
            n = need[b].uncached() if mode == "interactive" else need[b]
            p = prices if mode != "batch" or prices is None else at_batch_price(prices)
            t = n.tokens()
            if mode == "batch" and API_OF[ref.provider] == "anthropic":  # entries written for an hour there
                t = replace(t, cache_write_1h_tokens=t.cache_write_tokens)
            costs[mode][b] = cost(p, t)[0]
    return Part(role, ref.provider, ref.model, need, costs)


def _foreseen_part(
    cfg: Config, role: str, ref: ModelRef, todo: list[str], shapes: Mapping[str, list[CallShape] | None]
) -> Part:
    run = _run_of(cfg, ref)
    return _part(cfg, role, ref, _foreseen(cfg, role, ref, todo, shapes, run, starts=True))


def _scaled_part(
    cfg: Config,
    role: str,
    ref: ModelRef,
    todo: list[str],
    shapes: Mapping[str, list[CallShape] | None],
    m: Measured,
) -> Part:
    """The records' foresight, scaled by what the measured records spent against their own foresight: calls,
    prompt and output each by its own ratio, the prompt split into uncached, read and written as measured."""
    run = _run_of(cfg, ref)
    ahead = _foreseen(cfg, role, ref, todo, shapes, run)["expected"]
    per: list[float] = []  # each measured record's spend against its foresight (the band's spread)
    seen, foreseen = Need(), Need()
    for rid, roles in m.records.items():
        spent = roles.get(role, Need())
        mine = _foreseen(cfg, role, ref, [rid], shapes, run)["expected"]
        seen, foreseen = seen + spent, foreseen + mine
        if mine.prompt_tokens + mine.output_tokens:
            per.append(
                (spent.prompt_tokens + spent.output_tokens) / (mine.prompt_tokens + mine.output_tokens)
            )

    def ratio(a: float, b: float) -> float:
        return a / b if b else 0.0

    prompt = ahead.prompt_tokens * ratio(seen.prompt_tokens, foreseen.prompt_tokens)
    whole = seen.prompt_tokens or 1.0
    expected = Need(
        ahead.calls * ratio(seen.calls, foreseen.calls),
        prompt * seen.input_tokens / whole,
        prompt * seen.cache_read_tokens / whole,
        prompt * seen.cache_write_tokens / whole,
        ahead.output_tokens * ratio(seen.output_tokens, foreseen.output_tokens),
    )
    k = _band(per)
    return _part(
        cfg, role, ref, {"low": expected.scaled(1 - k), "expected": expected, "high": expected.scaled(1 + k)}
    )


def _band(samples: list[float]) -> float:
    """Two standard errors of the mean of `samples` relative to it, at least MEASURED_BAND."""
    if len(samples) < 2:
        return max(MEASURED_BAND, 0.5)
    mean = statistics.fmean(samples)
    if mean <= 0:
        return MEASURED_BAND
    return max(MEASURED_BAND, 2 * statistics.stdev(samples) / math.sqrt(len(samples)) / mean)


def _measured_whole(run: str, items: int, m: Measured, mode: str) -> RunForecast:
    """A harness measured only as a whole: its mean per record times the items, cost as measured."""
    needs = [sum(roles.values(), Need()) for roles in m.records.values()]
    mean = sum(needs, Need()).scaled(1 / len(needs))
    k = _band([n.prompt_tokens + n.output_tokens for n in needs])
    need = {
        "low": mean.scaled(items * (1 - k)),
        "expected": mean.scaled(items),
        "high": mean.scaled(items * (1 + k)),
    }
    priced = list(m.cost_usd.values())
    cost_each = statistics.fmean(priced) if priced else None
    measured_cost = (
        None
        if cost_each is None
        else {
            "low": cost_each * items * (1 - k),
            "expected": cost_each * items,
            "high": cost_each * items * (1 + k),
        }
    )
    part = Part(
        HARNESS,
        None,
        None,
        need,
        {mode: {b: None if measured_cost is None else measured_cost[b] for b in BANDS} for mode in MODES},
    )
    return RunForecast(
        run,
        items,
        "measured",
        _from(
            m, "its mean per record (the harness does not foresee its calls; cost as the gateway measured it)"
        ),
        mode,
        (part,),
        m.seconds_per_call(),
        measured_cost,
    )


def _floors(
    cfg: Config, runs: Iterable[RunForecast], tier: Mapping[str, str], notes: list[str]
) -> tuple[Floor, ...]:
    asked: dict[str, list[float]] = {}
    provider_of: dict[str, tuple[str, str]] = {}
    for r in runs:
        for p in r.parts:
            if p.provider is None or p.model is None:
                continue
            key = (
                limiter_key(cfg, p.provider, p.model) if p.provider not in tier else f"{p.provider}/{p.model}"
            )
            n = p.need["expected"]
            a = asked.setdefault(key, [0.0, 0.0, 0.0])
            a[0] += n.calls
            a[1] += n.limited_input(p.provider)
            a[2] += n.output_tokens
            provider_of[key] = (p.provider, p.model)
    floors = []
    for key, a in sorted(asked.items()):
        provider, model = provider_of[key]
        lim, where = _limits(cfg, key, provider, model, tier, notes)
        floors.append(floor(key, (a[0], a[1], a[2]), lim, where))
    return tuple(floors)


def _limits(
    cfg: Config, key: str, provider: str, model: str, tier: Mapping[str, str], notes: list[str]
) -> tuple[Limits, str]:
    if provider in tier:
        found = tiers.limits(provider, tier[provider], model)
        if found is None:
            notes.append(f"{model}: {provider}'s {tier[provider]} tier publishes no limits for it: no floor")
            return Limits(), f"{provider} {tier[provider]}: none published"
        return found
    if key in cfg.rate_limits:
        return cfg.rate_limits[key].resolved(), f"config rate_limits.{key}"
    return Limits(), "none set (rate_limits)"


def _call_seconds(cfg: Config, runs: Iterable[RunForecast]) -> float:
    measured_s = [r.seconds_per_call for r in runs if r.seconds_per_call]
    if measured_s:
        return statistics.fmean(measured_s)
    if resolve_mode(cfg) == "sim":
        lat = cfg.simulator.latency
        if lat.p50_ms <= 0:
            return 0.0
        sigma = math.log(lat.p95_ms / lat.p50_ms) / 1.6449 if lat.p95_ms and lat.p95_ms > lat.p50_ms else 0.0
        return lat.p50_ms / 1000 * lat.scale * math.exp(sigma**2 / 2)  # the lognormal's mean
    return REAL_CALL_SECONDS


def _wall(cfg: Config, runs: tuple[RunForecast, ...], floors: tuple[Floor, ...], slots: int) -> float | None:
    if any(r.source == "unknown" for r in runs):
        return None
    each = _call_seconds(cfg, runs)
    call_seconds = sum(r.need().calls for r in runs) * each
    items = sum(r.items for r in runs)
    longest = max((r.need().calls / r.items for r in runs if r.items), default=0.0) * each
    work = call_seconds / max(1, min(slots, items or 1))
    top = max((f.seconds for f in floors), default=0.0)
    return START_SECONDS + max(work, top) + longest if items else 0.0
