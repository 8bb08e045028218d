"""Two outputs compared record by record (`runner report A B`).

Pairs records by id, lists the ones whose outcome changed, and says whether the change in success
is more than chance (exact McNemar on the changed pairs; 95 % Wilson intervals per run). Cost and
latency are compared on live model calls only: a rerun answered from the response cache costs $0
and takes milliseconds, which is the cache's doing, not the model's. Two outputs of different
datasets are refused unless allowed: their rates would not measure the same thing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from runner.errors import ConfigError
from runner.report import load_runs, percentile, read_manifest, run_metrics, simulated
from runner.result import Result
from runner.stats import mcnemar, wilson

SHOWN_IDS = 10


def check_datasets(a: Path, b: Path, ma: dict[str, Any], mb: dict[str, Any], *, allow: bool) -> bool:
    """True when both outputs (their manifests ma, mb) ran the same dataset file (by hash); raises when
    not, unless allowed."""
    ha, hb = ma.get("dataset_sha256"), mb.get("dataset_sha256")
    same = ha == hb
    if not same and not allow:
        raise ConfigError(f"{a} and {b} ran different datasets (sha256 {str(ha)[:12]} vs {str(hb)[:12]}): their "
                          "rates do not measure the same thing; --allow-different-datasets to compare anyway")
    return same


def _live(rows: list[Result]) -> dict[str, float | int | None]:
    """Cost per live call and latency of records no cache answered any part of."""
    live_calls = sum(r.usage.llm_calls - r.usage.cache_hits for r in rows)
    costs = [r.usage.cost_usd for r in rows]
    cost = None if any(c is None for c in costs) or not live_calls else sum(c or 0 for c in costs) / live_calls
    uncached = [r.wall_seconds for r in rows if r.ok and r.usage.cache_hits == 0]
    return {"live_calls": live_calls, "cost_per_live_call_usd": cost,
            "latency_p50_live_s": round(percentile(uncached, 0.5), 4) if uncached else None}


def _paired(ra: list[Result], rb: list[Result]) -> dict[str, Any]:
    a = {r.record_id: bool(r.success) for r in ra}
    b = {r.record_id: bool(r.success) for r in rb}
    both = sorted(set(a) & set(b))
    fixed = [i for i in both if b[i] and not a[i]]
    broke = [i for i in both if a[i] and not b[i]]
    sa, sb = sum(a[i] for i in both), sum(b[i] for i in both)
    return {"paired": len(both), "only_in_a": len(set(a) - set(b)), "only_in_b": len(set(b) - set(a)),
            "success_a": sa / len(both) if both else None, "success_b": sb / len(both) if both else None,
            "ci95_a": wilson(sa, len(both)), "ci95_b": wilson(sb, len(both)),
            "fixed": fixed, "broke": broke, "mcnemar_p": mcnemar(len(broke), len(fixed))}


def _metric_deltas(ra: list[Result], rb: list[Result]) -> dict[str, dict[str, float | None]]:
    ma, mb = run_metrics(ra), run_metrics(rb)
    la, lb = _live(ra), _live(rb)
    out: dict[str, dict[str, float | None]] = {}
    names = [k for k in ma["metrics"] if k in mb["metrics"]]
    pairs = [(k, ma["metrics"][k], mb["metrics"][k]) for k in names]
    pairs += [(k, la[k], lb[k]) for k in ("cost_per_live_call_usd", "latency_p50_live_s")]
    pairs += [("errors", ma["errors"], mb["errors"])]
    for k, va, vb in pairs:
        delta = None if va is None or vb is None else float(vb) - float(va)
        out[k] = {"a": va, "b": vb, "delta": delta}
    return out


def compare(a: Path, b: Path, *, allow_different_datasets: bool = False,
            console: Console | None = None) -> dict[str, Any]:
    """Per run present in both outputs: paired outcomes, changed records, metric deltas (JSON-able)."""
    ma, mb = read_manifest(a), read_manifest(b)
    same = check_datasets(a, b, ma, mb, allow=allow_different_datasets)
    runs_a, runs_b = load_runs(a), load_runs(b)
    doc: dict[str, Any] = {"a": str(a), "b": str(b), "same_dataset": same,
                           "simulated": {"a": simulated(ma), "b": simulated(mb)},
                           "runs": {}, "only_in_one": sorted(set(runs_a) ^ set(runs_b))}
    for name in sorted(set(runs_a) & set(runs_b)):
        doc["runs"][name] = {**_paired(runs_a[name], runs_b[name]),
                             "metrics": _metric_deltas(runs_a[name], runs_b[name])}
    _print(doc, console or Console())
    return doc


def _fmt(v: float | None, k: str) -> str:
    if v is None:
        return "-"
    return f"${v:.5f}" if k.endswith("_usd") else f"{v:.4g}"


def _print(doc: dict[str, Any], console: Console) -> None:
    t = Table(title=f"{doc['a']} -> {doc['b']}" + ("" if doc["same_dataset"] else " (DIFFERENT DATASETS)"))
    for col, justify in (("run", "left"), ("metric", "left"), ("A", "right"), ("B", "right"), ("delta", "right")):
        t.add_column(col, justify=justify)  # type: ignore[arg-type]
    for name, r in doc["runs"].items():
        ci_a, ci_b = r["ci95_a"], r["ci95_b"]
        if r["paired"]:
            t.add_row(name, f"success ({r['paired']} paired)", f"{r['success_a']:.1%} [{ci_a[0]:.0%}-{ci_a[1]:.0%}]",
                      f"{r['success_b']:.1%} [{ci_b[0]:.0%}-{ci_b[1]:.0%}]",
                      f"{r['success_b'] - r['success_a']:+.1%} (p={r['mcnemar_p']:.2g})")
        for k, m in r["metrics"].items():
            t.add_row(name, k, _fmt(m["a"], k), _fmt(m["b"], k), _fmt(m["delta"], k) if m["delta"] is not None
                      else "not comparable" if k.endswith("_live_s") else "-")
    console.print(t)
    for name, r in doc["runs"].items():
        for label, ids in (("now fail", r["broke"]), ("now succeed", r["fixed"])):
            if ids:
                more = f" (+{len(ids) - SHOWN_IDS} more)" if len(ids) > SHOWN_IDS else ""
                console.print(f"{name}: {len(ids)} {label}: {', '.join(ids[:SHOWN_IDS])}{more}")
    if any(doc["simulated"].values()):
        sims = [k.upper() for k, v in doc["simulated"].items() if v]
        console.print(f"{' and '.join(sims)} ran on the simulator: costs are what the real APIs would charge")
    if doc["only_in_one"]:
        console.print(f"runs in only one of the two: {', '.join(doc['only_in_one'])}")
