"""The headline at real latency: the seeds' whole job bound by rate limits, with `--concurrency auto`.

Latency lognormal with p50 3 s / p95 10 s per call, tier-4-like limits per model (Claude Sonnet: the
baseline and Atlas's teacher share it; GPT-5.4; GPT-5.4-mini: the baseline and Atlas's student
share it), enforced by the simulator as the APIs would (429s with their headers) and given to the
runner as its budget. Time runs `scale` times real for both (latency x scale, limits / scale), so
the work per unit of budget is the real job's. The runner starts small and finds its level itself.

The floor is the time the budgets alone force: for each model, what it was asked for (requests,
input and output tokens, counted as the simulator charges them) over its limit per minute, less the
first minute's burst a full bucket allows; the job's floor is the slowest model's.
"""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.common import WORK, config, dataset, result_rows, seeds_runs, table
from runner.config import Limits, LimitSpec
from runner.results import manifest as manifests

P50_MS, P95_MS = 3000.0, 10000.0
# Per model, as the providers limit them (tier 4; OpenAI's TPM counted as input tokens here).
TIER4 = {"claude-sonnet-5-5": ("anthropic", Limits(rpm=4000, itpm=2_000_000, otpm=400_000)),
         "gpt-5.4": ("openai", Limits(rpm=10_000, itpm=2_000_000, otpm=None)),
         "gpt-5.4-mini": ("openai", Limits(rpm=10_000, itpm=10_000_000, otpm=None))}


TARGET = 1.05  # wall at most this times the floor (issue 52), at most 1 % of calls answered 429
SMOKE_N, SMOKE_SCALE, SMOKE_TIER = 300, 1 / 4, 4  # bench-smoke: a quarter of the job on a quarter of the limits
SMOKE_TARGET = 1.15  # its floor is ~3 minutes, so the start's seconds weigh more: a regression still shows


def headline_auto(n: int, scale: float, tier: float = 1.0) -> dict[str, Any]:
    """`tier`: the limits divided by this (a lower tier keeps fewer conversations as bound by the budget)."""
    data = dataset(n, seed=7)
    out = WORK / "floor-out"
    shutil.rmtree(out, ignore_errors=True)
    limits = {m: _scaled(lim, scale * tier) for m, (_, lim) in TIER4.items()}
    budget = {f"{provider}/{m}": LimitSpec(rpm=limits[m].rpm, itpm=limits[m].itpm, otpm=limits[m].otpm)
              for m, (provider, _) in TIER4.items()}
    cfg = config(data, out, workers=1, runs=seeds_runs(), p50_ms=P50_MS, p95_ms=P95_MS, scale=scale,
                 limits=limits, rate_limits=budget)
    port = free_port()  # the simulator's, for the watch beside the run to read it
    cfg = cfg.model_copy(update={"workers": None, "concurrency": "auto",
                                 "simulator": cfg.simulator.model_copy(update={"port": port})})
    from runner.engine import forkserver
    from runner.run.job import run_job

    before = _planned(cfg)  # what `runner plan` says before the run, from the records alone
    t0 = time.monotonic()
    watch = SimWatch(f"http://127.0.0.1:{port}", t0)
    forkserver.warm(cfg)  # as `runner run` does for a new output: the workers' imports go on beside the preflight
    try:
        run_job(cfg)
    finally:
        wall = time.monotonic() - t0
        watch.stop()
    h = summarize(out, n, scale, wall, limits, TARGET if tier == 1.0 else SMOKE_TARGET)
    h["spent"] = watch.spent(h, wall)
    # and from a pilot as good as can be: every record of this run measured (a fresh output, --measured this one)
    after = _planned(cfg.model_copy(update={"output_dir": WORK / "floor-plan"}), measured=out)
    return {**h, "plan": {"records": before, "measured": after}}


_SIM_BUDGET = {"requests": "requests", "input tokens": "input", "output tokens": "output"}  # its buckets' names


