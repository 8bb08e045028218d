"""report.html: one self-contained file (inline SVG and CSS, no scripts or network) comparing runs."""

from __future__ import annotations

import html
import json
from collections import defaultdict
from typing import Any

COLORS = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6", "#9d755d"]
e = html.escape


def breakdown(rows: list[dict[str, Any]], key: str) -> dict[str, tuple[int, int]]:
    """value -> (solved, total) over a field (difficulty) or each entry of a list field (tags)."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        values = r.get(key) or []
        for v in values if isinstance(values, list) else [values]:
            out[str(v)][0] += bool(r.get("success"))
            out[str(v)][1] += 1
    return {k: (v[0], v[1]) for k, v in sorted(out.items())}


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
    v = sorted(v)
    return [v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))] for q in (0.05, 0.25, 0.5, 0.75, 0.95)] if v else [0] * 5


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


def _transcript(r: dict[str, Any]) -> str:
    out = []
    for m in r.get("transcript") or []:
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


def render(title: str, metrics: dict[str, dict[str, Any]], rows: dict[str, list[dict[str, Any]]],
           sent: dict[str, Any] | None = None) -> str:
    names = list(rows)
    by_diff = {n: breakdown(rows[n], "difficulty") for n in names}
    by_tag = {n: breakdown(rows[n], "tags") for n in names}
    tags = sorted({t for d in by_tag.values() for t in d})
    cols = ["conversations", "success_rate", "tool_selection", "args_normalized", "state_match", "input_tokens",
            "output_tokens", "cost_usd", "latency_p50_s", "latency_p95_s", "errors", "retries", "cache_hit_rate"]
    pct = {"success_rate", "tool_selection", "args_normalized", "state_match", "cache_hit_rate"}
    summary = "".join(f"<tr><th>{e(n)}</th>" + "".join(
        f"<td>{m[c]:.1%}</td>" if c in pct else f"<td>{'unknown' if m[c] is None else m[c]}</td>" for c in cols)
        + "</tr>"
        for n, m in metrics.items())
    heat = "".join(f"<tr><th>{e(t)}</th>" + "".join(
        _heat_cell(by_tag[n].get(t)) for n in names) + "</tr>" for t in tags)
    drill = []
    for n in names:
        items = []
        for r in rows[n]:
            s = r.get("scores") or {}
            status = "ok" if r.get("success") else ("error" if r.get("status") != "ok" else "fail")
            items.append(
                f'<details class="{status}"><summary>{e(r["conversation_id"])} &middot; {status} &middot; '
                f'{e(str(r.get("difficulty", "")))} &middot; tools {s.get("tool_selection", 0):.2f} &middot; args '
                f'{s.get("args_normalized", 0):.2f} &middot; state {bool(s.get("state_match"))}</summary>'
                + (f'<p class="err">error: {e(str(r.get("error")))}</p>' if r.get("error") else "")
                + f'<pre>{e(json.dumps(s))}</pre>{_transcript(r)}</details>')
        drill.append(f'<section><h3>{e(n)}</h3>{"".join(items)}</section>')
    latency = {n: [float(r.get("wall_seconds") or 0) for r in rows[n] if r.get("status") == "ok"] for n in names}
    scatter = {n: (float(metrics[n]["cost_usd"]), float(metrics[n]["success_rate"])) for n in names
               if metrics[n]["cost_usd"] is not None}
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title><style>
body{{font:14px system-ui,sans-serif;margin:2em;color:#222}} table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ddd;padding:4px 8px;text-align:right}} th{{text-align:left;background:#f6f6f6}}
.chart{{max-width:680px;display:block;margin:1em 0;font-size:11px}} .chart .t{{font-size:13px;font-weight:600}}
.grid{{stroke:#ccc}} details{{border-left:4px solid #ccc;margin:4px 0;padding:2px 8px}}
details.ok{{border-color:#54a24b}}
details.fail{{border-color:#f58518}} details.error{{border-color:#e45756}} .u{{margin-top:8px}} .c{{color:#555}}
.res code{{color:#2a6}} .err,.err code{{color:#c33}} pre{{background:#f6f6f6;padding:4px;white-space:pre-wrap}}
</style></head><body><h1>{e(title)}</h1>
<h2>Summary</h2><table id="summary"><tr><th>run</th>{"".join(f"<th>{e(c)}</th>" for c in cols)}</tr>{summary}</table>
{_caching(metrics, sent or {})}
<h2>Charts</h2>
{_bars("success by difficulty", ["easy", "medium", "hard"], by_diff)}
<h3>success by tag</h3><table id="tags"><tr><th>tag</th>{"".join(f"<th>{e(n)}</th>" for n in names)}</tr>{heat}</table>
{_latency(latency)}
{_scatter(scatter)}
<h2>Conversations</h2><div id="drilldown">{"".join(drill)}</div></body></html>"""


def _heat_cell(v: tuple[int, int] | None) -> str:
    if not v or not v[1]:
        return "<td>-</td>"
    rate = v[0] / v[1]
    return f'<td style="background:hsl({int(rate * 120)},60%,80%)">{v[0]}/{v[1]}</td>'
