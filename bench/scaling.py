"""Throughput against W: the seeds' shared database vs this runner's per-worker sandboxes.

Same conversations, same simulator latency, same agent code. Also: harness overhead at W=1
with a zero-latency simulator, from the results' own timestamps.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

from bench.common import (
    WORK,
    CpuMeter,
    ProcessCpu,
    Timing,
    config,
    dataset,
    pct,
    result_rows,
    result_timing,
    serialized_timing,
    table,
    ts,
    uniform_dataset,
)
from bench.seeds_design import ids_of, run_seeds_design, shared_database
from runner.config import Latency, SimSettings
from runner.harness.crm.harness import DATABASE as CRM
from runner.models.sim.process import SimServer
from runner.run.job import run_job
from runner.sandbox.image import ensure_image


def scaling(widths: list[int], p50_ms: float, per_worker: int, seeds_n: int) -> dict[str, Any]:
    """The same conversations (the first N of one uniform list) for both designs at every W."""
    image = ensure_image(CRM)
    def n_for(w: int) -> int:  # wider runs boot longer: more work per worker keeps an all-busy window
        return max(w * (per_worker + w // 2), 10)

    data = uniform_dataset(max(n_for(max(widths)), seeds_n, 10))
    rows = []
    for w in widths:
        n_runner = n_for(w)
        sub = WORK / f"scaling-w{w}.jsonl"
        sub.write_text("".join(line + "\n" for line in data.read_text().splitlines()[:n_runner]))
        out = WORK / f"scaling-out-w{w}"
        _clean(out)
        cfg = config(sub, out, workers=w, p50_ms=p50_ms)
        with CpuMeter() as cpu:
            run_job(cfg)
        ours = result_timing(out)
        n_seeds = max(seeds_n, min(w, 16))  # serialized by the lock: more conversations only take longer
        with SimServer(SimSettings(latency=Latency(p50_ms=p50_ms))) as sim, shared_database(image) as shared:
            seeds = serialized_timing(run_seeds_design(cfg.model_copy(update={"dataset": data}), sim.url,
                                                       shared.dsn("crm"), ids_of(data, n_seeds), w))
        ratio = ours.steady / seeds.steady if seeds.steady else 0.0
        rows.append({"W": w, "seeds_n": seeds.n, "seeds_conv_s": seeds.steady, "seeds_p50": seeds.p50,
                     "seeds_p95": seeds.p95, "runner_n": ours.n, "runner_conv_s": ours.steady,
                     "runner_p50": ours.p50, "runner_p95": ours.p95, "speedup": ratio, "target": 0.9 * w,
                     "met": ratio >= 0.9 * w, "runner_wall_conv_s": ours.throughput,
                     **_cpu_in_window(cpu, ours)})
    return {"p50_ms": p50_ms, "rows": rows}


def slots(levels: list[int], p50_ms: float, per_slot: int, seeds_n: int, top_repeats: int = 1) -> dict[str, Any]:
    """Throughput against C records in flight (workers x slots split by the runner), with the CPU per
    conversation of every process by part, against the seeds' design measured once (its rate does not
    depend on its process count: the TRUNCATE lock runs one conversation at a time; the W table shows it)."""
    image = ensure_image(CRM)
    data = uniform_dataset(max(max(levels) * per_slot, seeds_n, 10))
    lines = data.read_text().splitlines()
    base = config(data, WORK / "slots-out", workers=1, p50_ms=p50_ms)
    with SimServer(SimSettings(latency=Latency(p50_ms=p50_ms))) as sim, shared_database(image) as shared:
        seeds = serialized_timing(run_seeds_design(base, sim.url, shared.dsn("crm"), ids_of(data, seeds_n), 4))
    rows = []
    for c in levels:
        # The top level sits at the edge of the machine and its steady window is short: single runs of
        # C=64 varied 52-60x in a day; the median of `top_repeats` is reported, with the others.
        runs = sorted((_slots_level(c, lines, per_slot, p50_ms, seeds)
                       for _ in range(top_repeats if c == max(levels) else 1)), key=lambda r: r["speedup"])
        row = runs[len(runs) // 2]
        rows.append({**row, "speedups": [r["speedup"] for r in runs]})
    return {"p50_ms": p50_ms, "seeds_conv_s": seeds.steady, "seeds_n": seeds.n, "rows": rows}


def _slots_level(c: int, lines: list[str], per_slot: int, p50_ms: float, seeds: Any) -> dict[str, Any]:
    sub = WORK / f"slots-c{c}.jsonl"
    sub.write_text("".join(line + "\n" for line in lines[:max(c * per_slot, 10)]))
    out = WORK / f"slots-out-c{c}"
    _clean(out)
    cfg = config(sub, out, workers=1, p50_ms=p50_ms).model_copy(update={"workers": None, "concurrency": c})
    with ProcessCpu() as cpu:
        run_job(cfg)
    ours = result_timing(out, level=c)
    (a, b), n = ours.window, max(ours.inside, 1)
    parts = {k: v / n * 1000 for k, v in cpu.between(a, b).items()}
    ratio = ours.steady / seeds.steady if seeds.steady else 0.0
    ok = [r for r in result_rows(out) if r.ok and r.output]
    return {"C": c, "layout": _layout(out),
            "call_ms": pct([r.usage.latency_seconds / max(1, r.usage.llm_calls) for r in ok], 0.5) * 1000,
            "replay_ms": pct([r.output["timings"]["expected_state_ms"] for r in ok if r.output], 0.5),
            "runner_n": ours.n, "runner_conv_s": ours.steady,
            "runner_p50": ours.p50, "runner_p95": ours.p95, "speedup": ratio, "target": 0.9 * c,
            "met": ratio >= 0.9 * c, "cpu_ms": sum(parts.values()), "cpu_parts_ms": parts,
            "cpu_utilisation": sum(parts.values()) / 1000 * ours.steady / (os.cpu_count() or 1)}


def _layout(out: Path) -> str:
    """workers x slots, as the run's log said it."""
    import re

    m = re.search(r"(\d+) worker\(s\) x (\d+) slot\(s\)", (out / "logs" / "supervisor.log").read_text())
    return f"{m.group(1)} x {m.group(2)}" if m else "?"