class SimWatch:
    """The run's simulator read every half second from beside the run: its last reading holds each budget's
    bucket as of its model's last request, which says where the wall's time over the floor went (`spent`)."""

    def __init__(self, url: str, t0: float) -> None:
        self.url, self.t0 = url, t0
        self.last: dict[str, Any] | None = None
        self.sim_start: float | None = None  # the simulator's start, in seconds after t0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="sim-watch", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            try:
                with urllib.request.urlopen(f"{self.url}/stats", timeout=5) as r:
                    stats = json.loads(r.read())
                self.sim_start = time.monotonic() - self.t0 - float(stats["uptime_seconds"])
                self.last = stats
            except (OSError, ValueError, KeyError):
                continue  # not written yet, or the simulator is gone: the last reading stands

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def spent(self, h: dict[str, Any], wall: float) -> dict[str, float] | None:
        """For the model whose budget set the floor: seconds from the start to its first request, the floor,
        its budget's refill lost while its bucket was full (nobody asking), what its bucket still held at
        its last request, and the seconds from that request to the run's end; they add up to the wall but
        for the refunds and rounding (`other`)."""
        if not self.last or self.sim_start is None or not h["floors"]:
            return None
        model = max(h["floors"], key=lambda m: h["floors"][m]["seconds"])
        dim = _SIM_BUDGET[h["floors"][model]["bound_by"]]
        b = (self.last.get("buckets") or {}).get(model, {}).get(dim)
        if b is None:
            return None
        per_s = b["capacity"] / 60.0
        parts = {"before its first request": self.sim_start + b["first_s"], "floor": h["floor_s"],
                 "refill lost while its bucket was full": b["wasted"] / per_s,
                 "left in its bucket at its last request": max(0.0, b["level"]) / per_s,
                 "after its last request": wall - self.sim_start - b["last_s"]}
        parts["other"] = wall - sum(parts.values())
        return {"model": model, "budget": dim, **{k: round(v, 1) for k, v in parts.items()}}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _planned(cfg: Any, measured: Path | None = None) -> dict[str, Any]:
    from runner.forecast.forecast import forecast, gather

    f = forecast(cfg, gather(cfg, measured_from=[measured] if measured else []))
    top = f.floor
    return {"floor_s": top.seconds if top else 0.0, "bound_by": f"{top.key}: {top.bound_by}" if top else None,
            "wall_s": f.wall_seconds, "cost_usd": f.cost()}


def _scaled(lim: Limits, scale: float) -> Limits:
    return Limits(**{k: (v / scale if v else None) for k, v in (("rpm", lim.rpm), ("itpm", lim.itpm),
                                                                  ("otpm", lim.otpm))})


def summarize(out: Path, n: int, scale: float, wall: float, limits: dict[str, Limits],
              target: float = TARGET) -> dict[str, Any]:
    rows = result_rows(out)
    manifest = manifests.read(out)
    played = manifest.simulator
    floors: dict[str, dict[str, Any]] = {}
    for model, lim in limits.items():
        used = played.get(model, {})
        provider = TIER4[model][0]
        # what the simulator charges: Anthropic counts cache writes but not reads as input; OpenAI all input
        inp = used.get("input_tokens", 0) + (used.get("cache_write_tokens", 0) if provider == "anthropic"
                                              else used.get("cache_read_tokens", 0))
        need = {"requests": (used.get("requests", 0), lim.rpm), "input tokens": (inp, lim.itpm),
                "output tokens": (used.get("output_tokens", 0), lim.otpm)}
        per = {dim: max(0.0, amount - cap) / cap * 60 for dim, (amount, cap) in need.items() if cap}
        dim = max(per, key=lambda d: per[d])
        floors[model] = {"seconds": per[dim], "bound_by": dim, "requests": used.get("requests", 0),
                         "input_tokens": inp, "output_tokens": used.get("output_tokens", 0)}
    floor = max(float(f["seconds"]) for f in floors.values())
    calls = sum(r.usage.llm_calls for r in rows)
    limited = sum(r.usage.rate_limited for r in rows)
    samples = manifest.in_flight.samples if manifest.in_flight else []
    capacity = manifest.in_flight.capacity if manifest.in_flight else 0
    peak = max((s[1] for s in samples), default=0)
    target_end = next((s[2] for s in reversed(samples) if len(s) > 2 and s[2]), None)
    return {"n": n, "conversations": len(rows), "scale": scale, "wall_s": wall, "floor_s": floor,
            "ratio": wall / floor if floor else float("inf"), "floors": floors, "model_calls": calls,
            "rate_limited": limited, "share_429": limited / max(calls, 1),
            "errors": sum(1 for r in rows if not r.ok), "peak_in_flight": peak, "last_target": target_end,
            "capacity": capacity, "report": str(out / "report.html"),
            "target": target, "met": floor > 0 and wall <= target * floor and limited <= 0.01 * max(calls, 1)}


