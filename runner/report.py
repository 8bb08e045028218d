"""Results -> tables (terminal), report.json and report.html."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from runner.sink import read_results


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in 0..1."""
    if not values:
        return 0.0
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def _cost_sum(rows: list[dict[str, Any]], key: str) -> float | None:
    """The sum, or None (unknown) when an ok conversation's model has no known price."""
    if any(r.get("status") == "ok" and r.get(key, 0) is None for r in rows):
        return None
    return round(sum(float(r.get(key) or 0) for r in rows), 6)


def run_metrics(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in rows if r.get("status") == "ok"]
    scored = [r["scores"] for r in ok if r.get("scores")]
    lat = [float(r.get("wall_seconds") or 0) for r in ok]
    calls = sum(int(r.get("llm_calls") or 0) for r in rows)

    def mean(key: str) -> float:
        return statistics.fmean(float(s[key]) for s in scored) if scored else 0.0

    return {
        "conversations": len(rows), "ok": len(ok), "errors": len(rows) - len(ok),
        "success_rate": sum(1 for r in ok if r.get("success")) / len(rows) if rows else 0.0,
        "tool_selection": mean("tool_selection"), "args_exact": mean("args_exact"),
        "args_normalized": mean("args_normalized"), "state_match": mean("state_match"),
        "input_tokens": sum(int(r.get("input_tokens") or 0) for r in rows),
        "output_tokens": sum(int(r.get("output_tokens") or 0) for r in rows),
        "cost_usd": _cost_sum(rows, "cost_usd"),
        "input_cost_usd": _cost_sum(rows, "input_cost_usd"),
        "cache_read_tokens": sum(int(r.get("cache_read_tokens") or 0) for r in rows),
        "cache_write_tokens": sum(int(r.get("cache_write_tokens") or 0) for r in rows),
        "cache_saved_usd": round(sum(float(r.get("cache_saved_usd") or 0) for r in rows), 6),
        "latency_p50_s": round(percentile(lat, 0.5), 4), "latency_p95_s": round(percentile(lat, 0.95), 4),
        "retries": sum(int(r.get("retries") or 0) for r in rows),
        "rate_limited": sum(int(r.get("rate_limited") or 0) for r in rows),
        "llm_calls": calls,
        "cache_hit_rate": sum(int(r.get("cache_hits") or 0) for r in rows) / calls if calls else 0.0,
    }


def load_runs(out: Path) -> dict[str, list[dict[str, Any]]]:
    return {p.stem: read_results(p) for p in sorted((out / "results").glob("*.jsonl"))}


def print_summary(out: Path, console: Console | None = None) -> dict[str, dict[str, Any]]:
    console = console or Console()
    if not console.is_terminal:
        console.width = max(console.width, 150)
    metrics = {name: run_metrics(rows) for name, rows in load_runs(out).items()}
    t = Table(title=f"results in {out}")
    cols = [("run", None), ("convs", "conversations"), ("success", "success_rate"), ("tool sel", "tool_selection"),
            ("args", "args_normalized"), ("state", "state_match"), ("tok in", "input_tokens"),
            ("tok out", "output_tokens"), ("cached in", "cache_read_tokens"), ("cost $", "cost_usd"),
            ("saved $", "cache_saved_usd"), ("p50 s", "latency_p50_s"),
            ("p95 s", "latency_p95_s"), ("errors", "errors"), ("retries", "retries"), ("cache", "cache_hit_rate")]
    for col_label, _ in cols:
        t.add_column(col_label, justify="left" if col_label == "run" else "right")
    for name, m in metrics.items():
        cells = [name]
        for _, key in cols[1:]:
            v = m[str(key)]
            cells.append("unknown" if v is None else f"{v:.1%}" if key in (
                "success_rate", "tool_selection", "args_normalized", "state_match", "cache_hit_rate")
                else f"{v:.4f}" if key in ("cost_usd", "cache_saved_usd") else str(v))
        t.add_row(*cells)
    console.print(t)
    return metrics


def write_reports(out: Path) -> tuple[Path, Path]:
    """report.json (metrics and breakdowns per run) and report.html, next to the results."""
    from runner.report_html import breakdown, render

    rows = load_runs(out)
    metrics = {name: run_metrics(r) for name, r in rows.items()}
    manifest = out / "manifest.json"
    sent = json.loads(manifest.read_text()).get("requests", {}) if manifest.exists() else {}
    doc = {"runs": {n: {**m, "by_difficulty": breakdown(rows[n], "difficulty"), "by_tag": breakdown(rows[n], "tags"),
                        "requests": sent.get(n)} for n, m in metrics.items()}}
    (out / "report.json").write_text(json.dumps(doc, indent=2, sort_keys=True))
    (out / "report.html").write_text(render(f"pgsandbox-runner report: {out}", metrics, rows, sent),
                                     encoding="utf-8")
    return out / "report.json", out / "report.html"


COMPARED = ("success_rate", "tool_selection", "args_normalized", "state_match", "cost_usd", "latency_p50_s",
            "latency_p95_s", "errors")


def compare(a: Path, b: Path, console: Console | None = None) -> dict[str, dict[str, dict[str, float]]]:
    """Per run present in both: each metric in A, in B, and B - A."""
    console = console or Console()
    ma = {n: run_metrics(r) for n, r in load_runs(a).items()}
    mb = {n: run_metrics(r) for n, r in load_runs(b).items()}
    out: dict[str, dict[str, dict[str, float]]] = {}
    t = Table(title=f"{a} -> {b}")
    t.add_column("run")
    t.add_column("metric")
    for label in ("A", "B", "delta"):
        t.add_column(label, justify="right")
    for name in sorted(set(ma) & set(mb)):
        out[name] = {}
        for k in COMPARED:
            va, vb = float(ma[name][k] or 0), float(mb[name][k] or 0)
            out[name][k] = {"a": va, "b": vb, "delta": vb - va}
            t.add_row(name, k, f"{va:.4g}", f"{vb:.4g}", f"{vb - va:+.4g}")
    only = sorted(set(ma) ^ set(mb))
    console.print(t)
    if only:
        console.print(f"runs in only one of the two: {', '.join(only)}")
    return out
