"""Paired comparisons (runner/analysis/paired.py) as the terminal and report.html show them.

Both take the comparisons as JSON documents (`Paired.to_json()`): a job's own, computed from its
results, and `runner report A B`'s, read back from B's compare.json, look the same.
"""

from __future__ import annotations

import html
import json
from typing import Any

from rich.console import Console
from rich.table import Table

from runner.analysis.paired import MIN_RECORDS_FOR_TRIALS, NOTHING_VARIES, TOO_FEW

e = html.escape


def columns_that_fit(labels: list[str], rows: list[list[str]], first: int, width: int) -> int:
    """How many columns, taken in order, a terminal `width` wide shows (at least two): each costs its
    widest cell plus borders; `first`: the width of the row-name column."""
    used, shown = first + 4, 0
    for i, label in enumerate(labels):
        need = max([len(label), *(len(r[i]) for r in rows if i < len(r))]) + 3
        if used + need > width and shown >= 2:
            break
        used, shown = used + need, shown + 1
    return shown


def _p(p: float | None) -> str:
    return "-" if p is None else "<0.001" if p < 0.001 else f"{p:.2g}"


def _signed(v: float | None, kind: str) -> str:
    if v is None:
        return "-"
    return (
        f"{v:+.1%}"
        if kind == "pct"
        else f"{v:+.2f} s"
        if kind == "s"
        else f"{'+' if v >= 0 else '-'}${abs(v):.4f}"
    )


def difference(c: dict[str, Any]) -> str:
    """The difference with its interval, or why it has none (too few records; no spread between them)."""
    if c["ci95"] is None:
        return f"{c['difference']:+.1%} (no interval: {c['mde_note'] or 'too few records'})"
    lo, hi = c["ci95"]
    return f"{c['difference']:+.1%} ({lo:+.1%} to {hi:+.1%})"


def detectable(c: dict[str, Any]) -> str:
    """The smallest difference these pairs would show, or why none (the footnote explains both words)."""
    if c["mde"] is not None:
        return f"{c['mde']:.1%}"
    differ = (len(c["won"]) + len(c["lost"])) / c["paired"] if c["paired"] else 0.0
    if c["mde_note"] == TOO_FEW and c.get("method") != "paired-means" and differ:
        return f"> {differ:.0%}"  # no difference these records could show: at most the share that differs
    return {TOO_FEW: "too few", NOTHING_VARIES: "nothing varies"}.get(c["mde_note"], "-")


def cells(c: dict[str, Any]) -> dict[str, str]:
    """One comparison's values as text, by column label, in the order a narrow terminal keeps them: how it
    compares, by how much, how sure; then the rest (before, p and the verdict went first at 80 columns)."""
    s, paired = c["success"], bool(c["paired"])
    out = {
        "verdict": c["verdict"],
        "difference (95% CI)": difference(c) if paired else "-",
        "p": _p(c["p_value"]) if paired else "-",
        "won/lost": f"{len(c['won'])}/{len(c['lost'])}",
        "pairs": str(c["paired"]),
        "success": f"{s['reference']:.1%} -> {s['run']:.1%}" if paired else "-",
        "detectable": detectable(c) if paired else "-",
    }
    cached = " (cache)" if c["cached"] else ""
    out |= {
        f"cost/record{cached}": _signed(c["cost_per_record"]["difference"], "usd"),
        f"cost/success{cached}": _signed(c["cost_per_success"]["difference"], "usd"),
        f"latency{cached}": _signed(c["latency_s"]["difference"], "s"),
    }
    return out


FOOTNOTE = (
    "verdict: better or worse where the 95 % interval leaves out 0 and p < 0.05, borderline where only one "
    "of the two says so, too few records to tell where these records could not show a difference at all. "
    "detectable: the smallest difference these records would show at 80 % power ('> X%': more than the share "
    "of records whose outcome differs, the largest difference they could show, so none they could; 'too "
    "few': "
    "too few records for any; 'nothing varies': every record came out alike in both runs)"
)


def notes(c: dict[str, Any]) -> list[str]:
    """What the table leaves out: records not in both runs, pairs an error or cut turn broke."""
    out = []
    for key, where in (("only_in_reference", c["reference"]), ("only_in_run", c["run"])):
        if ids := c[key]:
            out.append(f"{len(ids)} record(s) only in {where} (left out): {_ids(ids)}")
    if ids := c["unfinished"]:
        out.append(
            f"{len(ids)} shared record(s) not finished in both (an error or a cut turn; left out): "
            f"{_ids(ids)}"
        )
    return out


def _ids(ids: list[str], shown: int = 5) -> str:
    return ", ".join(ids[:shown]) + (f" (+{len(ids) - shown} more)" if len(ids) > shown else "")


