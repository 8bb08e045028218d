"""The report's charts: Vega-Lite specs built with Altair, rendered to inline SVG by vl-convert.

A plotting library instead of hand-drawn SVG: real axes with ticks and titles, legends, error bars,
labels that do not overlap; vl-convert renders in-process with no browser and no network, so the
report stays one self-contained file that opens offline.
"""

from __future__ import annotations

import hashlib
from typing import Any

import altair as alt
import vl_convert as vlc

from runner.analysis.metrics import percentile
from runner.analysis.stats import wilson

WIDTH = 560


# Encodings are given as channel objects (alt.X("x:Q")), never as shorthand strings: Altair turns each
# string into a channel through a lookup table it rebuilds from every schema class per string (~11,000
# schema hashes for the built-in report's five charts: 80 of its 250 ms).


def _svg(chart: alt.TopLevelMixin, label: str) -> str:
    svg: str = vlc.vegalite_to_svg(chart.to_json(validate=False))
    return f'<figure class="chart" role="img" aria-label="{label}">{svg}</figure>'


def warm_up() -> None:
    """One tiny chart: the first render starts vl-convert's JavaScript engine, the slow part."""
    _svg(
        alt.Chart(alt.Data(values=[{"x": 0, "y": 0}])).mark_point().encode(x=alt.X("x:Q"), y=alt.Y("y:Q")),
        "warm-up",
    )


# Vega's tableau10, then the darker half of category20: distinct, and none too pale to see on white
PALETTE = [
    "#4c78a8",
    "#f58518",
    "#e45756",
    "#72b7b2",
    "#54a24b",
    "#eeca3b",
    "#b279a2",
    "#ff9da6",
    "#9d755d",
    "#bab0ac",
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
]


def run_colors(names: list[str]) -> dict[str, str]:
    """A colour per run name that depends on the name, not on its place: `atlas` looks the same in every
    report of every job. Two names that hash alike take the next free colour, settled in name order so
    the outcome does not depend on the runs' order either."""
    taken: dict[str, str] = {}
    for name in sorted(set(names)):
        i = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big") % len(PALETTE)
        while PALETTE[i] in taken.values() and len(taken) < len(PALETTE):
            i = (i + 1) % len(PALETTE)
        taken[name] = PALETTE[i]
    return taken


def _runs_color(names: list[str], *, legend: bool = True) -> alt.Color:
    colors = run_colors(names)
    return alt.Color(
        "run:N",
        scale=alt.Scale(domain=names, range=[colors[n] for n in names]),
        legend=alt.Legend(title="run", orient="top") if legend else None,
    )


# with its labels ~370 px: drawn at its own size on a 390 px phone, not shrunk to 6 px type
FOREST_WIDTH = 250


def forest(pairs: list[dict[str, Any]], against: str) -> str:
    """Each run's difference in success from its reference (`against` names it: one run, or "itself in A"),
    with its 95 % interval; the line at 0 is no difference, so an interval that crosses it shows none clear.
    A comparison without an interval (too few records) is left out of the plot, not drawn as a point."""
    data = [
        {"run": c["run"], "d": c["difference"], "lo": c["ci95"][0], "hi": c["ci95"][1], "p": c["p_value"]}
        for c in pairs
        if c["paired"] and c["ci95"] is not None
    ]
    if not data:
        return ""
    names = [d["run"] for d in data]
    base = alt.Chart(alt.Data(values=data))
    y = alt.Y("run:N", title=None, sort=names, axis=alt.Axis(labelLimit=110))
    x = alt.X(
        "lo:Q",
        title=f"difference in success against {against}",
        axis=alt.Axis(format="+%", tickCount=5),
        scale=alt.Scale(domain=[min(-0.1, *(d["lo"] for d in data)), max(0.1, *(d["hi"] for d in data))]),
    )
    color = _runs_color(names, legend=False)  # the axis names each run already
    bars = base.mark_rule(strokeWidth=2).encode(y=y, x=x, x2=alt.X2("hi:Q"), color=color)
    dots = base.mark_point(filled=True, size=90).encode(
        y=y,
        x=alt.X("d:Q"),
        color=color,
        tooltip=[
            alt.Tooltip("run:N"),
            alt.Tooltip("d:Q", format="+.1%", title="difference"),
            alt.Tooltip("lo:Q", format="+.1%"),
            alt.Tooltip("hi:Q", format="+.1%"),
            alt.Tooltip("p:Q", format=".2g", title="McNemar p"),
        ],
    )
    zero = (
        alt.Chart(alt.Data(values=[{"z": 0}]))
        .mark_rule(strokeDash=[4, 3], color="#333")
        .encode(x=alt.X("z:Q"))
    )
    chart = (zero + bars + dots).properties(
        width=FOREST_WIDTH, height=32 * len(data), title="difference in success, 95 % interval"
    )
    return _svg(chart, "difference in success against the reference").replace(
        '<figure class="chart"', '<figure class="chart forest"', 1
    )


