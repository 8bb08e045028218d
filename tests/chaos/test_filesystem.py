"""A read-only output or cache directory and a disk that fills mid-run: one line naming the path, no
traceback, no torn line, and after making room the same command completes exactly once. Before, each
was a raw traceback and a full disk left a torn line and `counts: null`. Needs root (tmpfs mounts)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runs import assert_exactly_once, finish, run_config, start_run

pytestmark = pytest.mark.slow


@pytest.fixture
def mounts(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("tmpfs mounts need root")
    (tmp_path / "ro").mkdir()
    (tmp_path / "small").mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(tmp_path / "ro")], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=120k", "tmpfs", str(tmp_path / "small")], check=True)
    try:
        yield tmp_path
    finally:
        for m in ("ro", "small"):
            subprocess.run(["umount", "-l", str(tmp_path / m)], check=False)


def _one_line_error(log: str, *words: str) -> None:
    assert "Traceback" not in log, log[-3000:]
    errors = [line for line in log.splitlines() if line.startswith("ERROR")]
    said = [line for line in errors if all(w in line for w in words)]
    assert len(said) == 1, log[-3000:]  # once, in one line


def test_read_only_output_and_cache_dirs_are_one_line_errors(mounts: Path, local_bindir: str) -> None:
    cfg = run_config(mounts, runs="one")
    code, log = finish(start_run(cfg, mounts / "ro" / "out", "--sandbox", "local", "--limit", "2"), timeout=120)
    assert code == 2
    _one_line_error(log, f"cannot write {mounts / 'ro' / 'out'}", "Read-only file system")
    cache = mounts / "ro" / "cache"
    cfg.write_text(cfg.read_text().replace("cache: false", f"cache: true\ncache_dir: {cache}"))
    code, log = finish(start_run(cfg, mounts / "out", "--sandbox", "local", "--limit", "2"), timeout=120)
    assert code == 2
    _one_line_error(log, f"cannot write {cache}", "Read-only file system")


def test_a_full_disk_stops_the_run_keeping_whole_lines_and_the_rerun_completes(mounts: Path,
                                                                                local_bindir: str) -> None:
    cfg, out = run_config(mounts, runs="one"), mounts / "small" / "out"
    code, log = finish(start_run(cfg, out, "--sandbox", "local", "--limit", "30", "-w", "2"), timeout=180)
    assert code == 2
    _one_line_error(log, f"cannot write {out / 'results' / 'strong.jsonl'}", "No space left on device",
                    "run the same command again")
    kept = (out / "results" / "strong.jsonl").read_text()
    assert kept.endswith("\n") and all(json.loads(x)["status"] == "ok" for x in kept.splitlines())
    assert 0 < len(kept.splitlines()) < 30
    subprocess.run(["mount", "-o", "remount,size=50m", str(mounts / "small")], check=True)
    code, log = finish(start_run(cfg, out, "--sandbox", "local", "--limit", "30", "-w", "2"), timeout=180)
    assert code == 0, log[-3000:]
    assert_exactly_once(out, ["strong"], 30)
