"""kill -9 of a worker while its harness runs a record: the harness's processes (a `command` harness's CLI
and its children, a `python` harness's own interpreter and its children) end with the worker, not when
the record would have (before: a CLI ran its whole chunk on as an orphan, every model call of it paid)."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.runs import TOY, alive, finish, proc_stat, start_run, toy_config, worker_pids

pytestmark = pytest.mark.slow

HARNESSES = {
    "command": f"  kind: command\n  command: ['{{python}}', '{TOY / 'toycli.py'}', '{{input}}', '{{output}}']\n",
    # an interpreter of the harness's own (a virtualenv's): the worker talks to it through a shim process
    "python": f"  kind: python\n  entrypoint: toy.toyharness:play\n  pythonpath: [{TOY.parent}]\n"
              f"  python: {sys.executable}\n",
}
NAP = 60  # the record's own length: without the leash, its processes would live this long


def _pids() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def _with_marker(marker: str) -> list[int]:
    found = []
    for pid in _pids():
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            pass
    return found


def _group(pgid: int) -> list[int]:
    return [pid for pid in _pids() if (fields := proc_stat(pid)) is not None and int(fields[2]) == pgid
            and fields[0] != "Z"]


@pytest.mark.parametrize("kind", sorted(HARNESSES))
def test_a_killed_workers_harness_ends_with_it(tmp_path: Path, local_bindir: str, kind: str) -> None:
    records = [{"id": f"long-{kind}", "nap": NAP, "spawn": True}]
    cfg = toy_config(tmp_path, HARNESSES[kind], records,
                     extra=f"workers: 1\nconversation_timeout_seconds: {NAP * 3}\nshutdown_grace_seconds: 1")
    p = start_run(cfg, tmp_path / "out", "--sandbox", "local")
    try:
        deadline = time.monotonic() + 90
        while not (spawned := _with_marker(f"toy-spawn-long-{kind}")):
            assert p.poll() is None and time.monotonic() < deadline, "the harness never started its child"
            time.sleep(0.1)
        pgid = os.getpgid(spawned[0])
        harness = _group(pgid)
        (worker,) = worker_pids(p.pid)
        assert worker not in harness and len(harness) >= 2, harness  # its own group: the harness and its child
        os.kill(worker, signal.SIGKILL)
        t0 = time.monotonic()
        while (left := [pid for pid in harness if alive(pid)]) and time.monotonic() - t0 < 10:
            time.sleep(0.02)
        took = time.monotonic() - t0
        # milliseconds in practice (a pidfd wakes the leash); the bound is far below the record's NAP seconds
        assert not left, f"{left} of the harness's group outlived its worker by 10 s"
        print(f"{kind}: the harness's {len(harness)} processes ended {took:.3f} s after their worker")
    finally:
        p.send_signal(signal.SIGINT)
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        finish(p, timeout=60)
