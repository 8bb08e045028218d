"""A sandbox's socket directory goes with its container. One without a container (its worker killed between
making the directory and the container, or the container removed by other means) is swept: a dead worker's
at once, a dead run's by the next run's start (its owner file), any other once it is an hour old."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from runner.sandbox.docker import (
    SOCKET_PREFIX,
    DockerSandbox,
    remove_orphan_socket_dirs,
    remove_stale,
)
from runner.sandbox.owner import ORPHAN_SECONDS, OWNER_FILE, owner_identity


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # tempfile.gettempdir() answers this
    return tmp_path


def _socket_dir(home: Path, sandbox_id: str, age: float, owner: str | None = None) -> Path:
    path = Path(tempfile.mkdtemp(prefix=f"{SOCKET_PREFIX}{sandbox_id}-", dir=home))
    (path / "run").mkdir()
    if owner is not None:
        (path / OWNER_FILE).write_text(owner)
    then = time.time() - age
    os.utime(path, (then, then))
    return path


def test_only_old_socket_directories_without_their_container_are_removed(home: Path) -> None:
    orphan = _socket_dir(home, "0297f3f0-w2g1-ded386", ORPHAN_SECONDS + 60)
    live = _socket_dir(home, "3f353d23-w1g1-951591", ORPHAN_SECONDS + 60)  # its container is still there
    fresh = _socket_dir(home, "59095c2a-w1g2-a5b80c", 5)  # made ms before its container is
    other = home / "not-ours-0297f3f0"
    other.mkdir()
    os.utime(other, (0, 0))
    assert remove_orphan_socket_dirs({"pgsr-3f353d23-w1g1-951591"}) == 1
    assert not orphan.exists() and live.exists() and fresh.exists() and other.exists()


class _Removing:
    """A container whose removal is cut short by the worker's SIGTERM (the handler raises SystemExit)."""

    def remove(self, **kw: object) -> None:
        raise SystemExit(143)


def test_a_sandbox_told_to_stop_while_removing_its_container_still_removes_its_socket_directory(home: Path) -> None:
    # Found by the fault campaign: a supervisor killed with -9, its workers' SIGTERM arriving while they
    # removed their containers, left two socket directories in six tries (none in fifteen since).
    sandbox = DockerSandbox("unused", "sandbox", run_id="pytest-sigterm", owner_pid=os.getpid())
    sandbox._socket_home = str(_socket_dir(home, sandbox.id, 0))
    sandbox._container = _Removing()  # type: ignore[assignment]
    with pytest.raises(SystemExit):
        sandbox.stop()
    assert not list(home.glob(f"{SOCKET_PREFIX}*"))


def test_a_fresh_directory_of_a_run_that_is_gone_is_removed_and_one_of_a_live_run_kept(home: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_owner = owner_identity(dead.pid)
    dead.wait()
    gone = _socket_dir(home, "85f17466-w0g2-1920fd", 5, owner=dead_owner)
    mine = _socket_dir(home, "85f17467-w0g2-1920fd", 5, owner=owner_identity(os.getpid()))
    assert remove_orphan_socket_dirs(set()) == 1
    assert not gone.exists() and mine.exists()


@pytest.mark.docker
def test_a_dead_workers_directories_go_with_its_containers_even_one_it_had_no_container_for(
        home: Path, sandbox_image: str) -> None:
    # kill -9 of a worker replacing its sandbox, between its directory and its container (the fault campaign)
    me = owner_identity(os.getpid())
    half = _socket_dir(home, "pytestdw-w3g2-1920fd", 0, owner=me)
    other_worker = _socket_dir(home, "pytestdw-w13g1-aaaaaa", 0, owner=me)  # w13 is not w1 nor w3
    remove_stale(run_id="pytestdw-run", worker=3)
    assert not half.exists() and other_worker.exists()
