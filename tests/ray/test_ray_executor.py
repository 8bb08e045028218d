"""`--executor ray`: the default job's workers as Ray actors on a 3-node local cluster, through the
faults a cluster has (an actor killed, a node gone, Ctrl-C), with the local executor's guarantees:
every record exactly once, the same per-record outcomes."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.runs import assert_exactly_once, finish, rows_of, run_config, start_run, wait_for_results

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(400)]
RUNS = ["strong", "atlas"]


def _ray(cluster: Any, *args: str) -> tuple[str, ...]:
    return ("--executor", "ray", "--ray-address", cluster.address, "--sandbox", "docker", *args)


def _outcomes(out: Path) -> dict[tuple[str, str], tuple[str, bool | None, str | None]]:
    return {(r["run"], r["record_id"]): (r["status"], r["success"], r["error_kind"])
            for run in RUNS for r in rows_of(out, run)}


def _worker_pids(out: Path) -> dict[int, int]:
    """worker id -> its process (a Ray worker process on some node), from the workers' own logs."""
    import re

    pids = {}
    for log in (out / "logs").glob("worker-*.log"):
        if m := re.search(r"worker (\d+) starting \(pid (\d+)", log.read_text()):
            pids[int(m[1])] = int(m[2])
    return pids


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_interrupted_and_resumed_on_ray_the_job_gives_the_local_executors_outcomes(
        tmp_path: Path, ray_cluster: Any, sandbox_image: str) -> None:
    """Ctrl-C mid-run (exit 130, the rest to do), the same command completes it: every record once,
    and per record the outcome the local executor gives."""
    cfg, out = run_config(tmp_path, p50_ms=150), tmp_path / "ray"
    args = _ray(ray_cluster, "-w", "3", "--slots", "2", "--limit", "8")
    p = start_run(cfg, out, *args)
    wait_for_results(out, 4, p, timeout=180)
    p.send_signal(signal.SIGINT)
    code, log = finish(p)
    assert code == 130, log[-3000:]
    assert 4 <= sum(len(rows_of(out, r)) for r in RUNS) < 16
    assert "ray: 4 node(s)" in (out / "logs" / "supervisor.log").read_text()
    code, log = finish(start_run(cfg, out, *args))
    assert code == 0, log[-3000:]
    assert_exactly_once(out, RUNS, 8)
    (tmp_path / "local").mkdir()  # the same job without latency (the simulator's answers do not depend on it)
    code, log = finish(start_run(run_config(tmp_path / "local"), tmp_path / "local" / "out", "--sandbox", "docker",
                                 "-w", "3", "--limit", "8"))
    assert code == 0, log[-3000:]
    ray_outcomes, local_outcomes = _outcomes(out), _outcomes(tmp_path / "local" / "out")
    assert len(ray_outcomes) == 16 and ray_outcomes == local_outcomes
    assert all(status == "ok" for status, _, _ in ray_outcomes.values())


def test_a_killed_actor_and_a_removed_node_lose_and_duplicate_nothing(tmp_path: Path, ray_cluster: Any,
                                                                     sandbox_image: str) -> None:
    """One worker actor's process is killed, then a whole node (its raylet and every actor on it) is
    removed, each while records are in flight: what they held is requeued, nothing runs twice, and
    the replacement actors land on the nodes left."""
    cfg, out = run_config(tmp_path, p50_ms=300), tmp_path / "out"
    p = start_run(cfg, out, *_ray(ray_cluster, "-w", "4", "--limit", "16"))
    wait_for_results(out, 3, p, timeout=180)
    first = _worker_pids(out)
    victim = next(pid for pid in first.values() if _alive(pid))
    os.kill(victim, signal.SIGKILL)
    wait_for_results(out, 8, p, timeout=180)
    live = [pid for pid in _worker_pids(out).values() if _alive(pid)]
    raylets = {n.all_processes["raylet"][0].process.pid: n for n in ray_cluster.worker_nodes}
    node = next(raylets[_parent(pid)] for pid in live if _parent(pid) in raylets)
    on_node = [pid for pid in live if raylets.get(_parent(pid)) is node]
    ray_cluster.remove_node(node)
    try:
        code, log = finish(p)
        assert code == 0, log[-3000:]
        assert_exactly_once(out, RUNS, 16)
        rows = [r for run in RUNS for r in rows_of(out, run)]
        assert all(r["status"] == "ok" for r in rows), [r["error"] for r in rows if r["status"] != "ok"]
        sup = (out / "logs" / "supervisor.log").read_text()
        assert sup.count("died (SIGKILL)") >= 1 + len(on_node), sup[-3000:]
        assert len(_worker_pids(out)) >= 4 + 1 + len(on_node)  # each loss replaced by a new actor
    finally:
        ray_cluster.add_node(num_cpus=2)  # the cluster as the module found it
