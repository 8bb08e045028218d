"""A run in another PID namespace (a CI job sharing the Docker socket) must not sweep our live
containers: it cannot see our pids, which is no proof that we are gone. Before owner labels, it
removed them ("removed 2 containers left by crashed runs")."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from runner.sandbox.base import LABEL
from runner.sandbox.docker import remove_stale
from runner.sandbox.owner import owner_identity
from tests.runs import finish, run_config, start_run, wait_for_results

pytestmark = [pytest.mark.docker]


@pytest.fixture
def containers(sandbox_image: str) -> Iterator[dict[str, str]]:
    """Two created (never started) containers: one owned by this live process, one by a dead one."""
    client = docker.from_env()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_identity = owner_identity(dead.pid)
    dead.wait()
    made = {}
    for name, identity, pid in (("live", owner_identity(os.getpid()), os.getpid()), ("dead", dead_identity, dead.pid)):
        c = client.containers.create(sandbox_image, labels={
            LABEL: "1", f"{LABEL}.run": f"pytest-owner-{name}", f"{LABEL}.owner-pid": str(pid),
            f"{LABEL}.owner": identity, f"{LABEL}.keep": "0"})
        made[name] = c.id
    yield made
    for cid in made.values():
        with contextlib.suppress(docker.errors.NotFound):
            client.containers.get(cid).remove(force=True, v=True)
    client.close()


def _exists(cid: str) -> bool:
    client = docker.from_env()
    try:
        client.containers.get(cid)
        return True
    except docker.errors.NotFound:
        return False
    finally:
        client.close()


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_a_sweep_from_another_pid_namespace_removes_nothing_it_cannot_judge(containers: dict[str, str]) -> None:
    sweep = "from runner.sandbox.docker import remove_stale; print(remove_stale())"
    out = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", sweep],
                         capture_output=True, text=True, check=True, timeout=120)
    # what it removed, not whether "dead" still exists: a run starting meanwhile in our namespace
    # (another test's) may rightly sweep it
    assert out.stdout.strip() == "0", out.stdout + out.stderr
    assert _exists(containers["live"])
    remove_stale()  # from the owners' own namespace: the dead owner's container goes, the live one stays
    assert _exists(containers["live"])
    assert not _exists(containers["dead"])


def test_a_crashed_runs_container_that_appears_mid_run_is_gone_when_the_run_ends(tmp_path: Path,
                                                                                  sandbox_image: str) -> None:
    """A run killed while its workers start sandboxes leaves the engine finishing them after the next run's
    start-up sweep (the fault campaign found them left behind): the run's end sweeps again."""
    out = tmp_path / "out"
    p = start_run(run_config(tmp_path, p50_ms=100, runs="strong"), out, "--sandbox", "docker", "-w", "1",
                  "--limit", "4")
    wait_for_results(out, 1, p)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    identity = owner_identity(dead.pid)
    dead.wait()
    client = docker.from_env()
    late = client.containers.create(sandbox_image, labels={
        LABEL: "1", f"{LABEL}.run": "pytest-late", f"{LABEL}.owner-pid": str(dead.pid),
        f"{LABEL}.owner": identity, f"{LABEL}.keep": "0"}).id
    client.close()
    code, log = finish(p)
    assert code == 0, log[-2000:]
    assert not _exists(late)
