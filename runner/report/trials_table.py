"""Repeated trials (runner/analysis/trials.py) as the terminal and report.html show them."""

from __future__ import annotations

import html
from typing import Any

from rich.console import Console
from rich.table import Table

e = html.escape


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def rows(metrics: dict[str, dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Per run with repeated trials, its cells by column label."""
    out = {}
    for name, m in metrics.items():
        t = m.get("trials")
        if not t:
            continue
        n = t["trials_per_record"]
        ci = m["success_ci95"]
        cells = {
            "trials": f"{n} x {t['records']} records",
            f"success ({t['reducer']})": _pct(m["success_rate"]),
            "95% CI": f"{ci[0]:.1%}-{ci[1]:.1%}" if ci else "-",
            "SE clustered": f"{t['se_clustered']:.3f}",
            "SE if independent": f"{t['se_if_independent']:.3f}",
            "flips": f"{t['flip_share']:.0%}",
        }
        for k in sorted({1, 2, n} & set(range(1, n + 1))):
            cells[f"pass@{k}"] = _pct(t["pass_at_k"].get(k, t["pass_at_k"].get(str(k))))
        cells[f"pass^{n}"] = _pct(t["pass_hat_k"].get(n, t["pass_hat_k"].get(str(n))))
        out[name] = cells
    return out


def print_trials(metrics: dict[str, dict[str, Any]], console: Console) -> None:
    table = rows(metrics)
    if not table:
        return
    labels = list(dict.fromkeys(k for r in table.values() for k in r))
    t = Table(title="repeated trials: success over records, its error clustered by record")
    t.add_column("run", no_wrap=True)
    for label in labels:
        t.add_column(label, justify="right", no_wrap=True)
    for run, r in table.items():
        t.add_row(run, *(r.get(label, "-") for label in labels))
    console.print(t)
    console.print(
        "[dim]pass@k: at least one of k trials succeeds; pass^k: all k do; flips: records whose trials "
        "disagree. See docs/report.md.[/dim]"
    )


def trials_html(metrics: dict[str, dict[str, Any]]) -> str:
    table = rows(metrics)
    if not table:
        return ""
    labels = list(dict.fromkeys(k for r in table.values() for k in r))
    head = "".join(f"<th>{e(k)}</th>" for k in labels)
    body = "".join(
        f'<tr><th class="run">{e(run)}</th>'
        + "".join(f"<td>{e(r.get(k, '-'))}</td>" for k in labels)
        + "</tr>"
        for run, r in table.items()
    )
    return (
        '<h2 id="trials">Repeated trials</h2><table '
        f'id="trial-table"><tr><th>run</th>{head}</tr>{body}</table>'
        '<p class="m">Each record ran several times. Success is over records (their trials reduced as the '
        "config's reducer says), its interval from the standard error clustered by record (Miller 2024); "
        "pass@k: at least one of k trials succeeds, pass^k: all k do; flips: records whose trials "
        "disagree.</p>"
    )
