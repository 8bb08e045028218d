"""report.html: one self-contained file (inline SVG charts and CSS, no network) comparing runs."""

from __future__ import annotations

import html
import json
from collections import defaultdict
from typing import Any

from runner.analysis.metrics import CACHE_MARKED
from runner.analysis.paired import best
from runner.report.charts import chart_data, cost_vs_success, forest, in_flight, latency, success_by
from runner.report.paired_table import headline_html, paired_html
from runner.report.records import records
from runner.report.trials_table import trials_html
from runner.results.result import Result, metric_cell, share_metrics

e = html.escape


def breakdown(rows: list[Result], group: str) -> dict[str, tuple[int, int]]:
    """value -> (solved, total) over one of the results' groups (a record in two tags counts in both)."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        for v in r.groups.get(group, []):
            out[v][0] += bool(r.success)
            out[v][1] += 1
    return {k: (v[0], v[1]) for k, v in sorted(out.items())}


def group_names(rows: dict[str, list[Result]]) -> list[str]:
    return list(dict.fromkeys(g for rs in rows.values() for r in rs for g in r.groups))


def _money(v: float | None) -> str:
    return "unknown" if v is None else f"${v:.4f}"


def _caching(metrics: dict[str, dict[str, Any]], sent: dict[str, Any]) -> str:
    """Prompt caching per run, and what each run's requests really carried."""
    rows = "".join(
        f"<tr><th>{e(n)}</th><td>{m['input_tokens']}</td><td>{m['cache_read_tokens']}</td>"
        f"<td>{m['cache_write_tokens']}</td><td>{_money(m['input_cost_usd'])}</td>"
        f"<td>{_money(m['cache_saved_usd'])}</td><td>{e(_sent_text(sent.get(n)))}</td></tr>"
        for n, m in metrics.items()
    )
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "run",
            "uncached input tokens",
            "cache reads",
            "cache writes",
            "input cost",
            "saved by cache",
            "sent",
        )
    )
    return f'<h2>Prompt caching and requests</h2><table id="caching"><tr>{head}</tr>{rows}</table>'


def _sent_text(info: Any) -> str:
    if not info:
        return "-"
    parts = [
        f"{m['model']}: {json.dumps(m['params'], sort_keys=True)}"
        + (f", not sent: {', '.join(m['dropped'])}" if m["dropped"] else "")
        for m in info
    ]
    return "; ".join(parts)


BARS_MAX_VALUES = 6  # a group with more values reads better as a table


def _groups(names: list[str], rows: dict[str, list[Result]]) -> str:
    parts = []
    for g in group_names(rows):
        by = {n: breakdown(rows[n], g) for n in names}
        values = sorted({v for d in by.values() for v in d})
        if len(values) <= BARS_MAX_VALUES:
            parts.append(success_by(g, by))
        else:
            heat = "".join(
                f"<tr><th>{e(v)}</th>" + "".join(_heat_cell(by[n].get(v)) for n in names) + "</tr>"
                for v in values
            )
            parts.append(
                f'<h3>success by {e(g)}</h3><table class="groups" id="group-{e(g)}"><tr><th>{e(g)}</th>'
                f"{''.join(f'<th>{e(n)}</th>' for n in names)}</tr>{heat}</table>"
            )
    return "".join(parts)


LABELS = {
    "records": "records",
    "results": "trials",
    "flaky": "flaky (failed, then passed)",
    "success_rate": "success (95 % CI)",
    "success_rate_all": "success, all records",
    "cut": "cut turns",
    "prompt_tokens": "tokens in",
    "output_tokens": "tokens out",
    "cost_usd": "cost",
    "latency_p50_s": "p50 s",
    "latency_p95_s": "p95 s",
    "errors": "errors",
    "retries": "retries",
    "cache_hit_rate": "cache hits",
}


def label(column: str, trials: bool) -> str:
    """A summary column's header, saying what it counts: with repeated trials, errors and cut turns are
    trials."""
    text = LABELS.get(column, column.replace("_", " "))
    return {"errors": "errored trials", "cut": "cut trials"}.get(column, text) if trials else text


def _count(v: float) -> str:
    """34878 -> 34.9k: a column of token counts fits the width of its header."""
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.3g}{unit}"
    return f"{v:g}"


def _tokens_in(m: dict[str, Any]) -> str:
    """Every prompt token, and beside it how many were new, read from the prompt cache, written to it."""
    total = m["prompt_tokens"]
    parts = [("new", m["input_tokens"]), ("read", m["cache_read_tokens"])]
    split = " + ".join(f"{_count(n)} {what}" for what, n in parts if n)
    if m["cache_write_tokens"]:  # a line of its own: the column stays as narrow as its widest line
        split += f"<br>+ {_count(m['cache_write_tokens'])} written"

    title = (
        f"{total} prompt tokens: {m['input_tokens']} not from the prompt cache, {m['cache_read_tokens']} "
        "read "
        f"from it, {m['cache_write_tokens']} written to it"
    )
    shown = f' <span class="ci split">{split}</span>' if m["input_tokens"] != total else ""
    return f'<td title="{title}">{_count(total)}{shown}</td>'


