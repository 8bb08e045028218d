"""Two outputs compared record by record (`runner report A B`).

Each run of B against the same run of A, on the records both outputs have (every metric, not only
success: runner/analysis/paired.py), the records in only one output counted and named, the changed ones
listed. Cost and latency are also compared on live model calls only: a rerun answered from the response cache
costs $0 and takes milliseconds, which is the cache's doing, not the model's. Two outputs of different
datasets are refused unless allowed: their rates would not measure the same thing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from runner.analysis.metrics import percentile
from runner.analysis.paired import pair
from runner.errors import ConfigError
from runner.report.build import COMPARE_VERSION, load_runs
from runner.report.paired_table import print_paired
from runner.results import manifest as manifests
from runner.results.manifest import Manifest
from runner.results.result import Result

SHOWN_IDS = 10


def check_datasets(a: Path, b: Path, ma: Manifest, mb: Manifest, *, allow: bool) -> bool:
    """True when both outputs (their manifests ma, mb) ran the same dataset file (by hash); raises when
    not, unless allowed."""
    ha, hb = ma.dataset_sha256, mb.dataset_sha256
    same = ha == hb
    if not same and not allow:
        raise ConfigError(
            f"{a} and {b} ran different datasets (sha256 {str(ha)[:12]} vs {str(hb)[:12]}): their "
            "rates do not measure the same thing; --allow-different-datasets to compare anyway"
        )
    return same


def _live(rows: list[Result]) -> dict[str, float | int | None]:
    """Cost per live call and latency of records no cache answered any part of."""
    live_calls = sum(r.usage.llm_calls - r.usage.cache_hits for r in rows)
    costs = [r.usage.cost_usd for r in rows]
    cost = (
        None if any(c is None for c in costs) or not live_calls else sum(c or 0 for c in costs) / live_calls
    )
    uncached = [r.wall_seconds for r in rows if r.ok and r.usage.cache_hits == 0]
    return {
        "live_calls": live_calls,
        "cost_per_live_call_usd": cost,
        "latency_p50_live_s": round(percentile(uncached, 0.5), 4) if uncached else None,
    }


def _live_deltas(ra: list[Result], rb: list[Result]) -> dict[str, dict[str, float | int | None]]:
    """Live calls only, on the records both outputs have: a rerun answered from the cache costs $0 and
    takes milliseconds, which is the cache's doing, not the model's."""
    shared = {r.record_id for r in ra} & {r.record_id for r in rb}
    la = _live([r for r in ra if r.record_id in shared])
    lb = _live([r for r in rb if r.record_id in shared])
    return {
        k: {
            "a": la[k],
            "b": lb[k],
            "delta": None if la[k] is None or lb[k] is None else float(lb[k] or 0) - float(la[k] or 0),
        }
        for k in ("cost_per_live_call_usd", "latency_p50_live_s")
    }


def compare(
    a: Path, b: Path, *, allow_different_datasets: bool = False, console: Console | None = None
) -> dict[str, Any]:
    """Per run present in both outputs: B's run against A's on the records both have
    (runner/analysis/paired.py), and live cost and latency apart from cached answers. JSON-able; B's
    report.html shows it."""
    ma, mb = manifests.read(a), manifests.read(b)
    same = check_datasets(a, b, ma, mb, allow=allow_different_datasets)
    runs_a, runs_b = load_runs(a), load_runs(b)
    doc: dict[str, Any] = {
        "version": COMPARE_VERSION,
        "a": str(a),
        "b": str(b),
        "same_dataset": same,
        "simulated": {"a": ma.simulated, "b": mb.simulated},
        "runs": {},
        "only_in_one": sorted(set(runs_a) ^ set(runs_b)),
    }
    for name in [n for n in runs_b if n in runs_a]:
        c = pair(f"{name} in A", runs_a[name], name, runs_b[name])
        doc["runs"][name] = {**c.to_json(), "live": _live_deltas(runs_a[name], runs_b[name])}
    _print(doc, console or Console())
    return doc


def _fmt(v: float | None, k: str) -> str:
    if v is None:
        return "-"
    return f"${v:.5f}" if k.endswith("_usd") else f"{v:.4g}"


def _print(doc: dict[str, Any], console: Console) -> None:
    title = f"{doc['a']} (A) -> {doc['b']} (B)" + ("" if doc["same_dataset"] else " (DIFFERENT DATASETS)")
    print_paired(list(doc["runs"].values()), console, reference_label=f"A, each run against itself: {title}")
    t = Table(title="live model calls only (answers from the response cache left out), on the shared records")
    for col, justify in (("run", "left"), ("", "left"), ("A", "right"), ("B", "right"), ("delta", "right")):
        t.add_column(col, justify=justify)  # type: ignore[arg-type]
    for name, r in doc["runs"].items():
        for k, m in r["live"].items():
            t.add_row(
                name,
                k.replace("_", " "),
                _fmt(m["a"], k),
                _fmt(m["b"], k),
                _fmt(m["delta"], k) if m["delta"] is not None else "not comparable",
            )
    console.print(t)
    for name, r in doc["runs"].items():
        for label, ids in (("now fail", r["lost"]), ("now succeed", r["won"])):
            if ids:
                more = f" (+{len(ids) - SHOWN_IDS} more)" if len(ids) > SHOWN_IDS else ""
                console.print(f"{name}: {len(ids)} {label}: {', '.join(ids[:SHOWN_IDS])}{more}")
    if any(doc["simulated"].values()):
        sims = [k.upper() for k, v in doc["simulated"].items() if v]
        console.print(f"{' and '.join(sims)} ran on the simulator: costs are what the real APIs would charge")
    if doc["only_in_one"]:
        console.print(f"runs in only one of the two: {', '.join(doc['only_in_one'])}")