def render(h: dict[str, Any]) -> str:
    t = table(["conversations", "model calls", "latency scale", "wall s", "rate-limit floor s", "wall / floor",
               "429s", "share of calls 429", "errors", "peak in flight"],
              [[h["conversations"], h["model_calls"], f"1/{1 / h['scale']:g}", h["wall_s"], h["floor_s"],
                f"{h['ratio']:.2f}", h["rate_limited"], f"{h['share_429']:.2%}", h["errors"], h["peak_in_flight"]]])
    per = table(["model", "requests", "input tokens", "output tokens", "floor s", "bound by"],
                [[m, int(f["requests"]), int(f["input_tokens"]), int(f["output_tokens"]), f["seconds"], f["bound_by"]]
                 for m, f in h["floors"].items()])
    verdict = "met" if h["met"] else "**missed**"
    spent = ""
    if sp := h.get("spent"):
        cols = [k for k in sp if k not in ("model", "budget")]
        spent = (f"\n\nWhere the wall went, read from the simulator's {sp['model']} {sp['budget']} budget (its "
                 "bucket as of its model's last request):\n\n" + table([*cols, "wall"], [[*(sp[k] for k in cols),
                                                                                          round(h["wall_s"], 1)]]))
    plan = ""
    if "plan" in h:
        rows = [[src, f"{p['floor_s']:.0f}", p["bound_by"], f"{p['floor_s'] / h['wall_s']:.2f}",
                 f"{(p['wall_s'] or 0):.0f}"] for src, p in h["plan"].items()]
        plan = ("\n\n`runner plan` for this job, before it ran (from its records) and from its own results as a "
                "pilot (`--measured`), against the measured wall:\n\n"
                + table(["plan from", "floor s", "binds", "floor / measured wall", "expected wall s"], rows))
        r, m = h["plan"]["records"], h["plan"]["measured"]
        if r["bound_by"] != m["bound_by"]:
            plan += (f"\n\nFrom the records alone the plan has {r['bound_by']} binding, measured {m['bound_by']}: "
                     "what a model thinks per call is no record's to say (runner/forecast/calls.py), and a pilot "
                     "of a few records measures it.")
    return (f"### The headline at real latency, bound by rate limits (`--concurrency auto`)\n\n"
            f"The seeds' job ({h['n']} conversations x 3 baselines + Atlas), simulator latency lognormal p50 "
            f"{P50_MS / 1000:.0f} s / p95 {P95_MS / 1000:.0f} s per call, tier-4-like limits per model enforced "
            f"by the simulator and given to the runner as its budget; time runs x{h['scale']:g} (latency x"
            f"{h['scale']:g}, limits / {h['scale']:g}): {h['wall_s'] / h['scale'] / 60:.0f} minutes of real time. "
            f"`--concurrency auto` from {h['capacity']} ready slots; the report of this run draws the in-flight "
            f"count over time (`{h['report']}`).\n\n{t}\n\nPer model, what the simulator charged and the time "
            f"its budget alone forces (less the first minute's burst):\n\n{per}\n\n"
            f"Target: wall <= {h.get('target', TARGET):g} x the floor, <= 1 % of calls answered 429: {verdict}."
            f"{spent}{plan}\n")
