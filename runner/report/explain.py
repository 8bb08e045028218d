"""Why a record ended as it did, in the terminal: what the report's drill-down shows, for `runner show`
and at the end of `runner debug`.

Per run: its outcome in the report's words (solved, failed, error and its cause), its metrics (shares
as percentages), and for a failure its `anatomy` when the harness wrote one (the built-in CRM does):
per turn the expected calls against those made, wrong arguments with both values, calls nobody
expected, then the rows of the final database that differ from the expected state. Atlas's steps and
where the model calls came from (the response cache or the model) follow. Rich prints colour on a
terminal and plain text to a pipe.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape

from runner.results.result import Earlier, Result, flaky, metric_cell, outcome, share_metrics

WORDS = {
    "success": "[green]solved[/]",
    "failure": "[yellow]failed[/]",
    "unscored": "finished, not scored",
    "cut": "[red]cut[/] (a turn the model did not finish)",
    "error": "[red]error[/]",
}


def _v(x: Any) -> str:
    return escape(x if isinstance(x, str) else json.dumps(x, default=str))


def _call(tool: str, args: Any) -> str:
    return f"[yellow]{escape(tool)}[/]({_v(args)})"


def anatomy_lines(a: Mapping[str, Any]) -> list[str]:
    """The anatomy as lines of rich markup (runner/report/anatomy.py draws the same as HTML)."""
    lines: list[str] = []
    for t in a.get("turns") or []:
        if not isinstance(t, dict):
            continue
        mark = "[green]✓[/]" if t.get("right") else "[red]✗[/]"
        lines.append(f"{mark} turn {t.get('turn')}: [italic]{escape(str(t.get('user', '')))}[/]")
        for x in t.get("expected") or []:
            if not x.get("made"):
                lines.append(f"    [red]not made:[/] {_call(x['tool'], x.get('args'))}")
            elif x.get("wrong_args"):
                wrong = "; ".join(
                    f"[bold]{escape(str(w['arg']))}[/] expected {_v(w['expected'])}, got {_v(w['got'])}"
                    for w in x["wrong_args"]
                )
                lines.append(f"    [red]wrong arguments[/] to {escape(x['tool'])}: {wrong}")
            else:
                lines.append(f"    [green]as expected:[/] {escape(x['tool'])}")
        for u in t.get("unexpected") or []:
            what = "[red]not expected (writes):[/]" if u.get("writes") else "[dim]not expected:[/]"
            lines.append(f"    {what} {_call(u['tool'], u.get('args'))}{'' if u.get('ok') else ' (failed)'}")
    state = a.get("state")
    if isinstance(state, dict) and state:
        lines.append("database, against the expected final state:")
        for table, d in state.items():
            if not isinstance(d, dict):
                continue
            for c in d.get("changed") or []:
                cols = "; ".join(
                    f"[bold]{escape(k)}[/] expected {_v(v['expected'])}, got {_v(v['got'])}"
                    for k, v in (c.get("columns") or {}).items()
                )
                lines.append(f"    {escape(table)} row {escape(str(c.get('id')))} changed: {cols}")
            for kind in ("missing", "extra"):
                for row in d.get(kind) or []:
                    lines.append(f"    {escape(table)} row {escape(str(row.get('id')))} {kind}: {_v(row)}")
    return lines


def _steps(steps: list[Any]) -> list[str]:
    def said(p: Any) -> str:
        if not isinstance(p, dict):
            return ""
        calls = [_call(str(c.get("name")), c.get("args")) for c in p.get("calls") or []]
        return "; ".join(calls) if calls else f"says: {escape(str(p.get('text') or ''))[:200]}"

    out = []
    for s in steps:
        if isinstance(s, dict):
            verdict = s.get("verdict")
            teacher = (
                "[green]approves[/]"
                if verdict == "approve"
                else f"[red]revises[/]: {escape(str(s.get('guidance') or ''))}"
            )
            out.append(
                f"    {int(s.get('turn', 0)) + 1}.{int(s.get('step', 0)) + 1} student "
                f"{said(s.get('proposed'))}"
                f"; teacher {teacher}; ran {said(s.get('executed'))}"
            )
    return out


def cache_line(calls: list[Any]) -> str | None:
    """Where the model calls came from: a replay from the response cache is not the model answering now."""
    kept = [c for c in calls if isinstance(c, dict)]
    if not kept:
        return None
    cached = sum(1 for c in kept if c.get("cached"))
    if not cached:
        return f"{len(kept)} model call(s), each answered by the model"
    return (
        f"{cached} of {len(kept)} model call(s) replayed from the response cache, not answered by the model "
        "now "
        "(--no-cache calls the models)"
    )


def explain_result(console: Console, label: str, r: Result, shares: set[str], *, steps: bool = True) -> None:
    """One result in the report's words: outcome, metrics (`shares` as percentages), error, why it failed,
    Atlas's steps (`steps`: `runner debug` printed them as they happened), where its model calls came from."""
    output = r.output or {}
    metrics = ", ".join(
        f"{k.replace('_', ' ')} {metric_cell(v, k in shares)}" for k, v in r.metrics.items() if v is not None
    )
    console.print(
        f"[bold]{escape(label)}[/]: {outcome_words(r)}" + (f"  {metrics}" if metrics else ""), soft_wrap=True
    )
    if r.error:
        console.print(f"    [red]{escape(r.error)}[/]", soft_wrap=True)
    if isinstance(output.get("anatomy"), dict):
        for line in anatomy_lines(output["anatomy"]):
            console.print(f"  {line}", soft_wrap=True)
    if steps and isinstance(output.get("steps"), list) and output["steps"]:
        console.print("  Atlas's steps:")
        for line in _steps(output["steps"]):
            console.print(line, soft_wrap=True)
    if (said := cache_line(output.get("model_calls") or [])) is not None:
        console.print(f"  [dim]{escape(said)}[/]", soft_wrap=True)
    for x in r.earlier:  # what a rerun (--lf, --rerun-errors) replaced: still there to read
        console.print(
            f"  attempt {x.attempt}, replaced by a rerun: {outcome_words(x)}"
            + (f"  [red]{escape(x.error)}[/]" if x.error else ""),
            soft_wrap=True,
        )


