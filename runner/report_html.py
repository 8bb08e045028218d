"""report.html: one self-contained file (inline SVG and CSS, no scripts or network) comparing runs."""

from __future__ import annotations

import html
import json
from collections import defaultdict
from typing import Any

from runner.report import percentile
from runner.result import Result

COLORS = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6", "#9d755d"]
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


def _bars(title: str, groups: list[str], runs: dict[str, dict[str, tuple[int, int]]]) -> str:
    w, h, pad = 640, 260, 40
    names = list(runs)
    gw = (w - 2 * pad) / max(len(groups), 1)
    bw = gw * 0.8 / max(len(names), 1)
    parts = [f'<svg class="chart" viewBox="0 0 {w} {h + 40}" role="img" aria-label="{e(title)}">',
             f'<text x="{w / 2}" y="16" text-anchor="middle" class="t">{e(title)}</text>']
    for y in (0, 0.5, 1):
        yy = h - y * (h - 40)
        parts.append(f'<line x1="{pad}" x2="{w - pad}" y1="{yy}" y2="{yy}" class="grid"/>'
                     f'<text x="{pad - 4}" y="{yy + 4}" text-anchor="end">{y:.0%}</text>')
    for gi, g in enumerate(groups):
        for ri, n in enumerate(names):
            solved, total = runs[n].get(g, (0, 0))
            rate = solved / total if total else 0
            x = pad + gi * gw + gw * 0.1 + ri * bw
            bh = rate * (h - 40)
            parts.append(f'<rect x="{x:.1f}" y="{h - bh:.1f}" width="{bw * 0.9:.1f}" height="{bh:.1f}" '
                         f'fill="{COLORS[ri % len(COLORS)]}">'
                         f'<title>{e(n)} {e(g)}: {solved}/{total}</title></rect>')
        parts.append(f'<text x="{pad + gi * gw + gw / 2:.1f}" y="{h + 16}" text-anchor="middle">{e(g)}</text>')
    parts.append(_legend(names, w, h + 34))
    return "".join(parts) + "</svg>"


def _legend(names: list[str], w: int, y: float) -> str:
    step = w / max(len(names), 1)
    return "".join(f'<rect x="{i * step + 10:.0f}" y="{y - 9}" width="10" height="10" '
                   f'fill="{COLORS[i % len(COLORS)]}"/><text x="{i * step + 24:.0f}" y="{y}">{e(n)}</text>'
                   for i, n in enumerate(names))


def _quantiles(v: list[float]) -> list[float]:
    """p5, p25, p50, p75, p95: the same interpolation as the summary table's p50 and p95."""
    return [percentile(v, q) for q in (0.05, 0.25, 0.5, 0.75, 0.95)]


def _latency(runs: dict[str, list[float]]) -> str:
    w, row, pad = 640, 34, 150
    top = max((max(v) for v in runs.values() if v), default=1.0) or 1.0
    h = 40 + row * len(runs)
    sx = (w - pad - 20) / top
    parts = [f'<svg class="chart" viewBox="0 0 {w} {h + 20}" role="img" aria-label="latency">',
             f'<text x="{w / 2}" y="16" text-anchor="middle" class="t">'
             'conversation time (s): p5 p25 p50 p75 p95</text>']
    for i, (n, v) in enumerate(runs.items()):
        q = _quantiles(v)
        y = 40 + i * row
        c = COLORS[i % len(COLORS)]
        parts.append(f'<text x="{pad - 6}" y="{y + 14}" text-anchor="end">{e(n)}</text>'
                     f'<line x1="{pad + q[0] * sx:.1f}" x2="{pad + q[4] * sx:.1f}" y1="{y + 10}" y2="{y + 10}" '
                     f'stroke="{c}"/>'
                     f'<rect x="{pad + q[1] * sx:.1f}" y="{y}" width="{max(1, (q[3] - q[1]) * sx):.1f}" height="20" '
                     f'fill="{c}" opacity="0.6"><title>{e(n)}: p50 {q[2]:.3f}s, p95 {q[4]:.3f}s</title></rect>'
                     f'<line x1="{pad + q[2] * sx:.1f}" x2="{pad + q[2] * sx:.1f}" y1="{y}" y2="{y + 20}" '
                     'stroke="#000"/>')
    parts.append(f'<text x="{w - 20}" y="{h + 12}" text-anchor="end">{top:.2f}s</text>')
    return "".join(parts) + "</svg>"