def success_by(group: str, runs: dict[str, dict[str, tuple[int, int]]]) -> str:
    """Success per value of one group, a bar per run with its 95 % Wilson interval."""
    data = []
    for run, by in runs.items():
        for value, (solved, total) in by.items():
            lo, hi = wilson(solved, total)
            data.append(
                {
                    "run": run,
                    "value": value,
                    "rate": solved / total if total else 0.0,
                    "lo": lo,
                    "hi": hi,
                    "n": f"{solved}/{total}",
                }
            )
    base = alt.Chart(alt.Data(values=data))
    x = alt.X("value:N", title=group, axis=alt.Axis(labelAngle=0, labelLimit=120))
    bars = base.mark_bar().encode(
        x=x,
        xOffset=alt.XOffset("run:N"),
        color=_runs_color(list(runs)),
        y=alt.Y("rate:Q", title="success", axis=alt.Axis(format="%"), scale=alt.Scale(domain=[0, 1])),
        tooltip=[
            alt.Tooltip("run:N"),
            alt.Tooltip("value:N"),
            alt.Tooltip("n:N"),
            alt.Tooltip("rate:Q", format=".1%"),
        ],
    )
    err = base.mark_rule(color="#333").encode(
        x=x, xOffset=alt.XOffset("run:N"), y=alt.Y("lo:Q", title="success"), y2=alt.Y2("hi:Q")
    )
    chart = (bars + err).properties(
        width=WIDTH, height=180, title=f"success by {group} (bars: 95 % interval)"
    )
    return _svg(chart, f"success by {group}")


def latency(runs: dict[str, list[float]]) -> str:
    """Each run's conversation times: box p25-p75, whiskers p5-p95, tick at the median."""
    data = []
    for run, v in runs.items():
        if v:
            p5, p25, p50, p75, p95 = (percentile(v, q) for q in (0.05, 0.25, 0.5, 0.75, 0.95))
            data.append({"run": run, "p5": p5, "p25": p25, "p50": p50, "p75": p75, "p95": p95})
    base = alt.Chart(alt.Data(values=data))
    y = alt.Y("run:N", title=None, sort=list(runs))
    color = _runs_color(list(runs))
    whisker = base.mark_rule().encode(
        y=y, x=alt.X("p5:Q", title="seconds per record"), x2=alt.X2("p95:Q"), color=color
    )
    box = base.mark_bar(size=14, opacity=0.6).encode(
        y=y,
        x=alt.X("p25:Q"),
        x2=alt.X2("p75:Q"),
        color=color,
        tooltip=[alt.Tooltip(k, format=".3f") for k in ("p5:Q", "p50:Q", "p95:Q")],
    )
    median = base.mark_tick(color="black", size=14).encode(y=y, x=alt.X("p50:Q"))
    chart = (whisker + box + median).properties(
        width=WIDTH, height=28 * max(1, len(data)), title="time per record: p5 / p25 / median / p75 / p95"
    )
    return _svg(chart, "latency")


def cost_vs_success(points: dict[str, tuple[float, float, tuple[float, float]]]) -> str:
    """Each run's total cost against its success rate (with its interval); runs told apart by colour."""
    data = [{"run": n, "cost": c, "rate": r, "lo": ci[0], "hi": ci[1]} for n, (c, r, ci) in points.items()]
    base = alt.Chart(alt.Data(values=data))
    x = alt.X("cost:Q", title="cost (USD)", axis=alt.Axis(format="$.2f"))
    color = _runs_color(list(points))
    dots = base.mark_point(filled=True, size=120).encode(
        x=x,
        y=alt.Y("rate:Q", title="success", axis=alt.Axis(format="%"), scale=alt.Scale(domain=[0, 1])),
        color=color,
        tooltip=[
            alt.Tooltip("run:N"),
            alt.Tooltip("cost:Q", format="$.4f"),
            alt.Tooltip("rate:Q", format=".1%"),
        ],
    )
    bars = base.mark_rule().encode(x=x, y=alt.Y("lo:Q"), y2=alt.Y2("hi:Q"), color=color)
    return _svg(
        (bars + dots).properties(width=WIDTH, height=220, title="cost against success"),
        "cost against success",
    )


def in_flight(flight: dict[str, Any]) -> str:
    """Records in flight over the run's time (sampled each second by the supervisor), against its
    capacity (workers x slots): how full the slots were kept, and when they drained."""
    samples = flight.get("samples") or []
    data = [{"t": x[0], "n": x[1], "target": x[2] if len(x) > 2 else None} for x in samples]
    cap = flight.get("capacity") or max((n for _, n in samples), default=0)
    base = alt.Chart(alt.Data(values=data))
    line = base.mark_area(opacity=0.5, interpolate="step-after").encode(
        x=alt.X("t:Q", title="seconds since start"),
        y=alt.Y("n:Q", title="records in flight", scale=alt.Scale(domain=[0, max(1, cap)])),
    )
    ceiling = (
        alt.Chart(alt.Data(values=[{"cap": cap}]))
        .mark_rule(strokeDash=[4, 3], color="#e45756")
        .encode(y=alt.Y("cap:Q"))
    )
    layers = line + ceiling
    title = f"records in flight (dashed: capacity, {cap} = workers x slots)"
    if any(d["target"] is not None for d in data):  # --concurrency auto: what the throttle allowed
        layers += base.mark_line(interpolate="step-after", color="#333").encode(
            x=alt.X("t:Q"), y=alt.Y("target:Q")
        )
        title += "; line: the auto target"
    chart = layers.properties(width=WIDTH, height=160, title=title)
    return _svg(chart, "records in flight over time")


def chart_data(metrics: dict[str, dict[str, Any]]) -> dict[str, tuple[float, float, tuple[float, float]]]:
    """Cost and success per run, for the runs with both
    (a run that finished no record has no rate to plot)."""
    return {
        n: (float(m["cost_usd"]), float(m["success_rate"]), (m["success_ci95"][0], m["success_ci95"][1]))
        for n, m in metrics.items()
        if m["cost_usd"] is not None and m["llm_calls"] and m["success_rate"] is not None
    }