def _summary(metrics: dict[str, dict[str, Any]], shares: set[str], top: str | None) -> str:
    names = list(dict.fromkeys(k for m in metrics.values() for k in m["metrics"]))
    usage = (
        ["prompt_tokens", "output_tokens", "cost_usd"]
        if any(m["llm_calls"] for m in metrics.values())
        else []
    )
    # a cut-turns column where a run has some; success over all records beside the rate where they differ
    apart = [
        c
        for c, shown in (
            ("cut", any(m["cut"] for m in metrics.values())),
            ("flaky", any(m["flaky"] for m in metrics.values())),
            ("success_rate_all", any(m["errors"] or m["cut"] for m in metrics.values())),
        )
        if shown
    ]
    trials = any("trials" in m for m in metrics.values())
    cols = [
        "records",
        *(["results"] if trials else []),
        "success_rate",
        "errors",
        *apart,
        *names,
        *usage,
        "latency_p50_s",
        "latency_p95_s",
        *(["retries", "cache_hit_rate"] if usage else []),
    ]

    def cell(m: dict[str, Any], c: str) -> str:
        v = m["metrics"].get(c) if c in names else m[c]
        if v is None and c == "success_rate":  # nothing measured, not 0 %
            return (
                '<td title="no result has a success field">not scored</td>'
                if m["unscored"]
                else '<td title="every result ended in an error or a cut turn: none finished">'
                "none finished</td>"
            )
        if v is None:
            return "<td>unknown</td>" if c == "cost_usd" else "<td>-</td>"
        if c == "success_rate":
            lo, hi = m["success_ci95"]
            return f'<td>{v:.1%} <span class="ci">{lo:.0%}-{hi:.0%}</span></td>'
        if c == "prompt_tokens":  # all of them, then where they came from
            return _tokens_in(m)
        if c == "output_tokens":
            return f'<td title="{v}">{_count(v)}</td>'
        if m["cache_hit_rate"] and c in CACHE_MARKED:
            return (
                f'<td title="{m["cache_hit_rate"]:.0%} of calls answered by the response cache">'
                + (f"${v:.4f}" if c == "cost_usd" else f"{v:.3g}")
                + "*</td>"
            )
        return (
            f"<td>{v:.1%}</td>"
            if c in ("cache_hit_rate", "success_rate_all")
            else f"<td>${v:.4f}</td>"
            if c == "cost_usd"
            else f"<td>{metric_cell(v, c in shares)}</td>"
            if c in names
            else f"<td>{v:.3g}</td>"
            if c.startswith("latency")
            else f"<td>{v}</td>"
        )

    head = "".join(f"<th>{e(label(c, trials))}</th>" for c in cols)
    rows = "".join(
        f'<tr><th class="run{" best" if n == top else ""}">{e(n)}</th>'
        + "".join(cell(m, c) for c in cols)
        + "</tr>"
        for n, m in metrics.items()
    )
    return f'<h2>Summary</h2><table id="summary"><tr><th>run</th>{head}</tr>{rows}</table>'


