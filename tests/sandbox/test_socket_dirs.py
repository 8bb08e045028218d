"""A sandbox's socket directory goes with its container; one whose container went by other means (`docker
rm`, an engine whose state was wiped) is swept by the next run's start once it is an hour old."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest

from runner.sandbox.docker import ORPHAN_SECONDS, SOCKET_PREFIX, DockerSandbox, remove_orphan_socket_dirs


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # tempfile.gettempdir() answers this
    return tmp_path


def _socket_dir(home: Path, sandbox_id: str, age: float) -> Path:
    path = Path(tempfile.mkdtemp(prefix=f"{SOCKET_PREFIX}{sandbox_id}-", dir=home))
    (path / "run").mkdir()
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