def outcome_words(r: Result | Earlier) -> str:
    kind = outcome(r)
    if kind == "error":
        return f"{WORDS['error']} ({escape(str(r.error_kind))})"
    if isinstance(r, Result) and flaky(r):
        return f"{WORDS[kind]} [yellow](flaky: it failed before, and succeeded asked again)[/]"
    return WORDS[kind]


def show_record(console: Console, runs: Mapping[str, list[Result]], record_id: str) -> None:
    """Every run's result for one record (each trial where there were several), failures explained."""
    found = {
        run: sorted((r for r in rows if r.record_id == record_id), key=lambda r: r.epoch)
        for run, rows in runs.items()
    }
    every = [r for rs in found.values() for r in rs]
    first = next((r for r in every if r.ok), every[0])  # an error's result holds neither requests nor groups
    shares = share_metrics(r for rows in runs.values() for r in rows)
    facts = ", ".join(v for vs in first.groups.values() for v in vs)
    console.rule(f"{record_id}" + (f" ({facts})" if facts else ""))
    users = [
        m.get("text")
        for m in (first.output or {}).get("transcript") or []
        if isinstance(m, dict) and m.get("role") == "user"
    ]
    for i, text in enumerate(users, 1):
        console.print(f"[bold cyan]user {i}[/]  {escape(str(text))}", soft_wrap=True)
    for run, rs in found.items():
        if not rs:
            console.print(f"[bold]{escape(run)}[/]: not run")
        for r in rs:
            label = run if len(rs) == 1 else f"{run}, trial {r.epoch}"
            explain_result(console, label, r, shares)
