"""JUnit XML, the report every CI system shows (`runner report OUT --junit FILE`).

One <testsuite> per run and one <testcase> per record in it, `classname` the run's name, so a CI groups the
records by run (GitHub's test reporters, GitLab's test report, Jenkins). A record's outcome
(runner/results/result.py) maps onto JUnit's four:

| outcome | JUnit |
|---|---|
| success | passed |
| failure | <failure>: why it failed, as `runner show` says it (anatomy: wrong call, rows that differ) |
| error | <error type="{error_kind}">: the cause, traceback included |
| cut | <error type="cut:{error_kind}">: the model did not finish a turn (not the agent's fault, not a pass) |
| unscored | <skipped>: the harness wrote no success field |

With repeated trials (epochs) a record is one testcase whose message says "k of n trials passed"; it passes
when its trials pass the config's reducer (`mean`: every finished trial; `all`, `any`, `at_least_K` as
named). Every testcase carries its metrics and model usage in <system-out>. Elements and attributes are
those of the JUnit schema CI parsers validate against (Jenkins xunit-plugin's junit-10.xsd): <testsuites>
has no `skipped` attribute, a testcase no <properties>.
"""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich.console import Console

from runner.analysis.trials import reduce
from runner.report.build import Analysis
from runner.report.explain import explain_result
from runner.results.result import Result, metric_cell, outcome, share_metrics

# XML 1.0 has no way to write these (a harness's output or a traceback may hold them: ANSI escapes, NUL)
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_MESSAGE_CHARS = 300  # the attribute CI systems show on one line; the full text is the element's body


def _text(s: str) -> str:
    return _NOT_XML.sub("", s)


def _seconds(s: float) -> str:
    return f"{max(s, 0.0):.3f}"


def why_failed(r: Result, shares: set[str]) -> str:
    """A failure in `runner show`'s words, as plain text."""
    out = io.StringIO()
    label = r.record_id + (f", trial {r.epoch}" if r.epoch > 1 else "")
    explain_result(
        Console(file=out, width=120, color_system=None, highlight=False), label, r, shares, steps=False
    )
    return out.getvalue()


def error_message(r: Result) -> str:
    """An error in one line: its kind and, of a traceback, the exception (its last line), not its first."""
    text = (r.error or str(r.error_kind)).strip()
    if "Traceback (most recent call last)" in text:
        last = text.splitlines()[-1].strip()
        return f"{r.error_kind}: {last}"
    return text.splitlines()[0] if text else str(r.error_kind)


def _usage_line(rows: list[Result], shares: set[str]) -> str:
    lines = []
    for r in rows:
        trial = f"trial {r.epoch}: " if len(rows) > 1 else ""
        metrics = ", ".join(
            f"{k} {metric_cell(v, k in shares)}" for k, v in r.metrics.items() if v is not None
        )
        u = r.usage
        cost = "unknown" if u.cost_usd is None else f"${u.cost_usd:.4f}"
        lines.append(
            f"{trial}{outcome(r)}"
            + (f"; {metrics}" if metrics else "")
            + f"; {u.llm_calls} model call(s), {u.cache_hits} from the cache, cost {cost}, "
            f"{r.wall_seconds:.2f} s"
        )
    return "\n".join(lines)


def _trial_verdict(rows: list[Result], reducer: str) -> tuple[str, str]:
    """(outcome, message) of a record's trials taken together."""
    finished = [bool(r.success) for r in rows if outcome(r) in ("success", "failure")]
    n, k = len(rows), sum(finished)
    message = f"{k} of {n} trials passed"
    other = [f"{outcome(r)} ({r.error_kind})" for r in rows if outcome(r) in ("error", "cut")]
    if other:
        message += f"; {', '.join(other)}"
    if not finished:
        kinds = {outcome(r) for r in rows}
        return ("error" if "error" in kinds else "cut" if "cut" in kinds else "unscored"), message
    passed = all(finished) if reducer == "mean" else reduce(finished, reducer) == 1.0
    return ("success" if passed else "failure"), message


