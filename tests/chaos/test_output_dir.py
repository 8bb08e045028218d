"""Two runs on one --out, and bad input: nothing written by one run is lost to another, and a run
that cannot start leaves no trace. Before the output lock, the second run below exited 0 having
printed 16/16 while the directory held 24 of 64 lines."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.runs import SAMPLE, assert_exactly_once, finish, run_config, start_run, wait_for_results

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_a_second_run_on_a_busy_output_dir_is_refused_and_the_first_loses_nothing(
        tmp_path: Path, sandbox_image: str) -> None:
    # slow enough (~30 s of work) that the first is still running when the second has started and
    # stopped, however loaded the machine: with workers forked from a warm forkserver, 60 ms per call
    # let the first finish before the second got going
    cfg, out = run_config(tmp_path, p50_ms=400), tmp_path / "out"
    first = start_run(cfg, out, "--sandbox", "docker", "-w", "2", "--limit", "8")
    wait_for_results(out, 1, first)
    code, log = finish(start_run(cfg, out, "--sandbox", "docker", "-w", "2", "--limit", "16"), timeout=120)
    assert code != 0, log[-2000:]
    assert f"{out.resolve()} is in use by another run (pid {first.pid})" in log, log[-2000:]
    code, log = finish(first)
    assert code == 0, log[-3000:]
    assert_exactly_once(out, ["strong", "atlas"], 8)
    # now it may (two more records each: enough to see it resume, at 400 ms a call)
    code, log = finish(start_run(cfg, out, "--sandbox", "docker", "-w", "2", "--limit", "10"))
    assert code == 0, log[-3000:]
    assert_exactly_once(out, ["strong", "atlas"], 10)


def test_an_empty_or_malformed_dataset_fails_before_the_output_dir_exists(tmp_path: Path) -> None:
    cfg = run_config(tmp_path)
    empty, bad = tmp_path / "empty.jsonl", tmp_path / "bad.jsonl"
    empty.write_text("\n")
    bad.write_text(SAMPLE.read_text().splitlines()[0] + "\n{not json\n")
    for data, says in ((empty, "no records"), (bad, "bad.jsonl:2")):
        out = tmp_path / f"out-{data.stem}"
        code, log = finish(start_run(cfg, out, "--dataset", str(data)), timeout=60)
        assert code != 0 and says in log, log[-2000:]
        assert not out.exists()


def test_docker_without_an_engine_fails_at_once_naming_it(tmp_path: Path) -> None:
    """Before, it spent 43 s building a base image and failed with "make-base.sh failed"."""
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    t = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "runner", "run", str(run_config(tmp_path)), "--out", str(tmp_path / "o"),
                        "--sandbox", "docker"], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode != 0
    assert "no Docker engine answers at unix:///nonexistent/docker.sock" in p.stderr + p.stdout
    assert time.monotonic() - t < 20
