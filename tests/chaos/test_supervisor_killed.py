"""kill -9 of the supervisor: its workers, the simulator and every sandbox container go with it
(before, they ran on indefinitely, ~140 MB per worker), and the same command then completes the
job exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from runner.sandbox.owner import dir_owner
from tests.runs import (
    alive,
    assert_exactly_once,
    children,
    containers,
    descendants,
    finish,
    run_config,
    start_run,
    wait_for_results,
    worker_pids,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_nothing_outlives_a_killed_supervisor(tmp_path: Path, sandbox_image: str) -> None:
    cfg, out = run_config(tmp_path, p50_ms=100), tmp_path / "out"
    p = start_run(cfg, out, "--sandbox", "docker", "-w", "2", "--limit", "10")
    wait_for_results(out, 2, p)
    kids = [pid for pid in descendants(p.pid) if pid != p.pid]
    # two workers (under the forkserver), the simulator, the tracker
    assert len(worker_pids(p.pid)) == 2 and len(kids) >= 5 and containers(owner_pid=p.pid), children(p.pid)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    deadline = time.monotonic() + 30
    while (any(map(alive, kids)) or containers(owner_pid=p.pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [k for k in kids if alive(k)], subprocess.run(["ps", "-o", "pid,args", "-p", ",".join(map(str, kids))],
                                                              capture_output=True, text=True).stdout
    assert not containers(owner_pid=p.pid), (out / "logs").glob("worker-*.log") and "\n".join(
        f.read_text()[-1500:] for f in sorted((out / "logs").glob("worker-*.log")))
    code, log = finish(start_run(cfg, out, "--sandbox", "docker", "-w", "2", "--limit", "10"))
    assert code == 0, log[-3000:]
    assert_exactly_once(out, ["strong", "atlas"], 10)


def test_nothing_outlives_a_run_killed_all_at_once(tmp_path: Path, sandbox_image: str) -> None:
    """kill -9 of the run's whole process group (a cancelled CI job, a closed terminal's SIGKILL): no process
    is left to clean up but the janitor, in a session of its own: the run's containers, its harnesses'
    processes and its temporary home are gone within a minute."""
    homes = Path(tempfile.gettempdir())
    before = set(homes.glob("pgsr-run-*"))
    cfg, out = run_config(tmp_path, p50_ms=100), tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k != "CI"}
    p = subprocess.Popen([sys.executable, "-m", "runner", "run", str(cfg), "--out", str(out), "--sandbox", "docker",
                          "-w", "2", "--limit", "10"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env=env, start_new_session=True)
    wait_for_results(out, 2, p)  # type: ignore[arg-type]
    # this run's: another test's run may make its own meanwhile (the owner file names the run's process)
    home = {h for h in set(homes.glob("pgsr-run-*")) - before if _owned_by(h, p.pid)}
    assert home and containers(owner_pid=p.pid)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    deadline = time.monotonic() + 60
    while (containers(owner_pid=p.pid) or any(h.exists() for h in home)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not containers(owner_pid=p.pid)
    assert not [h for h in home if h.exists()]
    assert "cleaning for it" in (out / "logs" / "janitor.log").read_text()


def _owned_by(home: Path, pid: int) -> bool:
    owner = dir_owner(str(home))
    return owner is not None and (owner[0] or "").split("/")[2:3] == [str(pid)]
