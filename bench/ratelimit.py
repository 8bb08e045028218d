"""16 workers against a simulator limited to 600 RPM: one shared budget vs the seed's per-process limiters.

Each scenario runs the same load (16 processes calling as fast as their limiter lets them) and
counts, on the simulator, what was served and what was answered 429 in a steady-state window
(after the first burst both token buckets allow).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import multiprocess as mp

from bench.common import table
from runner.config import Latency, Limits, RetrySettings, SimSettings
from runner.errors import ProviderGaveUp
from runner.models.anthropic import AnthropicProvider
from runner.models.base import Request
from runner.models.client import ModelClient
from runner.models.sim.process import SimServer
from runner.ratelimit import SharedLimiter

RPM = 600.0
REQ = Request("sim-strong", "You are a CRM agent.", [{"role": "user", "text": "What stage is the Cedar Pilot "
                                                      "opportunity in?"}], [])


def _load(url: str, limiter: SharedLimiter | None, own_rpm: float | None, stop_at: float) -> None:
    if own_rpm is not None:  # the seed's way: a limiter of this process's own
        limiter = SharedLimiter({"k": Limits(rpm=own_rpm)}, {})
    client = ModelClient(AnthropicProvider("k", base_url=url, timeout=30), wire_model="sim-strong",
                         logical_model="sim", limiter=limiter, limiter_slot=0 if limiter else None, cache=None,
                         retry=RetrySettings(max_attempts=50, base_seconds=0.2, total_cap_seconds=120), prices={})
    while time.time() < stop_at:
        with contextlib.suppress(ProviderGaveUp):
            client.complete(REQ)


def scenario(mode: str, workers: int, warmup: float, window: float) -> dict[str, Any]:
    settings = SimSettings(latency=Latency(p50_ms=100), limits={"sim-strong": Limits(rpm=RPM)})
    with SimServer(settings) as sim:
        shared = SharedLimiter({"k": Limits(rpm=RPM)}, {}) if mode == "shared" else None
        own = {"shared": None, "per-process RPM/N": RPM / workers, "per-process full RPM": RPM}[mode]
        ctx = mp.get_context("spawn")
        start = time.time() + 3.0  # every process starts calling together
        stop_at = start + warmup + window + 2
        procs = [ctx.Process(target=_delayed, args=(sim.url, shared, own, start, stop_at)) for _ in range(workers)]
        for p in procs:
            p.start()
        time.sleep(max(0.0, start + warmup - time.time()))
        a = sim.stats()
        time.sleep(window)
        b = sim.stats()
        for p in procs:
            p.join(60)
            if p.exitcode is None:
                p.kill()
    ok = int(b.get("ok", 0)) - int(a.get("ok", 0))  # type: ignore[call-overload]
    limited = int(b.get("429", 0)) - int(a.get("429", 0))  # type: ignore[call-overload]
    return {"mode": mode, "served_rpm": ok / window * 60, "share_of_limit": ok / window * 60 / RPM,
            "requests": ok + limited, "429s": limited, "share_429": limited / max(ok + limited, 1)}


def _delayed(url: str, limiter: SharedLimiter | None, own: float | None, start: float, stop_at: float) -> None:
    time.sleep(max(0.0, start - time.time()))
    _load(url, limiter, own, stop_at)


def ratelimit(workers: int = 16, warmup: float = 12, window: float = 40) -> dict[str, Any]:
    rows = [scenario(m, workers, warmup, window) for m in ("shared", "per-process RPM/N", "per-process full RPM")]
    s = rows[0]
    return {"workers": workers, "rpm": RPM, "warmup": warmup, "window": window, "rows": rows,
            "met": s["share_of_limit"] >= 0.95 and s["share_429"] <= 0.01}


def render(r: dict[str, Any]) -> str:
    t = table(["limiter", "served RPM", "share of the 600 RPM limit", "requests", "429s", "share of 429s"],
              [[x["mode"], x["served_rpm"], f"{x['share_of_limit']:.1%}", x["requests"], x["429s"],
                f"{x['share_429']:.2%}"] for x in r["rows"]])
    verdict = "met" if r["met"] else "**missed**"
    return (f"### Rate limits: {r['workers']} workers, simulator limited to {r['rpm']:.0f} RPM\n\n"
            f"Steady state: counted on the simulator over {r['window']:.0f} s after a {r['warmup']:.0f} s warm-up "
            "(both token buckets start full and allow one burst).\n\n"
            f"{t}\n\nTarget for the shared limiter: at least 95 % of the limit used with at most 1 % of calls "
            f"answered 429: {verdict}. The seed's per-process limiters either split the budget (each worker "
            "1/N of it: safe, but an idle or slower worker's share is lost) or each take the whole limit "
            "(429s on every burst).\n")