def print_paired(pairs: list[dict[str, Any]], console: Console, reference_label: str | None = None) -> None:
    """Each run against the reference: as many columns as the terminal is wide."""
    if not pairs:
        return
    reference = reference_label or pairs[0]["reference"]
    rows = {c["run"]: cells(c) for c in pairs}
    labels = list(dict.fromkeys(k for r in rows.values() for k in r))
    shown = columns_that_fit(
        labels,
        [[r.get(label, "") for label in labels] for r in rows.values()],
        max([3, *map(len, rows)]),
        console.width,
    )
    t = Table(title=f"against {reference}, on the records both finished")
    t.add_column("run", no_wrap=True)
    for label in labels[:shown]:
        t.add_column(label, justify="right", no_wrap=True)
    for run, row in rows.items():
        style = {"better": "green", "worse": "red", "borderline": "yellow"}.get(row.get("verdict", ""))
        t.add_row(run, *(row.get(label, "-") for label in labels[:shown]), style=style)
    console.print(t)
    for c in pairs:
        for line in notes(c):
            console.print(f"[dim]{c['run']}: {line}[/dim]")
    if any(c.get("method") == "paired-means" for c in pairs):
        console.print(
            "[dim]repeated trials: difference of each record's share of successful trials, 95 % interval "
            f"and p from their spread (clustered by record; none under {MIN_RECORDS_FOR_TRIALS} records); "
            "won/lost: records whose share rose/fell[/dim]"
        )
    else:
        console.print(
            "[dim]difference: 95 % interval for paired proportions (Newcombe); p: exact McNemar[/dim]"
        )
    console.print(f"[dim]{FOOTNOTE}[/dim]")
    if shown < len(labels):
        console.print(f"[dim]not shown at this width ({', '.join(labels[shown:])}): see report.html[/dim]")


def paired_html(pairs: list[dict[str, Any]], plot: str, heading: str) -> str:
    """The comparison section: the forest plot, then a table whose won/lost counts list those records."""
    if not pairs:
        return ""
    head = "".join(f"<th>{e(k)}</th>" for k in cells(pairs[0]))
    body = []
    for c in pairs:
        row = cells(c)
        tds = []
        for k, v in row.items():
            if k == "won/lost" and c["paired"]:
                tds.append(f"<td>{_pick(c, 'won')} / {_pick(c, 'lost')}</td>")
            else:
                cls = f' class="v {_word(c)}"' if k == "verdict" else ""
                tds.append(f"<td{cls}>{e(v)}</td>")
        extra = "".join(f"<li>{e(line)}</li>" for line in notes(c))
        body.append(
            f'<tr><th class="run">{e(c["run"])}</th>{"".join(tds)}</tr>'
            + (f'<tr><td colspan="{len(row) + 1}" class="m"><ul>{extra}</ul></td></tr>' if extra else "")
        )
    return (
        f'<h2 id="comparison">{e(heading)}</h2>{plot}'
        f'<table id="paired"><tr><th>run</th>{head}</tr>{"".join(body)}</table>'
        '<p class="m">On the records both runs finished: the difference in success with Newcombe\'s paired '
        "95 % "
        "interval and the exact McNemar p-value; won/lost are the records the run solved and the reference "
        "did "
        f"not, and the other way round (click to list them). {e(FOOTNOTE)}. See docs/report.md.</p>"
    )


def _word(c: dict[str, Any]) -> str:
    """The verdict's first word, as a class name (better, worse, borderline, no, too)."""
    return str(c["verdict"]).split()[0]


def headline_html(sections: list[tuple[list[dict[str, Any]], str, str]]) -> str:
    """The report's first lines: for each run, against its reference, whether it is better, by how much and
    how sure, as sentences that wrap on a phone instead of a table that scrolls sideways (before, p and the
    verdict were two swipes right at 390 px)."""
    parts = []
    for pairs, _, against in sections:
        items = "".join(
            f'<li><b class="run">{e(c["run"])}</b> <span class="v {_word(c)}">{e(c["verdict"])}</span> '
            + (
                f'<span class="d">{e(difference(c))}</span> <span class="p">p {e(_p(c["p_value"]))}</span> '
                f'<span class="m">won {len(c["won"])}, lost {len(c["lost"])} of {c["paired"]} pairs</span>'
                if c["paired"]
                else ""
            )
            + "</li>"
            for c in pairs
        )
        parts.append(
            f'<p class="against">against {e(against)}, on the records both finished:</p><ul>{items}</ul>'
        )
    return f'<section id="headline">{"".join(parts)}</section>' if parts else ""


def _pick(c: dict[str, Any], which: str) -> str:
    ids = c[which]
    label = (
        f"{len(ids)} records {c['run']} {'solved' if which == 'won' else 'failed'} and {c['reference']} "
        f"{'failed' if which == 'won' else 'solved'}"
    )
    return (
        f'<button class="pick {which}" data-ids="{e(json.dumps(ids))}" data-label="{e(label)}" '
        f"{'disabled' if not ids else ''}>{len(ids)}</button>"
    )