def testcase(rows: list[Result], reducer: str, shares: set[str]) -> ET.Element:
    """One record of one run (all its trials)."""
    first = rows[0]
    case = ET.Element(
        "testcase",
        classname=first.run,
        name=first.record_id,
        time=_seconds(sum(r.wall_seconds for r in rows)),
    )
    if len(rows) > 1:
        kind, message = _trial_verdict(rows, reducer)
    else:
        kind, message = outcome(first), ""
    worst = next((r for r in rows if outcome(r) == kind), first)  # the trial that shows the verdict
    if kind == "failure":
        body = why_failed(worst, shares)
        el = ET.SubElement(case, "failure", type="failure", message=_text(message or body.splitlines()[0]))
        el.text = _text(
            body
            if len(rows) == 1
            else "\n".join(why_failed(r, shares) for r in rows if outcome(r) == "failure")
        )
    elif kind in ("error", "cut"):
        kind_name = str(worst.error_kind) if kind == "error" else f"cut:{worst.error_kind}"
        el = ET.SubElement(
            case, "error", type=kind_name, message=_text((message or error_message(worst))[:_MESSAGE_CHARS])
        )
        el.text = _text("\n\n".join(r.error or "" for r in rows if r.error))
    elif kind == "unscored":
        ET.SubElement(
            case,
            "skipped",
            message=_text(message or "finished, but the harness wrote no success field: not scored"),
        )
    # a passed record's trials ("3 of 3 trials passed") are said here, where every CI shows a case's output
    out = ET.SubElement(case, "system-out")
    out.text = _text((message + "\n" if message else "") + _usage_line(rows, shares))
    return case


def _by_record(rows: Iterable[Result]) -> dict[str, list[Result]]:
    out: dict[str, list[Result]] = {}
    for r in sorted(rows, key=lambda r: (r.index, r.epoch)):
        out.setdefault(r.record_id, []).append(r)
    return out


def testsuite(
    run: str, rows: list[Result], reducer: str, metrics: dict[str, Any], shares: set[str]
) -> ET.Element:
    cases = [testcase(trials, reducer, shares) for trials in _by_record(rows).values()]
    counts = {k: sum(1 for c in cases if c.find(k) is not None) for k in ("failure", "error", "skipped")}
    suite = ET.Element(
        "testsuite",
        name=run,
        tests=str(len(cases)),
        failures=str(counts["failure"]),
        errors=str(counts["error"]),
        skipped=str(counts["skipped"]),
        time=_seconds(sum(r.wall_seconds for r in rows)),
        timestamp=min((r.started_at for r in rows), default=""),
    )
    props = ET.SubElement(suite, "properties")
    for key, value in _run_properties(metrics).items():
        ET.SubElement(props, "property", name=key, value=value)
    suite.extend(cases)
    return suite


def _run_properties(m: dict[str, Any]) -> dict[str, str]:
    """The run's headline numbers (report.json's), where a CI keeps a suite's properties."""
    if not m:
        return {}
    if m["success_rate"] is None:  # no record finished: no rate, not 0 %
        rate = {"success_rate": "none finished"}
    else:
        lo, hi = m["success_ci95"]
        rate = {"success_rate": f"{m['success_rate']:.4f}", "success_ci95": f"{lo:.4f}-{hi:.4f}"}
    return {
        **rate,
        "errors": str(m["errors"]),
        "cut": str(m["cut"]),
        "llm_calls": str(m["llm_calls"]),
        "cost_usd": "unknown" if m["cost_usd"] is None else f"{m['cost_usd']:.6f}",
        "cache_hit_rate": f"{m['cache_hit_rate']:.4f}",
    }


def junit_xml(a: Analysis, title: str) -> bytes:
    """The whole output as one JUnit document."""
    shares = share_metrics(r for rows in a.runs.values() for r in rows)
    suites = [
        testsuite(run, rows, a.manifest.reducer, a.metrics.get(run, {}), shares)
        for run, rows in a.runs.items()
        if rows
    ]
    root = ET.Element(
        "testsuites",
        name=title,
        tests=str(sum(int(s.get("tests", 0)) for s in suites)),
        failures=str(sum(int(s.get("failures", 0)) for s in suites)),
        errors=str(sum(int(s.get("errors", 0)) for s in suites)),
        time=_seconds(sum(float(s.get("time", 0)) for s in suites)),
    )
    root.extend(suites)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def write_junit(a: Analysis, path: Path, title: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(junit_xml(a, title))
    return path
