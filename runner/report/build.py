"""Results -> tables (terminal), report.json and report.html."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from runner.analysis.metrics import CACHE_MARKED, run_metrics
from runner.analysis.paired import Paired, against, best
from runner.report.foreseen import foreseen, foreseen_lines
from runner.report.paired_table import columns_that_fit, print_paired
from runner.report.trials_table import print_trials
from runner.results import manifest as manifests
from runner.results.atomic import write_atomically
from runner.results.manifest import INTERACTIVE_PREFIX, Manifest
from runner.results.result import Result, share_metrics
from runner.results.sink import read_results


def banners(manifest: Manifest, metrics: dict[str, dict[str, Any]]) -> dict[str, str]:
    """What a reader must know before reading any number, by kind: simulated models, an incomplete output,
    answers from the response cache."""
    out = {"simulated": SIMULATED} if manifest.simulated else {}
    if manifest.complete is False:
        missing = manifest.missing
        stop = manifest.stopped_early
        why = (
            "interrupted"
            if manifest.interrupted
            else "stopped by an error"
            if manifest.error
            else f"stopped at --maxfail {stop}"
            if stop
            else manifest.stopped_at_budget
            if manifest.stopped_at_budget
            else "records not run (interrupted, stopped early or not selected)"
        )
        n = sum(missing.values())
        # one instruction, the same as the command's last line (after --maxfail it said two that disagreed)
        out["incomplete"] = (
            f"INCOMPLETE ({why}): {n} result(s) missing"
            + (f" ({', '.join(f'{r}: {k}' for r, k in missing.items())})" if missing else "")
            + (
                "; the same command without -x/--maxfail runs the rest"
                if stop and not manifest.interrupted
                else "; the same command with a higher --budget runs the rest"
                if manifest.stopped_at_budget
                else "; run the same command again to finish"
            )
        )
    if (skipped := manifest.rejected) and skipped.count:
        out["rejected"] = (
            f"{skipped.count} bad dataset line(s) skipped (--skip-invalid): in no result and no "
            f"rate; their reasons are in {skipped.file}"
        )
    if manifest.batch_runs:
        out["batched"] = _batched(manifest, metrics)
    if cached := {n: m["cache_hit_rate"] for n, m in metrics.items() if m["cache_hit_rate"]}:
        shares = ", ".join(f"{n} {v:.0%}" for n, v in cached.items())
        out["cached"] = (
            f"from the response cache: {shares} of model calls; cost and latency marked * are the "
            "cache's, not the models' (--no-cache calls the models)"
        )
    return out


def _batched(manifest: Manifest, metrics: dict[str, dict[str, Any]]) -> str:
    """Batch mode in one line: its batches, its requests, the time calls waited, what went interactive and
    why, and what it saved: the difference the calls a batch answered were billed, no more."""
    b = manifest.batches
    runs = [m for n, m in metrics.items() if n in manifest.batch_runs]
    batched = sum(int(m.get("batched_calls") or 0) for m in runs)
    saved = sum(m.get("batch_saved_usd") or 0.0 for m in runs)
    answered = int(b.get("requests_answered", 0) + b.get("answered_from_resumed", 0))
    waited = b.get("waited_seconds", 0.0) / answered if answered else 0.0
    interactive = {
        k.removeprefix(INTERACTIVE_PREFIX): int(v)
        for k, v in b.items()
        if k.startswith(INTERACTIVE_PREFIX) and v
    }
    went = "; ".join(f"{n} call(s) went interactive: {why}" for why, n in interactive.items())
    return (
        f"batch mode ({', '.join(manifest.batch_runs)}): {int(b.get('batches_submitted', 0))} batch(es), "
        f"{answered} call(s) answered, {int(b.get('requests_retried', 0))} sent again, "
        f"{int(b.get('requests_given_up', 0))} given up; a call waited {waited:.1f} s on average"
        + (f"; {went}" if went else "")
        + (
            f"; {batched} call(s) billed at batch prices, ${saved:.4f} saved against interactive"
            if batched
            else "; no call was answered through a batch, nothing saved"
        )
    )


SIMULATED = "simulated: models played by the runner's simulator; costs are what the real APIs would charge"


def load_runs(out: Path) -> dict[str, list[Result]]:
    """Each run's results, in the config's order of runs (then any others by name): the order a reader
    wrote them in, and the first is the reference unless the config names another."""
    order = {name: i for i, name in enumerate(manifests.read(out).run_names())}
    paths = sorted((out / "results").glob("*.jsonl"), key=lambda p: (order.get(p.stem, len(order)), p.stem))
    return {p.stem: read_results(p) for p in paths}


def reference_run(manifest: Manifest, runs: dict[str, list[Result]]) -> str | None:
    """The run the others are compared against: the config's compare_to, else its first run present."""
    for name in (manifest.compare_to, *runs):
        if name in runs:
            return str(name)
    return None


