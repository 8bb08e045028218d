"""A forecast on the terminal (`runner plan`), and beside what a run then did (`runner show`, the report)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from runner.forecast.forecast import Forecast

MODE_WORDS = {
    "cached": "with prompt caching",
    "interactive": "interactive, no prompt cache",
    "batch": "batch APIs",
}


def usd(v: float | None) -> str:
    return "unknown" if v is None else f"${v:,.2f}" if v >= 1 else f"${v:.4f}"


def _tokens(v: float) -> str:
    return f"{v / 1e6:.2f}M" if v >= 1e6 else f"{v / 1e3:.1f}k" if v >= 1e3 else f"{v:.0f}"


def _band(expected: float | None, low: float | None, high: float | None) -> str:
    return f"{usd(expected)} ({usd(low)}-{usd(high)})" if expected is not None else "unknown"


def seconds(s: float | None) -> str:
    if s is None:
        return "unknown"
    if s < 120:
        return f"{s:.0f} s"
    return f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def table(f: Forecast) -> Group:
    if not any(r.items for r in f.runs):
        return Group(
            Text(
                "nothing left to do: every item of the config's runs has a result in its output "
                "(`runner run` would only write the report again; --rerun-errors or --lf plan reruns)"
            )
        )
    return Group(_calls(f), _costs(f), _floors(f), *_words(f))


def _calls(f: Forecast) -> Table:
    t = Table(title="plan: the model calls of what is left to do (expected)")
    for col in ("run", "items", "from", "calls", "input", "cache read", "cache write", "output"):
        t.add_column(col, justify="left" if col in ("run", "from") else "right")
    for r in f.runs:
        if r.source in ("unknown", "done"):
            t.add_row(r.run, str(r.items), r.source, *(["-"] * 5))
            continue
        n = r.need()
        t.add_row(
            r.run,
            str(r.items),
            r.source,
            f"{n.calls:,.0f}",
            _tokens(n.input_tokens),
            _tokens(n.cache_read_tokens),
            _tokens(n.cache_write_tokens),
            _tokens(n.output_tokens),
        )
    return t


def _costs(f: Forecast) -> Table:
    c = Table(title="plan: cost in USD, expected (low-high)")
    for col in ("run", "as configured", "interactive", "with prompt caching", "batch"):
        c.add_column(col, justify="left" if col == "run" else "right")
    modes = (None, "interactive", "cached", "batch")
    for r in f.runs:
        if r.source in ("unknown", "done"):
            c.add_row(r.run, *(["-"] * 4))
            continue
        c.add_row(
            r.run,
            *(_band(r.cost(mode, "expected"), r.cost(mode, "low"), r.cost(mode, "high")) for mode in modes),
        )
    c.add_section()
    c.add_row(
        "total",
        *(_band(f.cost("expected", mode), f.cost("low", mode), f.cost("high", mode)) for mode in modes),
    )
    return c


def _floors(f: Forecast) -> Table:
    b = Table(title="time: the rate limits' floor per budget")
    for col in (
        "budget",
        "requests",
        "input tokens",
        "output tokens",
        "limits (per minute)",
        "from",
        "floor",
        "binds",
    ):
        b.add_column(
            col, justify="left" if col in ("budget", "from", "binds", "limits (per minute)") else "right"
        )
    for x in f.floors:
        lim = (
            ", ".join(
                f"{k} {v:,.0f}"
                for k, v in (("rpm", x.limits.rpm), ("itpm", x.limits.itpm), ("otpm", x.limits.otpm))
                if v
            )
            or "none"
        )
        b.add_row(
            x.key,
            f"{x.asked[0]:,.0f}",
            _tokens(x.asked[1]),
            _tokens(x.asked[2]),
            lim,
            x.where,
            seconds(x.seconds),
            x.bound_by or "-",
        )
    return b


def _words(f: Forecast) -> list[Text]:
    modes = ", ".join(sorted({MODE_WORDS[r.mode] for r in f.runs}))
    lines = [
        Text(
            f"the cost column is each run's own mode ({modes})"
            "; figures from: " + "; ".join(f"{r.run}: {r.why}" for r in f.runs)
        )
    ]
    top = f.floor
    floor_words = (
        f"rate-limit floor {seconds(top.seconds)} ({top.key}: {top.bound_by})"
        if top and top.bound_by
        else "no rate limit binds"
    )
    lines.append(Text(f"time: {floor_words}; expected wall {seconds(f.wall_seconds)} at {f.concurrency_why}"))
    return lines + [Text(n, style="yellow") for n in f.notes]


def beside(plan: Mapping[str, Any], actual: Mapping[str, Mapping[str, float]]) -> Table:
    """The forecast a run was started with beside what it did, per run: cost, calls, tokens (and the job's
    time). `actual`: run -> {cost_usd, calls, input_tokens, output_tokens, seconds}."""
    t = Table(title=f"forecast against result ({plan.get('when', 'at the start')})")
    for col in ("run", "cost forecast", "cost", "calls forecast", "calls", "tokens forecast", "tokens"):
        t.add_column(col, justify="left" if col == "run" else "right")
    for r in plan.get("runs", []):
        a = actual.get(r["run"])
        if a is None or r.get("source") in ("unknown", "done"):
            continue
        need, c = r["need"], r["cost_usd"][r["mode"]]
        tokens = need["expected"]
        t.add_row(
            r["run"],
            f"{usd(c['expected'])} ({usd(c['low'])}-{usd(c['high'])})",
            usd(a.get("cost_usd")),
            f"{tokens['calls']:,.0f}",
            f"{a.get('calls', 0):,.0f}",
            _tokens(
                tokens["input_tokens"]
                + tokens["cache_read_tokens"]
                + tokens["cache_write_tokens"]
                + tokens["output_tokens"]
            ),
            _tokens(a.get("tokens", 0.0)),
        )
    return t