def render_slots(s: dict[str, Any]) -> str:
    t = table(["C", "workers x slots", "conv/s", "p50 s", "p95 s", "speed-up", "target 0.9·C", "met",
               "CPU ms/conv", "runner", "PostgreSQL", "simulator", "engine + other"],
              [[r["C"], r["layout"], r["runner_conv_s"], r["runner_p50"], r["runner_p95"], r["speedup"], r["target"],
                "yes" if r["met"] else "**no**", r["cpu_ms"], r["cpu_parts_ms"]["runner"],
                r["cpu_parts_ms"]["postgres"], r["cpu_parts_ms"]["simulator"],
                r["cpu_parts_ms"]["engine"] + r["cpu_parts_ms"]["other"]] for r in s["rows"]])
    return (f"### Scaling with slots: C conversations in flight (simulator latency {s['p50_ms']:.0f} ms per call)\n\n"
            f"`--concurrency C`, split by the runner into workers x slots. The same uniform conversations as "
            f"above. The seeds' design, measured once ({s['seeds_n']} conversations, 4 processes): "
            f"{s['seeds_conv_s']:.3f} conversations/s. Throughput is steady state: the window from the first "
            "to the last moment C conversations were in flight. CPU per conversation in that window, every "
            "process on the machine by part (/proc/<pid>/stat): runner = supervisor and workers; "
            "PostgreSQL = every server process in the sandboxes; simulator = the stand-in for the providers "
            "(on a real run that CPU is theirs, not this machine's); engine + other = the Docker engine, its "
            "port proxies, kernel threads. Target for CPU per conversation: ≤ 15 ms.\n\n"
            f"{t}\n\n{_spread(s)}{_why_slots_miss(s)}{_pauses()}{_why_cpu(s)}")


def _pauses() -> str:
    return ("**Pauses that stopped everything.** C=64 missed (55-58x) while every call in flight now and then "
            "took 100-170 ms more than its 200 ms: the simulator's full garbage collections, ~140 ms every "
            "~1.4 s at C=64, walked the ~220,000 objects of the SDK types it loads to check requests (a worker "
            "holds ~230,000 of the same kind, ~120 ms a collection). Both processes now freeze that heap "
            "once loaded (gc.freeze), so a collection sees only what requests create: C=64 61-63x.\n\n")


