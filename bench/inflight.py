"""Memory per conversation in flight with slots: PSS of every process of the run (supervisor,
workers, simulator, PostgreSQL inside each container) divided by the conversations in flight.

The run is the default job's mix (baseline + Atlas) with `concurrency: C` split by the runner
itself (on 2 cores: 4 workers x C/4 slots), and the simulator slow enough (p50 per call) that
every slot stays busy while the samples are taken.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

from bench.common import MIX_RUNS, WORK, dataset, descendants, run_in_background, table
from bench.memory import _proc_mib
from runner.sandbox.base import TMPFS_PATH

TARGET_MIB = 25.0


def _container_ids(owner: int) -> list[str]:
    return subprocess.run(["docker", "ps", "-q", f"--filter=label=pgsandbox-runner.owner-pid={owner}"],
                          capture_output=True, text=True).stdout.split()


def _container_pids(ids: list[str]) -> list[int]:
    """Host pids of every process inside the run's containers (PostgreSQL and its backends)."""
    pids: list[int] = []
    for cid in ids:
        root = subprocess.run(["docker", "inspect", "-f", "{{.State.Pid}}", cid], capture_output=True,
                              text=True).stdout.strip()
        if root.isdigit() and int(root) > 0:
            pids += descendants(int(root))
    return pids


def _data_in_memory_mib(ids: list[str]) -> float:
    """The containers' data directories held in memory (tmpfs): memory no process's PSS shows."""
    used = 0
    for cid in ids:
        out = subprocess.run(["docker", "exec", cid, "df", "-k", "--output=used", TMPFS_PATH], capture_output=True,
                             text=True).stdout.split()
        used += int(out[-1]) if out and out[-1].isdigit() else 0
    return used / 1024


def _in_flight(out: Any) -> int:
    """What the supervisor's status file says is in flight (written every second)."""
    try:
        return int(json.loads((out / "logs" / "status.json").read_text()).get("in_flight", 0))
    except (OSError, ValueError):
        return -1


def inflight(concurrency: int, p50_ms: float = 4000) -> dict[str, Any]:
    n = concurrency  # x 2 runs: twice as many items as slots, so every slot is busy mid-run
    data = dataset(n, seed=29)
    out = WORK / "inflight-out"
    cfg = WORK / "inflight.yaml"
    cfg.write_text(f"dataset: {data}\nproviders: sim\ncache: false\nconcurrency: {concurrency}\nsandbox: docker\n"
                   f"conversation_timeout_seconds: 900\nheartbeat_timeout_seconds: 120\n"
                   f"simulator: {{latency: {{p50_ms: {p50_ms}}}}}\n" + MIX_RUNS)
    p = run_in_background(cfg, out)
    samples: list[dict[str, Any]] = []
    t0 = time.monotonic()
    try:
        while p.poll() is None and time.monotonic() - t0 < 900 and len(samples) < 3:
            time.sleep(2)
            flying = _in_flight(out)
            if flying < concurrency:
                continue
            runner_pids = descendants(p.pid)
            ids = _container_ids(p.pid)
            pg_pids = _container_pids(ids)
            runner_pss = sum(_proc_mib(x)[1] for x in runner_pids)
            pg_pss = sum(_proc_mib(x)[1] for x in pg_pids)
            samples.append({"in_flight": flying, "runner_pss": runner_pss, "postgres_pss": pg_pss,
                            "data_mib": _data_in_memory_mib(ids),
                            "runner_processes": len(runner_pids), "postgres_processes": len(pg_pids),
                            "workers": sum(1 for x in runner_pids if x != p.pid)})
    finally:
        p.terminate()
        p.wait(120)
    if not samples:
        raise RuntimeError(f"never {concurrency} in flight: see {out}/logs")
    worst = max(samples, key=lambda s: s["runner_pss"] + s["postgres_pss"] + s["data_mib"])
    total = worst["runner_pss"] + worst["postgres_pss"] + worst["data_mib"]
    res = {"concurrency": concurrency, "p50_ms": p50_ms, **worst, "total_pss": total,
           "per_conversation": total / worst["in_flight"], "samples": len(samples),
           "layout": _layout(out), "met": total / worst["in_flight"] <= TARGET_MIB}
    (WORK / "inflight.json").write_text(json.dumps(res, indent=2))
    return res


def _layout(out: Any) -> str:
    try:
        log = (out / "logs" / "supervisor.log").read_text()
    except OSError:
        return "?"
    for line in log.splitlines():
        if "records in flight at most" in line:
            return line.split(" - ", 1)[-1]
    return "?"


def render(m: dict[str, Any]) -> str:
    t = table(["in flight", "runner processes PSS MiB", "PostgreSQL processes PSS MiB", "databases in memory MiB",
               "total MiB", "MiB per conversation", "target", "met"],
              [[m["in_flight"], m["runner_pss"], m["postgres_pss"], m["data_mib"], m["total_pss"],
                m["per_conversation"], f"≤ {TARGET_MIB:g}", "yes" if m["met"] else "**no**"]])
    return (f"### Memory per conversation in flight: {m['concurrency']} at once\n\n"
            f"`concurrency: {m['concurrency']}` ({m['layout']}), baseline + Atlas, simulator p50 "
            f"{m['p50_ms']:g} ms per call so every slot stays busy; the worst of {m['samples']} samples taken "
            f"with all {m['in_flight']} in flight. PSS (shared pages split between the processes that map "
            f"them) summed over the runner's {m['runner_processes']} processes (supervisor, workers, "
            f"simulator) and the {m['postgres_processes']} PostgreSQL processes inside the containers "
            "(postmaster, a backend per session, helpers), plus the containers' data directories, which live in "
            "memory (tmpfs: the databases of every slot). Not counted: the Docker engine's own processes.\n\n"
            f"{t}\n\nBefore slots, a conversation in flight cost a worker process and a PostgreSQL container: "
            "139 MiB (the section above). Now the slots' databases, in memory, are "
            f"{m['data_mib'] / m['in_flight']:.1f} MiB of each conversation's share (each slot has its own copy of "
            "the CRM database, ~7.5 MiB, mostly PostgreSQL's own catalogues; the Atlas telemetry database is one "
            "per worker, shared by its slots: a copy each was another 7.5 MiB, 24.9 MiB per conversation in all); "
            "the PostgreSQL backends (a session per database per slot) "
            f"{m['postgres_pss'] / m['in_flight']:.1f} MiB; the runner's processes, which share one SDK client "
            "per model and one cache connection per worker between their slots, "
            f"{m['runner_pss'] / m['in_flight']:.1f} MiB.\n")


if __name__ == "__main__":
    print(render(inflight(int(sys.argv[1]) if len(sys.argv) > 1 else 256)))
