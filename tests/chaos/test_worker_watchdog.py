"""The supervisor's watchdogs on a user's harness: a frozen worker, a worker deaf to its time limit, a
harness that kills every worker it runs in, and a second Ctrl-C. Every record ends exactly once.

The harness's code runs in the worker only with `isolation: thread`; by default each slot is a process of
its own, which the slot's time limit kills, so the same harness ends those records as timeouts and no worker
dies."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests.runs import TOY_PYTHON, descendants, finish, results_by_id, start_run, toy_config, wait_for_results

pytestmark = [pytest.mark.slow]


def _args(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "(gone)"


IN_THE_WORKER = TOY_PYTHON + "  isolation: thread\n"


def test_a_frozen_worker_and_one_deaf_to_its_alarm_are_killed_and_the_rest_runs(tmp_path: Path,
                                                                                 local_bindir: str) -> None:
    records = [{"id": "freeze", "do": "freeze"}, {"id": "deaf", "do": "deaf"}] + [{"id": f"r{i}"} for i in range(4)]
    cfg = toy_config(tmp_path, IN_THE_WORKER, records,
                     extra="max_attempts: 1\nheartbeat_timeout_seconds: 3\nconversation_timeout_seconds: 1")
    t0 = time.monotonic()
    code, log = finish(start_run(cfg, tmp_path / "out", "--sandbox", "local"), timeout=180)
    assert code == 0, log[-3000:]
    res = results_by_id(tmp_path / "out")
    assert set(res) == {r["id"] for r in records}
    assert all(res[f"r{i}"]["status"] == "ok" for i in range(4))
    # frozen: no heartbeat; SIGABRT stays pending on a stopped process, so SIGKILL ends it
    assert res["freeze"]["error_kind"] == "worker_died" and "SIGKILL" in res["freeze"]["error"]
    # deaf: it beats but holds its record past time limit + margin; SIGABRT makes it dump its stack
    assert res["deaf"]["error_kind"] == "worker_died" and "SIGABRT" in res["deaf"]["error"]
    stacks = "".join(p.read_text() for p in (tmp_path / "out" / "logs").glob("worker-*.log"))
    assert "toyharness.py" in stacks and "in play" in stacks
    assert time.monotonic() - t0 < 90  # the overdue margin is the worker's own (a floor of 15 s), not 60 s


def test_by_default_a_frozen_or_deaf_slot_process_is_its_record_s_timeout_and_no_worker_dies(
        tmp_path: Path, local_bindir: str) -> None:
    records = [{"id": "freeze", "do": "freeze"}, {"id": "deaf", "do": "deaf"}] + [{"id": f"r{i}"} for i in range(4)]
    cfg = toy_config(tmp_path, TOY_PYTHON, records,
                     extra="max_attempts: 1\nheartbeat_timeout_seconds: 3\nconversation_timeout_seconds: 1")
    code, log = finish(start_run(cfg, tmp_path / "out", "--sandbox", "local"), timeout=180)
    assert code == 0, log[-3000:]
    res = results_by_id(tmp_path / "out")
    assert all(res[f"r{i}"]["status"] == "ok" for i in range(4))
    assert res["freeze"]["error_kind"] == res["deaf"]["error_kind"] == "timeout", (res["freeze"], res["deaf"])
    assert "died" not in log and "overdue" not in log, log[-3000:]


def test_a_harness_that_kills_every_worker_stops_the_run_at_the_restart_cap(tmp_path: Path,
                                                                              local_bindir: str) -> None:
    records = [{"id": f"die{i}", "do": "exit"} for i in range(6)]
    cfg = toy_config(tmp_path, IN_THE_WORKER, records, extra="workers: 1\nmax_attempts: 3\nmax_worker_restarts: 2")
    code, log = finish(start_run(cfg, tmp_path / "out", "--sandbox", "local"), timeout=180)
    assert code == 2, log[-3000:]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert "max_worker_restarts 2" in manifest["error"]
    assert len(results_by_id(tmp_path / "out")) < len(records)  # stopped early, nothing written twice


def _running(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def test_a_second_ctrl_c_stops_at_once_and_the_rerun_completes(tmp_path: Path, local_bindir: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    records = [{"id": f"r{i}"} for i in range(3)] + [{"id": "hang", "do": "hang"}] + [{"id": "r9"}]
    cfg = toy_config(tmp_path, TOY_PYTHON, records,
                     extra="workers: 1\nconversation_timeout_seconds: 120\nshutdown_grace_seconds: 120")
    out = tmp_path / "out"
    p = start_run(cfg, out, "--sandbox", "local")
    wait_for_results(out, 3, p)
    time.sleep(0.5)  # the hanging record is being run
    p.send_signal(signal.SIGINT)
    time.sleep(1.0)
    assert p.poll() is None  # the first Ctrl-C waits for running records (up to the grace)
    t0 = time.monotonic()
    kids = [(pid, _args(pid)) for pid in descendants(p.pid) if pid != p.pid]  # workers sit under the forkserver
    p.send_signal(signal.SIGINT)
    code, log = finish(p, timeout=60)
    assert code == 130 and time.monotonic() - t0 < 60, log[-3000:]  # at once: not after the 120 s grace
    assert "run the same command again" in log.lower() or "resume" in log.lower(), log[-1500:]
    deadline = time.monotonic() + 5
    while (left := [args for pid, args in kids if _running(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, left
    assert set(results_by_id(out)) == {"r0", "r1", "r2"}
    monkeypatch.setenv("TOY_NO_HANG", "1")  # the same command and dataset; the cause of the hang fixed
    code, log = finish(start_run(cfg, out, "--sandbox", "local"), timeout=120)
    assert code == 0, log[-3000:]
    assert set(results_by_id(out)) == {r["id"] for r in records}