def _scatter(points: dict[str, tuple[float, float]]) -> str:
    w, h, pad = 640, 300, 50
    top_cost = max((c for c, _ in points.values()), default=1.0) or 1.0
    parts = [f'<svg class="chart" viewBox="0 0 {w} {h + 30}" role="img" aria-label="cost against success">',
             f'<text x="{w / 2}" y="16" text-anchor="middle" class="t">cost (USD) against success rate</text>',
             f'<line x1="{pad}" y1="{h}" x2="{w - 20}" y2="{h}" class="grid"/><line x1="{pad}" y1="30" x2="{pad}" '
             f'y2="{h}" class="grid"/><text x="{w - 20}" y="{h + 16}" text-anchor="end">${top_cost:.2f}</text>'
             f'<text x="{pad - 4}" y="34" text-anchor="end">100%</text>']
    for i, (n, (cost, rate)) in enumerate(points.items()):
        x = pad + cost / top_cost * (w - pad - 40)
        y = h - rate * (h - 40)
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="7" fill="{COLORS[i % len(COLORS)]}">'
                     f'<title>{e(n)}: ${cost:.4f}, {rate:.1%}</title></circle>'
                     f'<text x="{x + 10:.1f}" y="{y + 4:.1f}">{e(n)}</text>')
    return "".join(parts) + "</svg>"


def _transcript(transcript: list[dict[str, Any]]) -> str:
    out = []
    for m in transcript:
        if m["role"] == "user":
            out.append(f'<div class="u"><b>user</b> {e(m["text"])}</div>')
        elif m["role"] == "assistant":
            if m.get("text"):
                out.append(f'<div class="a"><b>agent</b> {e(m["text"])}</div>')
            for c in m.get("tool_calls") or []:
                call = f'{e(c["name"])}({e(json.dumps(c["args"]))})'
                out.append(f'<div class="c">&rarr; <code>{call}</code></div>')
        else:
            for res in m.get("results") or []:
                cls = "err" if res.get("is_error") else "res"
                out.append(f'<div class="{cls}"><code>{e(res["content"][:1500])}</code></div>')
    return "".join(out)


def _money(v: float | None) -> str:
    return "unknown" if v is None else f"${v:.4f}"


def _caching(metrics: dict[str, dict[str, Any]], sent: dict[str, Any]) -> str:
    """Prompt caching per run, and what each run's requests really carried."""
    rows = "".join(
        f"<tr><th>{e(n)}</th><td>{m['input_tokens']}</td><td>{m['cache_read_tokens']}</td>"
        f"<td>{m['cache_write_tokens']}</td><td>{_money(m['input_cost_usd'])}</td>"
        f"<td>{_money(m['cache_saved_usd'])}</td><td>{e(_sent_text(sent.get(n)))}</td></tr>"
        for n, m in metrics.items())
    head = "".join(f"<th>{h}</th>" for h in ("run", "uncached input tokens", "cache reads", "cache writes",
                                            "input cost", "saved by cache", "sent"))
    return f'<h2>Prompt caching and requests</h2><table id="caching"><tr>{head}</tr>{rows}</table>'


def _sent_text(info: Any) -> str:
    if not info:
        return "-"
    parts = [f"{m['model']}: {json.dumps(m['params'], sort_keys=True)}"
             + (f", not sent: {', '.join(m['dropped'])}" if m["dropped"] else "") for m in info]
    return "; ".join(parts)


BARS_MAX_VALUES = 6  # a group with more values reads better as a table


def _groups(names: list[str], rows: dict[str, list[Result]]) -> str:
    parts = []
    for g in group_names(rows):
        by = {n: breakdown(rows[n], g) for n in names}
        values = sorted({v for d in by.values() for v in d})
        if len(values) <= BARS_MAX_VALUES:
            parts.append(_bars(f"success by {g}", values, by))
        else:
            heat = "".join(f"<tr><th>{e(v)}</th>" + "".join(_heat_cell(by[n].get(v)) for n in names) + "</tr>"
                           for v in values)
            parts.append(f'<h3>success by {e(g)}</h3><table class="groups" id="group-{e(g)}"><tr><th>{e(g)}</th>'
                         f'{"".join(f"<th>{e(n)}</th>" for n in names)}</tr>{heat}</table>')
    return "".join(parts)


