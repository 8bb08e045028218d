"""Slots: K records in flight per worker, each on its own database, through the faults of a real run.

Each test runs the built-in job with 1 worker x 6 slots and checks that every record is recorded
exactly once, all of them successful, whatever was in flight when the fault hit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.runs import (
    assert_exactly_once,
    containers,
    finish,
    line_count,
    ready_container,
    rows_of,
    run_config,
    start_run,
    wait_for_results,
    worker_pids,
)

pytestmark = [pytest.mark.slow, pytest.mark.docker]
SLOTS = ("--sandbox", "docker", "-w", "1", "--slots", "6", "--limit", "16")  # one worker to boot: CI time


def _all_ok(out: Path) -> None:
    assert_exactly_once(out, ["strong", "atlas"], 16)
    rows = rows_of(out, "strong") + rows_of(out, "atlas")
    assert all(r["status"] == "ok" for r in rows), [r["error"] for r in rows if r["status"] != "ok"]


def test_kill_9_of_a_worker_and_docker_kill_of_a_sandbox_with_busy_slots(tmp_path: Path, sandbox_image: str
                                                                          ) -> None:
    """A sandbox holding all its worker's slots' databases is killed: one new sandbox for all of them,
    and the records they held are retried there. Then a worker is killed with its slots busy: each
    record it held goes back (to run alone, see the scheduler), none twice; its container goes at once."""
    out = tmp_path / "out"
    p = start_run(run_config(tmp_path, p50_ms=150), out, *SLOTS)
    wait_for_results(out, 3, p)
    assert "1 worker(s) x 6 slot(s) = 6 records in flight" in (out / "logs" / "supervisor.log").read_text()
    subprocess.run(["docker", "kill", ready_container(out, p)], check=True, capture_output=True)
    deadline = time.monotonic() + 60
    while "replaced by" not in (out / "logs" / "supervisor.log").read_text():
        assert time.monotonic() < deadline and p.poll() is None, "the sandbox was not replaced"
        time.sleep(0.2)
    victim = worker_pids(p.pid)[0]
    os.kill(victim, signal.SIGKILL)
    code, log = finish(p)
    assert code == 0, log[-3000:]
    _all_ok(out)
    rows = rows_of(out, "strong") + rows_of(out, "atlas")
    # several slots were busy when it died (those the dead sandbox had held count that attempt too)
    assert len([r for r in rows if r["attempt"] >= 2]) >= 2
    sup = (out / "logs" / "supervisor.log").read_text()
    assert "died (SIGKILL)" in sup and sup.count("replaced by") == 1
    assert "(of worker" in sup  # the dead worker's container removed when it died, not at the end
    assert not containers(owner_pid=p.pid, stopped_too=False)


def test_sigint_with_busy_slots_then_the_same_command_completes(tmp_path: Path, sandbox_image: str) -> None:
    out = tmp_path / "out"
    cfg = run_config(tmp_path, p50_ms=150)
    args = (*SLOTS[:-1], "10")
    p = start_run(cfg, out, *args)
    wait_for_results(out, 3, p)
    p.send_signal(signal.SIGINT)
    code, log = finish(p, timeout=120)
    assert code == 130, log[-3000:]
    assert 0 < line_count(out) < 20 and not containers(owner_pid=p.pid, stopped_too=False)
    code, log = finish(start_run(cfg, out, *args))
    assert code == 0, log[-3000:]
    assert_exactly_once(out, ["strong", "atlas"], 10)
    assert all(r["status"] == "ok" for r in rows_of(out, "strong") + rows_of(out, "atlas"))


def test_concurrency_auto_starts_small_and_grows_while_the_slots_stay_full(tmp_path: Path, sandbox_image: str
                                                                          ) -> None:
    out = tmp_path / "out"
    cfg = run_config(tmp_path, p50_ms=250, extra="concurrency_window_seconds: 3\n")
    code, log = finish(start_run(cfg, out, "--sandbox", "docker", "--concurrency", "auto", "--limit", "30"))
    assert code == 0, log[-3000:]
    assert_exactly_once(out, ["strong", "atlas"], 30)
    sup = (out / "logs" / "supervisor.log").read_text()
    assert "records in flight at most" in sup and "concurrency target 8 -> 16 (grow): slots full" in sup
    samples = json.loads((out / "manifest.json").read_text())["in_flight"]["samples"]
    allowed = 0
    for _, n, target in samples:  # never more in flight than the throttle had allowed (a cut lets the
        allowed = max(allowed, target)  # records in flight finish, so the bound is the most allowed so far)
        assert n <= allowed
    assert max(n for _, n, _ in samples) > 8  # and it did allow more than it started with