def comparisons(manifest: Manifest, runs: dict[str, list[Result]]) -> list[Paired]:
    reference = reference_run(manifest, runs)
    return against(runs, reference) if reference is not None and len(runs) > 1 else []


USAGE_COLUMNS = {
    "prompt_tokens",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cost_usd",
    "cache_saved_usd",
    "retries",
    "cache_hit_rate",
}


WIDE_COLUMNS = 1000  # --wide: room for every column of every table


def _cell(v: Any, kind: str) -> str:
    if v is None:
        return "unknown" if kind == "usd" else "-"
    return (
        f"{v:.1%}"
        if kind == "pct"
        else f"{v:.4f}"
        if kind == "usd"
        else f"{v:.3g}"
        if kind == "num"
        else str(v)
    )


def _summary_columns(
    names: list[str], usage: bool, shares: set[str], trials: bool
) -> list[tuple[str, str, str]]:
    """(label, key, kind) in the order they are dropped last: what a narrow terminal shows first. Each says
    what it counts: with repeated trials, records and trials apart, and errors and cut turns as trials."""
    cols = [
        ("records", "records", "int"),
        *([("trials", "results", "int")] if trials else []),
        ("success (95% CI)", "success_rate", "pct"),
        ("errored trials" if trials else "errors", "errors", "int"),
        ("cut trials" if trials else "cut", "cut", "int"),
        ("flaky", "flaky", "int"),
        ("success, all records", "success_rate_all", "pct"),
        ("cost $", "cost_usd", "usd"),
        *[(k.replace("_", " "), k, "pct" if k in shares else "num") for k in names],
        ("p50 s", "latency_p50_s", "int"),
        ("tok in", "prompt_tokens", "int"),
        ("tok out", "output_tokens", "int"),
        ("p95 s", "latency_p95_s", "int"),
        ("retries", "retries", "int"),
        ("cache", "cache_hit_rate", "pct"),
        ("cached in", "cache_read_tokens", "int"),
        ("saved $", "cache_saved_usd", "usd"),
    ]
    return cols if usage else [c for c in cols if c[1] not in USAGE_COLUMNS]


@dataclass(frozen=True)
class Analysis:
    """What the terminal summary and the reports are made of: computed once per output, shown twice."""

    manifest: Manifest
    runs: dict[str, list[Result]]
    metrics: dict[str, dict[str, Any]]
    pairs: list[dict[str, Any]]  # every run against the reference (Paired.to_json())
    best: str | None = None  # the run better than every other one (analysis/paired.best), if one is


def analyse(out: Path, runs: dict[str, list[Result]] | None = None) -> Analysis:
    """`runs`: the results if already read (4,800 of them take ~1.4 s to read)."""
    manifest = manifests.read(out)
    runs = load_runs(out) if runs is None else runs
    metrics = {name: run_metrics(rows, manifest.reducer) for name, rows in runs.items()}
    return Analysis(
        manifest,
        runs,
        metrics,
        [c.to_json() for c in comparisons(manifest, runs)],
        best(runs, {n: m["success_rate"] for n, m in metrics.items()}),
    )


def success_cell(m: dict[str, Any]) -> str:
    """A run's success with its 95 % interval; where no record finished, no rate at all
    (it was "0.0% (0%-100%)")."""
    if m["success_rate"] is None:  # nothing measured, which is not 0 %
        return "not scored" if m["unscored"] else "none finished"
    lo, hi = m["success_ci95"]  # how far the rate could be from chance (Wilson's, or clustered with trials)
    return f"{m['success_rate']:.1%} ({lo:.0%}-{hi:.0%})"


