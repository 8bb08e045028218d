"""16 workers against a simulator limited to 600 RPM (by default): one shared budget vs the seed's per-process limiters.

The load is uneven, as in a real evaluation: all 16 workers call during the warm-up, then half of
them run out of work (their conversations are done, or they are busy in long tool calls) for the
measured window. Counted on the simulator: what it served and what it answered 429, in the
window only, after every process has started and the first bursts are spent. Both buckets start
full (a minute's worth), so the warm-up must be long enough for the workers to spend that burst,
or the window measures the burst instead of the limit: the quick run uses a lower limit for that.
"""

from __future__ import annotations

import time
from typing import Any

import multiprocess as mp
from loguru import logger

from bench.common import table
from runner.budget.ratelimit import Budget, SharedLimiter
from runner.config import Latency, Limits, RetrySettings, SimSettings
from runner.errors import ProviderGaveUp
from runner.models.anthropic import AnthropicProvider
from runner.models.base import Request
from runner.models.client import ModelClient
from runner.models.sim.process import SimServer

RPM = 600.0
REQ = Request("sim-strong", "You are a CRM agent.", [{"role": "user", "text": "What stage is the Cedar Pilot "
                                                      "opportunity in?"}], [])
MODES = {"shared (this runner)": "shared", "per-process, RPM/N each (the seed's way)": "split",
         "per-process, full RPM each": "full"}


def load_client(url: str, limiter: Budget | None) -> ModelClient:
    """One caller of the simulator's sim-strong, drawing from `limiter` (its key's slot 0)."""
    return ModelClient(AnthropicProvider("k", base_url=url, timeout=30), wire_model="sim-strong",
                       logical_model="sim", limiter=limiter, limiter_slot=0, cache=None,
                       retry=RetrySettings(max_attempts=50, base_seconds=0.2, total_cap_seconds=300))


def call_until(client: ModelClient, stop_at: float) -> int:
    """Calls, one after another, until the time (a wall-clock time) is up; how many answered."""
    n = 0
    while time.time() < stop_at:
        try:
            client.complete(REQ)
            n += 1
        except ProviderGaveUp:
            continue
    return n


def _load(url: str, shared: SharedLimiter | None, own_rpm: float | None, ready: Any, go: Any, stop_at: Any) -> None:
    logger.remove()
    logger.add(lambda m: None, level="WARNING")
    limiter = SharedLimiter({"k": Limits(rpm=own_rpm)}, {}) if own_rpm is not None else shared
    client = load_client(url, limiter)
    ready.put(1)
    go.wait()
    call_until(client, stop_at.value)  # set before `go`: half the processes stop when the window opens


def scenario(mode: str, workers: int, warmup: float, window: float, rpm: float) -> dict[str, Any]:
    settings = SimSettings(latency=Latency(p50_ms=100), limits={"sim-strong": Limits(rpm=rpm)})
    ctx = mp.get_context("spawn")
    with SimServer(settings) as sim:
        shared = SharedLimiter({"k": Limits(rpm=rpm)}, {}) if mode == "shared" else None
        own = {"shared": None, "split": rpm / workers, "full": rpm}[mode]
        ready, go = ctx.Queue(), ctx.Event()
        early, late = ctx.Value("d", 1e18), ctx.Value("d", 1e18)
        procs = [ctx.Process(target=_load, args=(sim.url, shared, own, ready, go, early if i % 2 else late))
                 for i in range(workers)]
        for p in procs:
            p.start()
        for _ in procs:
            ready.get(timeout=120)  # every process imported and built its client
        t0 = time.time()
        early.value = t0 + warmup  # half the workers run out of work when the window opens
        late.value = t0 + warmup + window + 1
        go.set()
        time.sleep(warmup)
        a = sim.stats()
        time.sleep(window)
        b = sim.stats()
        for p in procs:
            p.join(60)
            if p.exitcode is None:
                p.kill()
    ok = int(b.get("ok", 0)) - int(a.get("ok", 0))  # type: ignore[call-overload]
    limited = int(b.get("429", 0)) - int(a.get("429", 0))  # type: ignore[call-overload]
    return {"mode": mode, "served_rpm": ok / window * 60, "share_of_limit": ok / window * 60 / rpm,
            "requests": ok + limited, "429s": limited, "share_429": limited / max(ok + limited, 1)}


def ratelimit(workers: int = 16, warmup: float = 15, window: float = 40, rpm: float = RPM) -> dict[str, Any]:
    rows = [{**scenario(m, workers, warmup, window, rpm), "label": label} for label, m in MODES.items()]
    s = rows[0]
    # Above the limit is not "better": it means the burst was measured, or the limiter leaks.
    return {"workers": workers, "rpm": rpm, "warmup": warmup, "window": window, "rows": rows,
            "met": 0.95 <= s["share_of_limit"] <= 1.05 and s["share_429"] <= 0.01}


def render(r: dict[str, Any]) -> str:
    t = table(["limiter", "served RPM", f"share of the {r['rpm']:.0f} RPM limit", "requests", "429s",
               "share of 429s"],
              [[x["label"], x["served_rpm"], f"{x['share_of_limit']:.1%}", x["requests"], x["429s"],
                f"{x['share_429']:.2%}"] for x in r["rows"]])
    verdict = "met" if r["met"] else "**missed**"
    return (f"### Rate limits: {r['workers']} workers, simulator limited to {r['rpm']:.0f} RPM\n\n"
            f"All {r['workers']} workers call during a {r['warmup']:.0f} s warm-up (which also spends the first "
            f"bursts both token buckets allow); then half of them run out of work, and the simulator counts "
            f"what it served over the next {r['window']:.0f} s.\n\n"
            f"{t}\n\nTarget for the shared limiter: 95-105 % of the limit used with at most 1 % of calls "
            f"answered 429: {verdict}. Splitting the budget per process (the seed's way) is safe but leaves the "
            "idle workers' shares unused; giving each process the whole limit overshoots and is answered 429.\n")