def _why_cpu(s: dict[str, Any]) -> str:
    r = s["rows"][-1]
    p = r["cpu_parts_ms"]
    verdict = ("Where it goes" if r["cpu_ms"] <= 15 else "Why it misses")
    return (f"**CPU per conversation: {verdict.lower()}.** At C={r['C']}, {r['cpu_ms']:.1f} ms: the runner's own "
            f"processes {p['runner']:.1f} ms, the simulator {p['simulator']:.1f} ms, PostgreSQL {p['postgres']:.1f} "
            f"ms, the engine and the kernel {p['engine'] + p['other']:.1f} ms. The simulator stands in for the "
            f"providers: on a real run its CPU is theirs, and this machine's share is "
            f"{r['cpu_ms'] - p['simulator']:.1f} ms. Cut so far, each measured in docs/architecture.md: the "
            "official SDKs' per-call machinery (the agents send each SDK's own request, learned once, over "
            "keep-alive connections: ~370 -> ~40 us of a worker's CPU a call), the gold replay when the agent "
            "made the gold writes, BEGIN/COMMIT around lookups, the engine's port proxy (the runner's queries go "
            "through a Unix socket), the SDKs' typed parse of each response, the collector's walks of "
            "per-request objects, the image's healthcheck (a runc exec every 2 s a container), the simulator's "
            "re-serialization of the tool list per request. The figure moves with the machine (an Intel Xeon "
            "measured the same code ~1.5x an AMD EPYC on 2026-11-25): compare within one.\n\n")


def _spread(s: dict[str, Any]) -> str:
    top = s["rows"][-1]
    runs = top.get("speedups", [])
    if len(runs) < 2:
        return ""
    return (f"C={top['C']} ran {len(runs)} times: {', '.join(f'{x:.1f}x' for x in runs)}; the table shows the "
            f"median run ({sum(x >= top['target'] for x in runs)} of {len(runs)} at or above the target).\n\n")


def _why_slots_miss(s: dict[str, Any]) -> str:
    missed = [r for r in s["rows"] if not r["met"]]
    if not missed:
        return ""
    r, first, cores = missed[0], s["rows"][0], os.cpu_count() or 1
    worst = missed[-1]
    text = (f"**Why C={r['C']} and up miss.** At C={r['C']} the CPUs were {r['cpu_utilisation']:.0%} busy, yet each "
            f"conversation took longer: p50 {first['runner_p50']:.2f} s at C={first['C']}, {r['runner_p50']:.2f} s "
            f"here. ")
    if "call_ms" in r:
        text += (f"A model call took {r['call_ms']:.0f} ms (p50; {first['call_ms']:.0f} ms at C={first['C']}, the "
                 f"simulator's latency {s['p50_ms']:.0f} ms) and the replay of the gold calls {r['replay_ms']:.0f} ms "
                 f"({first['replay_ms']:.0f} ms): on 2 cores shared by {r['C']} slots' threads, the simulator and "
                 f"PostgreSQL, every step waits its turn for a core in bursts even when the average leaves room. ")
    return text + (f"From there CPU is the wall: C={worst['C']} needs {0.9 * worst['C'] * s['seeds_conv_s']:.1f} "
                   f"conversations/s, which at {worst['cpu_ms']:.0f} ms of CPU each (all processes) is "
                   f"{0.9 * worst['C'] * s['seeds_conv_s'] * worst['cpu_ms'] / 1000:.1f} cores; this machine has "
                   f"{cores}. At real API latency (seconds per call) the same CPU per "
                   "conversation is spread over ~10x the time, which is where hundreds in flight pay off (the "
                   "headline at real latency below).\n\n")


def overhead(n: int) -> dict[str, Any]:
    """W=1, zero latency: per conversation, the time between two results that is not agent time."""
    data = dataset(n, seed=13)
    out = WORK / "overhead-out"
    _clean(out)
    run_job(config(data, out, workers=1))
    rows = sorted(result_rows(out), key=lambda r: ts(r.finished_at))
    gaps = []
    for prev, cur in itertools.pairwise(rows):
        interval = ts(cur.finished_at) - ts(prev.finished_at)
        gaps.append(interval - (cur.output or {})["timings"]["agent_seconds"])
    resets = [(r.output or {})["timings"]["reset_ms"] for r in rows]
    replay = [(r.output or {})["timings"]["expected_state_ms"] for r in rows[1:]]
    harness = [g * 1000 - e for g, e in zip(gaps, replay, strict=True)]
    return {"n": len(rows), "overhead_p50_ms": pct(gaps, 0.5) * 1000, "overhead_p95_ms": pct(gaps, 0.95) * 1000,
            "harness_p50_ms": pct(harness, 0.5), "harness_p95_ms": pct(harness, 0.95),
            "replay_p50_ms": pct(replay, 0.5),
            "reset_p50_ms": pct(resets, 0.5), "reset_p95_ms": pct(resets, 0.95), "target_ms": 15.0,
            "met": pct(harness, 0.5) <= 15.0}


