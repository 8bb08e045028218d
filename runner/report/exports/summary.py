"""The summary as markdown, for a CI job's page (`runner report OUT --summary FILE`; GitHub Actions shows
what lands in $GITHUB_STEP_SUMMARY).

The terminal's numbers in the terminal's words: the marks that keep a number from being misread
(simulated, INCOMPLETE, answers from the cache), one row per run (success with its 95 % interval, errors,
cut turns, each metric, cost, latency), the paired comparison of every run with the reference run, and, given
`runner report A B`'s comparison, each run of B against the same run of the earlier output A. The columns of
the comparisons are report/paired_table.py's `cells`, the same as the terminal's and report.html's.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from runner.report.build import Analysis, banners, reference_run, success_cell
from runner.report.paired_table import FOOTNOTE, cells, notes
from runner.report.trials_table import rows as trial_rows
from runner.results.result import share_metrics

STEP_SUMMARY = "GITHUB_STEP_SUMMARY"


def _md(s: object) -> str:
    """A table cell: pipes would end it, newlines the row."""
    return str(s).replace("|", "\\|").replace("\n", " ")


def table(head: list[str], rows: list[list[str]], right_from: int = 1) -> list[str]:
    aligns = ["---" if i < right_from else "--:" for i in range(len(head))]
    return [
        "| " + " | ".join(map(_md, head)) + " |",
        "| " + " | ".join(aligns) + " |",
        *("| " + " | ".join(map(_md, r)) + " |" for r in rows),
    ]


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def runs_table(a: Analysis) -> list[str]:
    shares = share_metrics(r for rows in a.runs.values() for r in rows)
    names = list(dict.fromkeys(k for m in a.metrics.values() for k in m["metrics"]))
    cut = any(m["cut"] for m in a.metrics.values())
    head = [
        "run",
        "records",
        "success (95% CI)",
        "errors",
        *(["cut"] if cut else []),
        *(n.replace("_", " ") for n in names),
        "cost $",
        "p50 s",
        "model calls",
    ]
    body = []
    for run, m in a.metrics.items():
        star = "*" if m["cache_hit_rate"] else ""  # cost and latency partly the cache's (CACHE_MARKED)
        cost = "unknown" if m["cost_usd"] is None else f"{m['cost_usd']:.4f}"
        values = [(m["metrics"].get(n)) for n in names]
        body.append(
            [
                run,
                str(m["records"]),
                success_cell(m),
                str(m["errors"]),
                *([str(m["cut"])] if cut else []),
                *(
                    "-" if v is None else _pct(v) if n in shares else f"{v:.3g}"
                    for n, v in zip(names, values, strict=True)
                ),
                cost + star,
                f"{m['latency_p50_s']:.3g}" + star,
                str(m["llm_calls"]),
            ]
        )
    return table(head, body)


def paired_section(pairs: list[dict[str, Any]], heading: str) -> list[str]:
    if not pairs:
        return []
    by_run = {c["run"]: cells(c) for c in pairs}
    head = list(dict.fromkeys(k for r in by_run.values() for k in r))
    out = [
        f"### {heading}",
        "",
        *table(["run", *head], [[run, *(r.get(k, "-") for k in head)] for run, r in by_run.items()]),
    ]
    extra = [f"- {c['run']}: {line}" for c in pairs for line in notes(c)]
    if any(c.get("method") == "paired-means" for c in pairs):
        explained = (
            "Repeated trials: the difference of each record's share of successful trials, its 95 % interval "
            "and p from their spread (clustered by record)."
        )
    else:
        explained = (
            "On the records both runs finished: the difference with Newcombe's paired 95 % interval, the "
            "exact McNemar p-value; won/lost are the records the run solved and the reference did not, and "
            "the other way round."
        )
    return [*out, "", *extra, *([""] if extra else []), f"_{explained} {FOOTNOTE}._", ""]


def trials_section(a: Analysis) -> list[str]:
    t = trial_rows(a.metrics)
    if not t:
        return []
    head = list(dict.fromkeys(k for r in t.values() for k in r))
    return [
        "### Repeated trials",
        "",
        *table(["run", *head], [[run, *(r.get(k, "-") for k in head)] for run, r in t.items()]),
        "",
        "_pass@k: at least one of k trials succeeds; pass^k: all k do; flips: records whose trials "
        "disagree._",
        "",
    ]


def summary_markdown(a: Analysis, title: str, baseline: dict[str, Any] | None = None) -> str:
    """The output `a` in markdown; `baseline`: its comparison with A (`runner report A B`'s compare.json)."""
    lines = [f"## {title}", ""]
    for kind, text in banners(a.manifest, a.metrics).items():
        lines += [f"> **{kind}**: {text}" if kind == "incomplete" else f"> {text}", ""]
    lines += [*runs_table(a), ""]
    if any(m["cache_hit_rate"] for m in a.metrics.values()):
        lines += ["_* partly answered from the response cache: that cost and latency are the cache's._", ""]
    lines += trials_section(a)
    if a.pairs:
        lines += paired_section(
            a.pairs, f"Against {reference_run(a.manifest, a.runs)}, on the records both finished"
        )
    if baseline is not None:
        same = "" if baseline.get("same_dataset", True) else " (different datasets)"
        lines += paired_section(
            list(baseline["runs"].values()),
            f"Against the earlier output {baseline['a']}{same}, each run against itself",
        )
        if only := baseline.get("only_in_one"):
            lines += [f"Runs in only one of the two outputs: {', '.join(only)}", ""]
    return "\n".join(lines).rstrip() + "\n"


def write_summary(markdown: str, path: str) -> list[str]:
    """To `path` ("-": standard output) and, where GitHub Actions set one, appended to the job's step summary
    (once, if `path` is that file). Returns the files it went to."""
    wrote = []
    step = os.environ.get(STEP_SUMMARY)
    if path == "-":
        sys.stdout.write(markdown)
    elif not (step and Path(path).resolve() == Path(step).resolve()):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(markdown, encoding="utf-8")
        wrote.append(path)
    if step:
        with open(step, "a", encoding="utf-8") as f:  # GitHub's file: every step's summary is appended
            f.write(markdown + "\n")
        wrote.append(f"${STEP_SUMMARY}")
    return wrote
