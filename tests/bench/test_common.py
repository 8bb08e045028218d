"""The benchmarks' own measuring: steady-state windows and CPU by part."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from bench.common import SELF, ProcessCpu, full_timing, timing_of


def test_full_timing_takes_the_window_in_which_every_slot_was_busy() -> None:
    # Two slots: the second starts late (its database was being copied) and finishes early.
    rows = [(0, 0.0, 1.0), (0, 1.0, 2.0), (0, 2.0, 3.0), (0, 3.0, 4.0),
            (0, 1.5, 2.5), (0, 2.5, 3.5)]
    t = full_timing(rows, level=2)
    assert t.window == (1.5, 3.5)  # a slot's hand-off at 1.0 (an end, then a start) is not two in flight
    assert t.inside == 4  # finished at 2.0, 2.5, 3.0 and 3.5
    assert t.steady == 2.0  # two slots, a conversation a second each
    # One key for both slots: by worker the window would be the whole run.
    assert timing_of(rows).window == (0.0, 4.0)


def test_full_timing_never_full_falls_back_to_the_worker_window() -> None:
    rows = [(0, 0.0, 1.0), (1, 0.5, 1.5)]
    assert full_timing(rows, level=5).window == timing_of(rows).window


def test_process_cpu_counts_a_busy_child_under_its_part() -> None:
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0: pass\n"
    with ProcessCpu(every_s=0.1) as cpu:
        t0 = time.time()
        child = subprocess.Popen([sys.executable, "-c", busy])
        child.wait()
        time.sleep(0.3)
        t1 = time.time()
    parts = cpu.between(t0, t1)
    assert set(parts) == {"runner", "simulator", "postgres", "engine", "harness", "other"}
    # the child is a python process: the runner's part; its 1 s of CPU is in it, up to
    # its last sample before it exited
    assert parts["runner"] >= 0.7, parts
    assert parts["runner"] <= (t1 - t0) * (os.cpu_count() or 1)


def test_process_cpu_leaves_its_own_reading_out_of_the_runners_part() -> None:
    # The benches sample from the supervisor's process: the sampler's reads are timed and taken off the
    # runner's part. Judged on set samples (other python processes, such as parallel test workers, are
    # in the runner's part too), and on a real read that it times itself.
    cpu = ProcessCpu(every_s=1)
    first = cpu.read()
    assert first[SELF] == 0.0 and cpu._own > 0
    me = next(k for k in first if k[0] == os.getpid())
    cpu.samples = [(10.0, {SELF: 0.0, me: 1.0}), (11.0, {SELF: 0.25, me: 1.75}), (12.0, {SELF: 0.5, me: 2.5})]
    assert cpu.between(10.0, 12.0)["runner"] == pytest.approx(1.0)  # 1.5 s of CPU, 0.5 of it reading


def test_process_cpu_counts_a_server_named_after_its_fork_under_its_part() -> None:
    # A simulator forked from the forkserver has the forkserver's command line (a python one: the runner's
    # part) and names itself pgsr-simulator a moment later: the name wins, even if a read came first.
    # (The name is put together in the child: its command line must not say it.)
    named = ("import time\nfrom runner.resources import name_process\ntime.sleep(0.4)\n"
             "name_process('pgsr-' + 'simulator')\n"
             "t = time.process_time()\nwhile time.process_time() - t < 0.8: pass\ntime.sleep(0.3)\n")
    with ProcessCpu(every_s=0.1) as cpu:
        t0 = time.time()
        child = subprocess.Popen([sys.executable, "-c", named])
        child.wait()
        t1 = time.time()
    assert cpu.between(t0, t1)["simulator"] >= 0.6