def render(s: dict[str, Any], o: dict[str, Any]) -> str:
    t = table(["W", "seeds conv/s", "seeds p50 s", "seeds p95 s", "runner conv/s", "runner p50 s", "runner p95 s",
               "speed-up", "target 0.9·W", "met"],
              [[r["W"], r["seeds_conv_s"], r["seeds_p50"], r["seeds_p95"], r["runner_conv_s"], r["runner_p50"],
                r["runner_p95"], r["speedup"], r["target"], "yes" if r["met"] else "**no**"] for r in s["rows"]])
    ov = table(["conversations", "harness p50 ms", "harness p95 ms", "reset p50 ms", "reset p95 ms",
                "+ gold replay p50 ms", "all non-agent p50 ms", "target", "met"],
               [[o["n"], o["harness_p50_ms"], o["harness_p95_ms"], o["reset_p50_ms"], o["reset_p95_ms"],
                 o["replay_p50_ms"], o["overhead_p50_ms"], "harness ≤ 15 ms p50", "yes" if o["met"] else "**no**"]])
    return (f"### Scaling against the seeds' design (simulator latency {s['p50_ms']:.0f} ms per call)\n\n"
            "Both designs run the same conversations (one uniform shape: two turns, each a lookup and a write, "
            "six model calls), the same agent code and SDKs, the same simulator. Throughput is steady state: "
            "completions per second while every worker is busy, from the moment the last worker started its "
            "first conversation to the moment the first worker finished its last (start-up stagger and the "
            "final stragglers fall outside; start-up is measured on its own below). The seeds' design runs "
            "one conversation at a time whatever W is (its TRUNCATE lock), so its steady rate is the spacing "
            "of its completions. "
            "p50/p95 are per-conversation times.\n\n"
            f"{t}\n\n{_why_missed(s)}"
            f"### Harness overhead per conversation (W=1, zero-latency simulator)\n\n"
            "Harness: the time between consecutive results that is neither the agent's own time nor the "
            "replay of the gold calls (reset, digest, scoring, hand-off to the supervisor, result write, next "
            "assignment). The gold replay (expected final state) runs once per conversation per worker and is "
            f"shown apart.\n\n{ov}\n")


def _cpu_in_window(cpu: CpuMeter, t: Timing) -> dict[str, float]:
    """CPU per conversation and CPU utilisation inside the all-busy window (start-up excluded)."""
    (a, b), n = t.window, t.inside
    if b <= a or n < 2:
        return {}
    busy = cpu.busy_between(a, b)
    return {"cpu_ms_per_conv": busy / n * 1000, "cpu_utilisation": busy / ((b - a) * (os.cpu_count() or 1))}


def _why_missed(s: dict[str, Any]) -> str:
    """The reason for a miss, in the run's own numbers: CPU, not a lock, when the CPUs were full."""
    missed = [r for r in s["rows"] if not r["met"]]
    if not missed or "cpu_ms_per_conv" not in missed[0]:
        return ""
    first, r = s["rows"][0], missed[0]
    cores = os.cpu_count() or 1
    demand = r["W"] / max(first["runner_p50"], 1e-9) * r["cpu_ms_per_conv"] / 1000  # cores W workers would use
    cause = (f"the CPUs were {r['cpu_utilisation']:.0%} busy during the run" if r["cpu_utilisation"] >= 0.85 else
             f"the CPUs were only {r['cpu_utilisation']:.0%} busy, so CPU alone does not explain it")
    return (f"**Why W={r['W']} misses.** In the all-busy window a conversation cost {r['cpu_ms_per_conv']:.0f} ms "
            f"of CPU over all processes (workers, simulator, PostgreSQL, the engine's port proxy; /proc/stat, "
            f"start-up excluded; {first.get('cpu_ms_per_conv', 0):.0f} ms at W={first['W']}). "
            f"{r['W']} workers each finishing a conversation every {first['runner_p50']:.2f} s would need "
            f"{demand:.1f} cores; this machine has {cores}, and {cause}. The runner's p50 per conversation rises "
            f"from {first['runner_p50']:.2f} s at W={first['W']} to {r['runner_p50']:.2f} s: its workers wait for "
            f"CPU, not for each other (they share no lock). At real API latency (seconds per call rather than "
            f"{s['p50_ms']:.0f} ms) each conversation needs the same CPU spread over ~10x the time, so the same "
            f"cores serve ~10x the workers.\n\n")


def _clean(out: Path) -> None:
    import shutil

    shutil.rmtree(out, ignore_errors=True)
