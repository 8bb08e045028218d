"""A sandbox whose database stops answering (`docker pause`: the port still accepts connections, nothing
answers them): the record in flight is cut at its time limit, its result discarded (its sandbox did not
serve it) and the record run again; the worker replaces its sandbox and carries on, every record ends
exactly once and the paused container is removed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.runs import (
    assert_exactly_once,
    containers,
    finish,
    rows_of,
    run_config,
    start_run,
    wait_for_results,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_a_paused_database_is_a_timeout_and_the_worker_carries_on(tmp_path: Path, sandbox_image: str) -> None:
    cfg, out = run_config(tmp_path, p50_ms=100, runs="one"), tmp_path / "out"
    p = start_run(cfg, out, "--sandbox", "docker", "-w", "1", "--limit", "8", "--timeout", "4")
    wait_for_results(out, 2, p)
    (paused,) = containers(owner_pid=p.pid, stopped_too=False)
    subprocess.run(["docker", "pause", paused], check=True, capture_output=True)
    code, log = finish(p, timeout=240)
    assert code == 0, log[-3000:]
    assert_exactly_once(out, ["strong"], 8)
    rows = rows_of(out, "strong")
    assert all(r["status"] == "ok" for r in rows), [r["error"] for r in rows]
    assert sum(len(r["discarded"]) for r in rows) >= 1
    assert len({r["sandbox_id"] for r in rows}) == 2  # the paused one, then its replacement
    assert {r["worker"] for r in rows} == {0}  # the same worker: it was never killed
    gone = subprocess.run(["docker", "ps", "-aq", "--filter", f"id={paused}"], capture_output=True, text=True)
    assert not gone.stdout.strip()
