"""A supervisor stopped for longer than the heartbeat timeout (SIGSTOP, a suspended laptop) must
not, on waking, kill the healthy workers whose heartbeats it did not read meanwhile. Before, it did."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.runs import assert_exactly_once, finish, rows_of, run_config, start_run, wait_for_results

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_a_paused_supervisor_kills_no_healthy_worker(tmp_path: Path, sandbox_image: str) -> None:
    cfg = run_config(tmp_path, p50_ms=80)
    cfg.write_text(cfg.read_text().replace("heartbeat_timeout_seconds: 20", "heartbeat_timeout_seconds: 6"))
    out = tmp_path / "out"
    p = start_run(cfg, out, "--sandbox", "docker", "-w", "2", "--limit", "8")
    wait_for_results(out, 2, p)
    os.kill(p.pid, signal.SIGSTOP)
    time.sleep(12)
    os.kill(p.pid, signal.SIGCONT)
    code, log = finish(p)
    assert code == 0, log[-3000:]
    assert_exactly_once(out, ["strong", "atlas"], 8)
    rows = rows_of(out, "strong") + rows_of(out, "atlas")
    # no worker was killed: nobody was replaced (worker ids 0 and 1 only) and nothing was retried
    assert {r["worker"] for r in rows} <= {0, 1} and {r["attempt"] for r in rows} == {1}, \
        [(r["worker"], r["attempt"]) for r in rows]
