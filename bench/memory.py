"""Memory at W=8: the supervisor, each worker and each container, sampled mid-run."""

from __future__ import annotations

import json
import re
import subprocess
import time
from typing import Any

from bench.common import MIX_RUNS, WORK, dataset, forkserver, mean, run_in_background, table, worker_pids

UNITS = {"B": 1 / 2**20, "KiB": 1 / 1024, "MiB": 1.0, "GiB": 1024.0, "kB": 1 / 1024, "MB": 1.0, "GB": 1024.0}


def _proc_mib(pid: int) -> tuple[float, float]:
    """(RSS, PSS) in MiB: PSS shares common pages fairly between the processes that map them."""
    rss = pss = 0.0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1]) / 1024
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1]) / 1024
    except OSError:
        pass
    return rss, pss


def _containers(owner: int) -> list[float]:
    ids = subprocess.run(["docker", "ps", "-q", f"--filter=label=pgsandbox-runner.owner-pid={owner}"],
                         capture_output=True, text=True).stdout.split()
    if not ids:
        return []
    out = subprocess.run(["docker", "stats", "--no-stream", "--format", "{{.MemUsage}}", *ids], capture_output=True,
                         text=True).stdout
    vals = []
    for line in out.strip().splitlines():
        m = re.match(r"([\d.]+)\s*([A-Za-z]+)", line.split("/")[0].strip())
        if m:
            vals.append(float(m.group(1)) * UNITS.get(m.group(2), 1.0))
    return vals


def memory(workers: int, n: int) -> dict[str, Any]:
    data = dataset(n, seed=17)
    out = WORK / "memory-out"
    cfg = WORK / "memory.yaml"
    cfg.write_text(f"dataset: {data}\nproviders_mode: sim\ncache: false\nworkers: {workers}\nsandbox: docker\n"
                   "simulator: {latency: {p50_ms: 200}}\n" + MIX_RUNS)
    p = run_in_background(cfg, out)
    samples: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + 600
        while p.poll() is None and time.monotonic() < deadline:
            time.sleep(3)
            workers_now = worker_pids(p.pid)
            conts = _containers(p.pid)
            done = sum(len(x.read_text().splitlines()) for x in (out / "results").glob("*.jsonl")) \
                if (out / "results").exists() else 0
            if len(workers_now) == workers and len(conts) == workers and done >= 4:
                # the supervisor's side: itself and the forkserver its workers are forked from
                sup = [_proc_mib(x) for x in (p.pid, forkserver(p.pid)) if x is not None]
                samples.append({"supervisor": (sum(r for r, _ in sup), sum(s for _, s in sup)),
                                "workers": [_proc_mib(w) for w in workers_now],
                                "containers": conts})
            if len(samples) >= 5:
                break
    finally:
        p.terminate()
        p.wait(60)
    if not samples:
        raise RuntimeError("no memory sample taken: the run did not reach all workers busy")
    last = samples[-1]
    w_rss = [r for r, _ in last["workers"]]
    w_pss = [s for _, s in last["workers"]]
    c = last["containers"]
    per_worker = max(w_pss) + max(c)
    res = {"workers": workers, "samples": len(samples), "supervisor_rss": last["supervisor"][0],
           "supervisor_pss": last["supervisor"][1], "worker_rss_mean": mean(w_rss), "worker_rss_max": max(w_rss),
           "worker_pss_mean": mean(w_pss), "worker_pss_max": max(w_pss), "container_mean": mean(c),
           "container_max": max(c), "per_worker_total_max": per_worker, "met": per_worker <= 150}
    (WORK / "memory.json").write_text(json.dumps(res, indent=2))
    return res


def render(m: dict[str, Any]) -> str:
    t = table(["process", "RSS MiB", "PSS MiB"],
              [["supervisor", m["supervisor_rss"], m["supervisor_pss"]],
               [f"worker (mean of {m['workers']})", m["worker_rss_mean"], m["worker_pss_mean"]],
               ["worker (max)", m["worker_rss_max"], m["worker_pss_max"]],
               [f"container (docker stats, mean of {m['workers']})", m["container_mean"], ""],
               ["container (max)", m["container_max"], ""]])
    verdict = "yes" if m["met"] else "**no**"
    return (f"### Memory at W={m['workers']} (baseline + Atlas running, sampled mid-run)\n\n{t}\n\n"
            f"Per worker including its PostgreSQL (worst worker PSS + worst container): "
            f"**{m['per_worker_total_max']:.0f} MiB** (target ≤ 150 MiB: {verdict}). PSS counts pages shared "
            "between the workers (the Python runtime, the SDKs) once, split between them; RSS counts them in "
            "every process.\n")


if __name__ == "__main__":
    print(render(memory(8, 64)))
