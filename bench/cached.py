"""A fully cached rerun: the sample again with a warm response cache makes no API call."""

from __future__ import annotations

import shutil
import time
from typing import Any

from bench.common import ROOT, WORK, config, result_rows, result_timing, seeds_runs, table
from runner.run.job import run_job


def cached(workers: int = 4, limit: int | None = None) -> dict[str, Any]:
    data = ROOT / "data" / "crm-sample.jsonl"
    cache_dir = WORK / "cache-bench"
    shutil.rmtree(cache_dir, ignore_errors=True)
    out: dict[str, Any] = {}
    for phase in ("cold", "warm"):
        o = WORK / f"cached-{phase}"
        shutil.rmtree(o, ignore_errors=True)
        t0 = time.monotonic()
        cfg = config(data, o, workers=workers, runs=seeds_runs(), p50_ms=50, cache=True, cache_dir=cache_dir)
        run_job(cfg.model_copy(update={"limit": limit}))
        wall = time.monotonic() - t0
        rows = result_rows(o)
        t = result_timing(o)
        out[phase] = {"conversations": len(rows), "wall_s": wall, "span_s": t.span, "conv_per_s": t.throughput,
                      "llm_calls": sum(r.usage.llm_calls for r in rows),
                      "cache_misses": sum(r.usage.cache_misses for r in rows),
                      "success": sum(bool(r.success) for r in rows)}
    out["met"] = out["warm"]["cache_misses"] == 0 and out["warm"]["conv_per_s"] >= 100
    out["same_outcomes"] = out["warm"]["success"] == out["cold"]["success"]
    return out


def render(c: dict[str, Any]) -> str:
    t = table(["phase", "conversations", "model calls", "calls sent to the API", "conversations/s",
               "span s", "wall s (incl. sandbox start)"],
              [[p, c[p]["conversations"], c[p]["llm_calls"], c[p]["cache_misses"], c[p]["conv_per_s"], c[p]["span_s"],
                c[p]["wall_s"]] for p in ("cold", "warm")])
    verdict = "met" if c["met"] else "**missed**"
    return ("### Fully cached rerun (the committed sample, 3 baselines + Atlas, 4 workers)\n\n"
            f"{t}\n\nTarget: no API call and at least 100 conversations/s on the rerun: {verdict}. "
            f"Same outcomes on both passes: {'yes' if c['same_outcomes'] else '**no**'}.\n")