def _detail(r: Result) -> str:
    status = "ok" if r.success else ("error" if not r.ok else "fail")
    facts = " &middot; ".join([e(r.record_id), status, *(e(", ".join(v)) for v in r.groups.values()),
                               *(f"{e(k)} {v:.2f}" for k, v in r.metrics.items() if v is not None)])
    out = r.output or {}
    body = _transcript(out["transcript"]) if isinstance(out.get("transcript"), list) else ""
    shown = {k: v for k, v in out.items() if k not in ("transcript", "tool_calls", "model_calls")}
    return (f'<details class="{status}"><summary>{facts}</summary>'
            + (f'<p class="err">error: {e(str(r.error))}</p>' if r.error else "")
            + (f'<pre>{e(json.dumps(shown, indent=1, default=str)[:4000])}</pre>' if shown else "")
            + f"{body}</details>")


def _summary(metrics: dict[str, dict[str, Any]]) -> str:
    names = list(dict.fromkeys(k for m in metrics.values() for k in m["metrics"]))
    usage = ["input_tokens", "output_tokens", "cost_usd"] if any(m["llm_calls"] for m in metrics.values()) else []
    cols = ["records", "success_rate", *names, *usage, "latency_p50_s", "latency_p95_s", "errors",
            *(["retries", "cache_hit_rate"] if usage else [])]

    def cell(m: dict[str, Any], c: str) -> str:
        v = m["metrics"].get(c) if c in names else m[c]
        if v is None:
            return "<td>unknown</td>" if c == "cost_usd" else "<td>-</td>"
        return f"<td>{v:.1%}</td>" if c in ("success_rate", "cache_hit_rate") else \
            f"<td>{v:.3g}</td>" if c in names else f"<td>{v}</td>"

    rows = "".join(f"<tr><th>{e(n)}</th>" + "".join(cell(m, c) for c in cols) + "</tr>" for n, m in metrics.items())
    return (f'<h2>Summary</h2><table id="summary"><tr><th>run</th>{"".join(f"<th>{e(c)}</th>" for c in cols)}</tr>'
            f"{rows}</table>")


def render(title: str, metrics: dict[str, dict[str, Any]], rows: dict[str, list[Result]],
           sent: dict[str, Any] | None = None) -> str:
    names = list(rows)
    drill = "".join(f'<section><h3>{e(n)}</h3>{"".join(_detail(r) for r in rows[n])}</section>' for n in names)
    latency = {n: [r.wall_seconds for r in rows[n] if r.ok] for n in names}
    scatter = {n: (float(metrics[n]["cost_usd"]), float(metrics[n]["success_rate"])) for n in names
               if metrics[n]["cost_usd"] is not None and metrics[n]["llm_calls"]}
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title><style>
body{{font:14px system-ui,sans-serif;margin:2em;color:#222}} table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ddd;padding:4px 8px;text-align:right}} th{{text-align:left;background:#f6f6f6}}
.chart{{max-width:680px;display:block;margin:1em 0;font-size:11px}} .chart .t{{font-size:13px;font-weight:600}}
.grid{{stroke:#ccc}} details{{border-left:4px solid #ccc;margin:4px 0;padding:2px 8px}}
details.ok{{border-color:#54a24b}}
details.fail{{border-color:#f58518}} details.error{{border-color:#e45756}} .u{{margin-top:8px}} .c{{color:#555}}
.res code{{color:#2a6}} .err,.err code{{color:#c33}} pre{{background:#f6f6f6;padding:4px;white-space:pre-wrap}}
</style></head><body><h1>{e(title)}</h1>
{_summary(metrics)}
{_caching(metrics, sent or {}) if any(m["llm_calls"] for m in metrics.values()) else ""}
<h2>Charts</h2>
{_groups(names, rows)}
{_latency(latency)}
{_scatter(scatter) if scatter else ""}
<h2>Records</h2><div id="drilldown">{drill}</div></body></html>"""


def _heat_cell(v: tuple[int, int] | None) -> str:
    if not v or not v[1]:
        return "<td>-</td>"
    rate = v[0] / v[1]
    return f'<td style="background:hsl({int(rate * 120)},60%,80%)">{v[0]}/{v[1]}</td>'