# The page's style: it reflows below 760 px (runs one under another, those that failed first: a failed record
# opens on the run that failed), tables scroll inside themselves,
# Atlas's steps stack inside their run's column (a 4-column table in a quarter of the page broke per letter).
STYLE = """body{font:14px system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0;display:block;max-width:100%;overflow-x:auto}
td,th{border:1px solid #ddd;padding:4px 8px;text-align:right} th{text-align:left;background:#f6f6f6}
.chart{max-width:680px;display:block;margin:1em 0;font-size:11px} .chart .t{font-size:13px;font-weight:600}
.grid{stroke:#ccc} details{border-left:4px solid #ccc;margin:4px 0;padding:2px 8px}
details.ok{border-color:#54a24b}
details.fail{border-color:#f58518} details.error{border-color:#e45756}
.side{display:grid;gap:12px;grid-template-columns:repeat(var(--runs),minmax(0,1fr))}
.col{min-width:0;overflow-wrap:break-word;overflow-x:auto} .col h4{margin:6px 0}
.col pre,.col code{overflow-wrap:anywhere}
.steps,.steps tbody,.steps tr,.steps td{display:block;border:0;padding:1px 0}
.steps tr:first-child{display:none}
.steps tr{border-top:1px solid #ddd;padding:3px 0} .steps td::before{content:attr(data-label) ": ";color:#666}
.steps code{overflow-wrap:break-word}
.chart svg{max-width:100%;height:auto}
details.raw{border-left:0;padding:0} details.raw summary{color:#666;cursor:pointer}
a.link{color:#999;text-decoration:none} #q{width:14em}
@media (max-width:760px){body{margin:.6em} .side{grid-template-columns:1fr} #filters label{display:block;
margin:4px 0} h1{font-size:1.3em;overflow-wrap:anywhere} .note{font-size:12px;padding:4px 8px}
.side>.col.fail,.side>.col.error{order:-1}}
.b{display:inline-block;padding:0 6px;margin:0 2px;border-radius:3px;font-size:12px;color:#fff;
background:#999}
.b.ok{background:#54a24b} .b.fail{background:#f58518} .b.error{background:#e45756} .g,.m{color:#666}
#filters label{margin-right:14px} #shown{color:#666} .u{margin-top:8px} .c{color:#555}
.res code{color:#2a6} .err,.err code{color:#c33} pre{background:#f6f6f6;padding:4px;white-space:pre-wrap}
.anatomy li.miss,.anatomy li.wrong{color:#c33} .anatomy li.okc{color:#2a6} .anatomy li.extra{color:#777}
.diff td,.steps td{text-align:left} .steps td.revise{color:#c33}
.ci{color:#777;font-size:12px;display:block} #summary{font-size:13px}
#summary tr:first-child th{white-space:normal;max-width:7em;vertical-align:bottom;text-align:right}
#summary th.run{white-space:nowrap} #summary tr:first-child th:first-child{text-align:left}
.note{background:#fff4d6;border:1px solid #e8c45c;padding:6px 10px;margin:4px 0}
.ci.split{white-space:nowrap} #incomplete{background:#fde2e1;border-color:#e45756;font-weight:600}
.v{font-weight:600} .v.better{color:#2a6} .v.worse{color:#c33} .v.borderline{color:#a67c00}
.v.too,.v.no{color:#555}
#headline ul{list-style:none;padding:0;margin:.2em 0 1em} #headline li{margin:.35em 0;font-size:15px}
#headline .d{white-space:nowrap} #headline .p{white-space:nowrap} .against{margin:.6em 0 0;color:#555}
.b.flaky::after{content:" flaky"} details.earlier{margin-top:8px} p.more{margin:8px 0}
#paired td,#paired th.run{white-space:nowrap} #paired td.m{white-space:normal}
#paired ul{margin:0;padding-left:1.2em;text-align:left} button.pick{min-width:3em;cursor:pointer}
#picked{background:#eef4ff;border:1px solid #9ab;padding:4px 8px} th.run.best::after{content:" best";
color:#fff;background:#2a6;border-radius:3px;font-size:11px;padding:0 4px;margin-left:6px}
"""


def render(
    title: str,
    metrics: dict[str, dict[str, Any]],
    rows: dict[str, list[Result]],
    sent: dict[str, Any] | None = None,
    notes: dict[str, str] | None = None,
    flight: dict[str, Any] | None = None,
    pairs: list[tuple[list[dict[str, Any]], str, str]] | None = None,
    digest: str = "",
    top: str | None = None,
) -> str:
    """The page. `notes`: banners, by kind (simulated, incomplete, cached, discarded); `pairs`: comparison
    sections, each a list of `Paired.to_json()`, its heading and what its runs are compared against; `digest`:
    the results it shows (build.results_digest), so a page can be checked against results/; `top`: the run
    better than every other (analysis.paired.best), else computed here.

    Its first screen, at any width, answers the job's question: what is missing (INCOMPLETE), then each run
    against its reference, in sentences that wrap (how it compares, by how much, how sure), then the rest."""
    names = list(rows)
    times = {n: [r.wall_seconds for r in rows[n] if r.ok] for n in names}
    scatter = chart_data(metrics)
    shares = share_metrics(r for rs in rows.values() for r in rs)  # the summary's and the records' alike
    notes = dict(notes or {})
    first = {k: notes.pop(k) for k in ("incomplete",) if k in notes}
    top = top if top is not None else best(rows, {n: m["success_rate"] for n, m in metrics.items()})
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="results-digest" content="{e(digest)}">
<title>{e(title)}</title><style>
{STYLE}</style></head><body><h1>{e(title)}</h1>
{_notes(first)}{headline_html(pairs or [])}{_notes(notes)}
{_summary(metrics, shares, top)}
{trials_html(metrics)}
{"".join(paired_html(p, forest(p, against), heading) for p, heading, against in pairs or [])}
{_caching(metrics, sent or {}) if any(m["llm_calls"] for m in metrics.values()) else ""}
<h2>Charts</h2>
{_groups(names, rows)}
{latency(times)}
{cost_vs_success(scatter) if scatter else ""}
{in_flight(flight) if flight and len(flight.get("samples") or []) > 1 else ""}
{records(rows, shares)}</body></html>"""


def _notes(notes: dict[str, str]) -> str:
    return "".join(f'<p class="note" id="{e(kind)}">{e(text)}</p>' for kind, text in notes.items())


def _heat_cell(v: tuple[int, int] | None) -> str:
    if not v or not v[1]:
        return "<td>-</td>"
    rate = v[0] / v[1]
    return f'<td style="background:hsl({int(rate * 120)},60%,80%)">{v[0]}/{v[1]}</td>'
