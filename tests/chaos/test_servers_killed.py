"""The simulator (and the gateway) killed mid-run are restarted where they were: the calls they dropped
are retried and every record ends ok, exactly once. Before, the simulator's death turned most of the
run's records into provider_gave_up errors and the run still exited 0."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.runs import (
    TOY_PYTHON,
    assert_exactly_once,
    finish,
    results_by_id,
    rows_of,
    run_config,
    servers,
    start_run,
    toy_config,
    wait_for_results,
)

pytestmark = pytest.mark.slow
# Retries that outlast a restart (about a second) on every draw of the jitter.
PATIENT = "retry: {max_attempts: 8, base_seconds: 1.0}\n"


def _server(run_pid: int, name: str) -> int:
    return servers(run_pid, name)[0]


def _restarted(p: subprocess.Popen[str], name: str, old: int) -> None:
    """A new server process (another pid) comes up while the run goes on."""
    deadline = time.monotonic() + 30
    while not [pid for pid in servers(p.pid, name) if pid != old]:
        assert p.poll() is None and time.monotonic() < deadline, "not restarted"
        time.sleep(0.05)


def _kill_midway_and_finish(p: subprocess.Popen[str], out: Path, after: int, name: str) -> None:
    """Once `after` results are in, kill -9 the run's server; it comes back and the run exits 0."""
    wait_for_results(out, after, p)
    first = _server(p.pid, name)
    os.kill(first, signal.SIGKILL)
    _restarted(p, name, first)
    code, log = finish(p)
    assert code == 0, log[-3000:]


def test_a_killed_simulator_is_restarted_and_no_record_fails(tmp_path: Path, local_bindir: str) -> None:
    out = tmp_path / "out"
    p = start_run(run_config(tmp_path, p50_ms=100, extra=PATIENT), out, "--sandbox", "local", "-w", "2",
                  "--limit", "10")
    _kill_midway_and_finish(p, out, 3, "simulator")
    for run in ("strong", "atlas"):
        assert all(r["status"] == "ok" for r in rows_of(out, run)), [r["error"] for r in rows_of(out, run)]
    assert_exactly_once(out, ["strong", "atlas"], 10)


def test_a_killed_gateway_is_restarted_on_its_port(tmp_path: Path, local_bindir: str) -> None:
    records = [{"id": f"r{i}"} for i in range(12)]
    # a time limit that outlasts the restart on a loaded machine (toy_config's 4 s is for its hang test)
    cfg = toy_config(tmp_path, TOY_PYTHON.replace(":play", ":ask"), records,
                     extra="providers_mode: sim\nconversation_timeout_seconds: 60")
    cfg.write_text(cfg.read_text().replace("params: {greeting: hello}", "params: {model: claude-sonnet-5-5}")
                   + "simulator: {latency: {p50_ms: 150}}\n")
    out = tmp_path / "out"
    p = start_run(cfg, out, "--sandbox", "local")
    _kill_midway_and_finish(p, out, 2, "gateway")
    res = results_by_id(out)
    assert set(res) == {r["id"] for r in records}
    assert all(r["status"] == "ok" for r in res.values()), [r["error"] for r in res.values()]