def print_summary(
    out: Path,
    console: Console | None = None,
    runs: dict[str, list[Result]] | None = None,
    analysis: Analysis | None = None,
    wide: bool = False,
) -> dict[str, dict[str, Any]]:
    """The per-run table, as many columns as the terminal is wide (the rest are in report.html; `wide`:
    every one), then the banners, repeated trials and comparisons. `analysis`: already made (the reports
    show it too)."""
    console = console or Console()
    if wide:  # tables take the width they need; lines of text still wrap at the terminal's
        console.width = max(console.width, WIDE_COLUMNS)
    elif not console.is_terminal and not os.environ.get("COLUMNS"):  # piped: wide, unless told how wide
        console.width = max(console.width, 150)
    a = analysis or analyse(out, runs)
    manifest, metrics = a.manifest, a.metrics
    hidden = _print_table(out, a, console)
    for kind, text in banners(manifest, metrics).items():
        console.print(text, style="bold red" if kind == "incomplete" else "yellow", markup=False)
    print_trials(metrics, console)
    print_paired(a.pairs, console)
    if (fc := foreseen(manifest, metrics)) is not None:
        for line in foreseen_lines(fc):
            console.print(f"[dim]{line}[/dim]")
    if lost := sum(m["discarded"] for m in metrics.values()):
        console.print(
            f"{lost} result(s) discarded and their records run again: the sandbox did not serve the "
            "whole record (it died, froze or was replaced); only the complete attempts count"
        )
    if reruns := sum(m["reruns"] for m in metrics.values()):
        console.print(
            f"{reruns} result(s) replaced by a rerun (--lf, --rerun-errors) are kept beside the new ones; "
            "flaky: failed, then succeeded when asked again; cost counts every attempt"
        )
    for name, m in metrics.items():
        for field, n in m["unreadable"].items():
            console.print(
                f"[yellow]{name}: {field} is not a number in {n} of {m['results']} results: those are "
                "left out of its column[/yellow]"
            )
    if hidden:
        console.print(f"[dim]not shown at this width ({', '.join(hidden)}): see report.html[/dim]")
    return metrics


def _print_table(out: Path, a: Analysis, console: Console) -> list[str]:
    """The per-run table, as many columns as fit; the labels of those left out."""
    metrics = a.metrics
    names = list(dict.fromkeys(k for m in metrics.values() for k in m["metrics"]))
    cols = _summary_columns(
        names,
        any(m["llm_calls"] for m in metrics.values()),
        share_metrics(r for rows in a.runs.values() for r in rows),
        any("trials" in m for m in metrics.values()),
    )
    # a cut column where a run has cut turns (flaky: flaky records); the rate over all records where errors or
    # cuts make it differ
    shown_apart = {
        "cut": any(m["cut"] for m in metrics.values()),
        "flaky": any(m["flaky"] for m in metrics.values()),
        "success_rate_all": any(m["errors"] or m["cut"] for m in metrics.values()),
    }
    cols = [c for c in cols if shown_apart.get(c[1], True)]
    cells = {}
    for name, m in metrics.items():
        cells[name] = [
            success_cell(m)
            if key == "success_rate"
            else _cell(m["metrics"].get(key) if key in names else m[key], kind)
            + ("*" if m["cache_hit_rate"] and key in CACHE_MARKED else "")
            for _, key, kind in cols
        ]
    shown = columns_that_fit(
        [c[0] for c in cols],
        list(cells.values()),
        max([3, *(len(n) + 7 * (n == a.best) for n in metrics)]),
        console.width,
    )
    t = Table(title=f"results in {out}")
    t.add_column("run", justify="left", no_wrap=True)
    for label, _, _ in cols[:shown]:
        t.add_column(label, justify="right", no_wrap=True)
    for name, row in cells.items():
        t.add_row(f"[bold]{name} (best)[/bold]" if name == a.best else name, *row[:shown])
    console.print(t)
    return [c[0] for c in cols[shown:]]


def print_gateway(out: Path, console: Console | None = None) -> dict[str, Any]:
    """The model calls a user's harness made through the runner's gateway, per run (from the manifest)."""
    counts = manifests.read(out).gateway
    if not counts:
        return {}
    console = console or Console()
    t = Table(title="model calls through the gateway")
    cols = (
        "llm_calls",
        "errors",
        "cache_hits",
        "cache_misses",
        "retries",
        "rate_limited",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
    )
    t.add_column("run")
    for c in (*cols, "cost_usd", "mean latency"):
        t.add_column(c.replace("_", " ").replace("llm ", "").replace("cache ", ""), justify="right")
    for run, n in sorted(counts.items()):
        # A call at an unknown price makes the total unknown, never a silent $0.
        cost = "unknown" if n.get("unpriced_calls") else f"${n.get('cost_usd', 0):.4f}"
        answered = n.get("llm_calls", 0) - n.get("cache_hits", 0) - n.get("errors", 0)
        latency = f"{n.get('latency_seconds', 0) / answered:.2f} s" if answered > 0 else "-"
        t.add_row(run, *(str(int(n.get(k, 0))) for k in cols), cost, latency)
    console.print(t)
    return counts


