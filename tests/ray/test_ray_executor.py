"""`--executor ray`: the default job's workers as Ray actors on a 3-node local cluster, through the
faults a cluster has (an actor killed, a node gone, Ctrl-C), with the local executor's guarantees:
every record exactly once, the same per-record outcomes."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from runner.resources import parent_of
from tests.runs import assert_exactly_once, finish, rows_of, start_run, wait_for_results

pytestmark = [pytest.mark.slow, pytest.mark.docker]
DEFAULT = Path(__file__).resolve().parents[2] / "configs" / "default.yaml"
DEFAULT_RUNS = ["claude-sonnet", "gpt-large", "gpt-mini", "atlas"]


def _ray(cluster: Any, *args: str) -> tuple[str, ...]:
    return ("--executor", "ray", "--ray-address", cluster.address, "--sandbox", "docker", *args)


def _outcomes(out: Path, runs: list[str]) -> dict[tuple[str, str], tuple[str, bool | None, str | None]]:
    return {(r["run"], r["record_id"]): (r["status"], r["success"], r["error_kind"])
            for run in runs for r in rows_of(out, run)}


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


def test_the_default_job_through_a_killed_actor_a_lost_node_and_ctrl_c_gives_the_local_outcomes(
        tmp_path: Path, ray_cluster: Any, sandbox_image: str) -> None:
    """configs/default.yaml (its four runs) on the cluster, through what a cluster does to a job: one
    worker actor's process killed, then a whole node removed (its raylet and every actor on it), then
    Ctrl-C (exit 130, the rest to do); the same command completes it. Every record once, all
    successful, each lost worker replaced, and per record the outcome the local executor gives. No
    cache: each executor's answers come from the simulator itself. (One job for all of it: a Ray
    job's start is the slow part of these tests.)"""
    out, limit = tmp_path / "ray", ("--limit", "8", "--no-cache")
    args = _ray(ray_cluster, "-w", "4", "--slots", "2", *limit)
    p = start_run(DEFAULT, out, *args)
    try:
        wait_for_results(out, 3, p, timeout=180)
        assert "ray: 4 node(s)" in (out / "logs" / "supervisor.log").read_text()
        os.kill(next(pid for pid in _worker_pids(out).values() if _alive(pid)), signal.SIGKILL)
        wait_for_results(out, 8, p, timeout=180)
        live = [pid for pid in _worker_pids(out).values() if _alive(pid)]
        raylets = {n.all_processes["raylet"][0].process.pid: n for n in ray_cluster.worker_nodes}
        node = next(raylets[parent_of(pid)] for pid in live if parent_of(pid) in raylets)
        lost = 1 + sum(1 for pid in live if raylets.get(parent_of(pid)) is node)
        ray_cluster.remove_node(node)
        wait_for_results(out, 14, p, timeout=180)
        p.send_signal(signal.SIGINT)
        code, log = finish(p)
        assert code == 130, log[-3000:]
        assert 14 <= sum(len(rows_of(out, r)) for r in DEFAULT_RUNS) < 32
        sup = (out / "logs" / "supervisor.log").read_text()
        assert sup.count("died (SIGKILL)") >= lost, sup[-3000:]
        assert len(_worker_pids(out)) >= 4 + lost  # each loss replaced by a new actor
    finally:
        ray_cluster.add_node(num_cpus=2)  # the cluster as the module found it
    code, log = finish(start_run(DEFAULT, out, *args))
    assert code == 0, log[-3000:]
    assert_exactly_once(out, DEFAULT_RUNS, 8)
    code, log = finish(start_run(DEFAULT, tmp_path / "local", "--sandbox", "docker", "-w", "3", *limit))
    assert code == 0, log[-3000:]
    ray_outcomes, local_outcomes = _outcomes(out, DEFAULT_RUNS), _outcomes(tmp_path / "local", DEFAULT_RUNS)
    assert len(ray_outcomes) == 32 and ray_outcomes == local_outcomes
    assert all(status == "ok" for status, _, _ in ray_outcomes.values())
