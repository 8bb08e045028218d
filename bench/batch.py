"""Batch mode on the seeds' job: its model cost against the same job interactive, its wall time, the
conversations in flight while batches are out, and memory per waiting conversation.

Both runs: the seeds' four runs (three baselines and Atlas) on N conversations each, on the simulator,
prompt caching on, `concurrency: C`, sandboxes with their data on disk (`container_tmpfs: false`: a
conversation waiting on a batch needs no database pages in memory). Interactive calls answer after the
real APIs' latency (~2 s) times `scale`; in batch mode each request of a batch is done after a lognormal
turnaround through a median of `median` and a p95 of `p95` seconds, and a batch ends with its slowest
request, so each step of a conversation waits about the batch's p99.9 (real batches: minutes, most within
the hour; here seconds, so that the job ends in minutes: wall times compare within this table only).

Memory: PSS of every process of the batched run (supervisor, workers, simulator, gateway, PostgreSQL in the
containers), sampled while batches are out, divided by the conversations in flight (all of them waiting).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.common import WORK, dataset, descendants, result_rows, run_in_background, table
from bench.inflight import _container_ids, _container_pids, _in_flight
from bench.memory import _proc_mib

TARGET_COST_SHARE, TARGET_MIB = 0.5, 8.0
SEEDS_RUNS = ("runs:\n"
              "  - {name: claude-sonnet-5-5, provider: anthropic, model: claude-sonnet-5-5, sim_model: sim-strong}\n"
              "  - {name: gpt-5.4, provider: openai, model: gpt-5.4, sim_model: sim-strong}\n"
              "  - {name: gpt-5.4-mini, provider: openai, model: gpt-5.4-mini, sim_model: sim-mini}\n"
              "  - {name: atlas, agent: atlas, provider: openai, model: gpt-5.4-mini, sim_model: sim-mini,\n"
              "     teacher: {provider: anthropic, model: claude-sonnet-5-5, sim_model: sim-teacher}}\n")


def _config(path: Path, data: Path, concurrency: int, *, batched: bool, latency_ms: float, median: float,
            p95: float) -> Path:
    path.write_text(
        f"dataset: {data}\nproviders: sim\ncache: false\nprompt_cache: true\nconcurrency: {concurrency}\n"
        "sandbox: docker\ncontainer_tmpfs: false\nconversation_timeout_seconds: 7200\nheartbeat_timeout_seconds: 300\n"
        f"simulator: {{latency: {{p50_ms: {latency_ms}}}, batches: {{median_seconds: {median}, p95_seconds: {p95}}}}}\n"
        + (f"batch: {{enabled: true, window_seconds: 2, max_requests: 2000, poll_min_seconds: 1, "
           f"poll_max_seconds: {max(2.0, median / 2)}}}\n" if batched else "")
        + SEEDS_RUNS)
    return path


def _is_simulator(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"\0sim\0serve\0" in f.read()
    except OSError:
        return False


def _sample(p: subprocess.Popen[bytes], out: Path) -> dict[str, float]:
    """PSS of the run (the supervisor, the forkserver, the workers, the gateway) and its PostgreSQL servers;
    the simulator apart: it stands in for the providers, who hold the batches of a real run."""
    flying = _in_flight(out)
    procs = descendants(p.pid)
    simulator = sum(_proc_mib(x)[1] for x in procs if _is_simulator(x))
    runner = sum(_proc_mib(x)[1] for x in procs if not _is_simulator(x))
    postgres = sum(_proc_mib(x)[1] for x in _container_pids(_container_ids(p.pid)))
    return {"in_flight": flying, "runner_pss": runner, "postgres_pss": postgres, "total": runner + postgres,
            "simulator_pss": simulator}


def _one(name: str, cfg: Path, sample_every: float) -> dict[str, Any]:
    out = WORK / f"batch-{name}-out"
    t0 = time.monotonic()
    p = run_in_background(cfg, out)
    samples: list[dict[str, float]] = []
    next_sample = time.monotonic() + sample_every
    while p.poll() is None:
        time.sleep(0.5)
        if name == "batch" and time.monotonic() >= next_sample:
            samples.append(_sample(p, out))
            next_sample = time.monotonic() + sample_every
    wall = time.monotonic() - t0
    if p.returncode != 0:
        raise RuntimeError(f"the {name} run exited {p.returncode}: see {out}/logs")
    rows = result_rows(out)
    manifest = json.loads((out / "manifest.json").read_text())
    return {"wall_s": wall, "conversations": len(rows), "errors": sum(1 for r in rows if not r.ok),
            "cost_usd": sum(r.usage.cost_usd or 0.0 for r in rows), "calls": sum(r.usage.llm_calls for r in rows),
            "solved": sum(1 for r in rows if r.success), "samples": samples, "batches": manifest.get("batches", {})}


def batch(n: int, concurrency: int, scale: float = 1 / 60, median: float = 3.0, p95: float = 6.0) -> dict[str, Any]:
    data = dataset(n, seed=31)
    latency_ms = 2000 * scale  # the real APIs' ~2 s a call, on the same time scale
    res: dict[str, Any] = {"n": n, "concurrency": concurrency, "scale": scale, "median_s": median, "p95_s": p95}
    for name in ("interactive", "batch"):
        cfg = _config(WORK / f"batch-{name}.yaml", data, concurrency, batched=name == "batch",
                      latency_ms=latency_ms, median=median, p95=p95)
        res[name] = _one(name, cfg, sample_every=max(5.0, median / 2))
    # the fullest moment: every slot's conversation waiting on a batch (a sample near the end divides the
    # run's fixed memory by the few conversations left)
    waiting = [s for s in res["batch"]["samples"] if s["in_flight"] > 0]
    worst = max(waiting, key=lambda s: (s["in_flight"], s["total"]), default=None)
    res["memory"] = worst
    res["mib_per_waiting"] = worst["total"] / worst["in_flight"] if worst else None
    res["cost_share"] = res["batch"]["cost_usd"] / res["interactive"]["cost_usd"] if res["interactive"]["cost_usd"] \
        else None
    (WORK / "batch.json").write_text(json.dumps(res, indent=2))
    return res


def render(r: dict[str, Any]) -> str:
    i, b, m = r["interactive"], r["batch"], r["memory"] or {}
    share = r["cost_share"]
    rows = [[name, x["conversations"], x["errors"], x["solved"], x["calls"], f"{x['cost_usd']:.4f}",
             f"{x['wall_s']:.0f}"] for name, x in (("interactive", i), ("batch", b))]
    mib = r["mib_per_waiting"]
    waiting = (m or {}).get("in_flight", 0)
    verdict = (f"not judged: {waiting:.0f} waiting at the fullest sample, below 1,024" if waiting < 1024 else
               "met" if mib is not None and mib <= TARGET_MIB else "missed")
    return (f"### Batch mode: the seeds' four runs on {r['n']} conversations each, concurrency {r['concurrency']}\n\n"
            f"bench/batch.py. Time at {r['scale']:.3g} x real: batch turnaround lognormal, median {r['median_s']:g} s, "
            f"p95 {r['p95_s']:g} s per request; prompt caching on in both; data on disk.\n\n"
            + table(["mode", "conversations", "errors", "solved", "model calls", "cost $", "wall s"], rows) + "\n\n"
            + f"- model cost batched / interactive: **{share:.3f}** (target {TARGET_COST_SHARE:g}: "
              f"{'met' if share is not None and share <= TARGET_COST_SHARE + 0.01 else 'missed'}): every token at "
              "half the price, and which tokens were cache reads is what ran beside them (a batch's requests are "
              "answered one after another, so one writes a shared prefix and the rest read it)\n"
            + f"- batches: {int(b['batches'].get('batches_submitted', 0))}, calls answered "
              f"{int(b['batches'].get('requests_answered', 0))}, sent again "
              f"{int(b['batches'].get('requests_retried', 0))}\n"
            + (f"- memory while batches were out: {m.get('total', 0):.0f} MiB PSS for {m.get('in_flight', 0):.0f} "
               f"conversations waiting: **{mib:.1f} MiB each** (target {TARGET_MIB:g} at 1,024: {verdict}); of it "
               f"the runner's processes {m.get('runner_pss', 0):.0f} MiB, PostgreSQL {m.get('postgres_pss', 0):.0f} "
               f"MiB; not counted, the simulator standing in for the providers' batch service: "
               f"{m.get('simulator_pss', 0):.0f} MiB\n"
               if mib is not None else "- memory: no sample with conversations waiting\n"))