def results_digest(runs: dict[str, list[Result]]) -> str:
    """What a report was made from: every result's identity and attempt (a rerun changes it)."""
    h = hashlib.sha256()
    for name in sorted(runs):
        for r in runs[name]:
            h.update(f"{name}\0{r.record_id}\0{r.epoch}\0{r.attempt}\0{r.finished_at}\0{r.status}\n".encode())
    return h.hexdigest()[:16]


def reports_current(out: Path, runs: dict[str, list[Result]]) -> bool:
    """report.json and report.html already show exactly these results (a resume that had nothing to do)."""
    try:
        made_from = json.loads((out / "report.json").read_text()).get("results_digest")
    except (OSError, ValueError, AttributeError):
        return False
    return made_from == results_digest(runs) and (out / "report.html").exists()


def read_comparison(out: Path) -> dict[str, Any] | None:
    """compare.json, which `runner report A B` writes into B, if this output has one in today's form."""
    try:
        doc = json.loads((out / "compare.json").read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("version") == COMPARE_VERSION else None


# 1: success on shared records, every other metric on each output's own (issue 32); 2: a verdict that agrees
# with its interval and p, and none where too few records (issue 48)
COMPARE_VERSION = 3


def shown_path(out: Path) -> str:
    """An output's directory as the report names it: relative to where the command ran when it is below it
    (out/default), else its last two parts. Never the absolute path: a report is shared, and the path said
    whose home it was made in."""
    full = out.resolve()
    try:
        return str(full.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(Path(*full.parts[-2:]))


def write_reports(
    out: Path, runs: dict[str, list[Result]] | None = None, analysis: Analysis | None = None
) -> tuple[Path, Path]:
    """report.json (metrics and breakdowns per run) and report.html, next to the results."""
    from runner.report.html import breakdown, group_names, render

    a = analysis or analyse(out, runs)
    rows, manifest, metrics, pairs = a.runs, a.manifest, a.metrics, a.pairs
    sent, through = (
        {run: [q.model_dump() for q in qs] for run, qs in manifest.requests.items()},
        manifest.gateway,
    )
    groups = group_names(rows)
    digest = results_digest(rows)
    doc = {
        "simulated": manifest.simulated,
        "results_digest": digest,
        "reference": reference_run(manifest, rows),
        "comparisons": pairs,
        "runs": {
            n: {
                **m,
                "groups": {g: breakdown(rows[n], g) for g in groups},
                "requests": sent.get(n),
                "gateway": through.get(n),
            }
            for n, m in metrics.items()
        },
        "forecast": foreseen(manifest, metrics),
    }

    sections = [(pairs, f"Against {doc['reference']}", str(doc["reference"]))] if pairs else []
    if (other := read_comparison(out)) is not None:  # `runner report A B` wrote B's: A's runs as references
        sections.append(
            (
                list(other["runs"].values()),
                f"Against the earlier output {other['a']}",
                f"the same run in {other['a']}",
            )
        )
    lost = sum(m["discarded"] for m in metrics.values())
    flight = manifest.in_flight.model_dump() if manifest.in_flight else None
    notes = banners(manifest, metrics)
    if (fc := foreseen(manifest, metrics)) is not None:
        notes["forecast"] = "forecast against result: " + "; ".join(foreseen_lines(fc))
    if lost:
        notes["discarded"] = (
            f"{lost} result(s) discarded and their records run again: the sandbox did not serve "
            "the whole record"
        )
    # each replaced whole (a Ctrl-C or a full disk leaves the last one, never half of one): report.json last,
    # its digest saying which results both were drawn from
    page = render(
        f"pgsandbox-runner report: {shown_path(out)}",
        metrics,
        rows,
        sent,
        notes=notes,
        flight=flight,
        pairs=sections,
        digest=digest,
        top=a.best,
    )
    write_atomically(out / "report.html", page)
    write_atomically(out / "report.json", json.dumps(doc, indent=2, sort_keys=True))
    return out / "report.json", out / "report.html"
