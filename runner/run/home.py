"""A run's home: the one temporary directory everything the run makes lives under, and its janitor.

`runner run` makes it first, and points TMPDIR (and Python's tempfile) at it before it starts any process,
so what the run and its processes leave in "the temporary directory" lands there: multiprocess's pymp-*
directories, sandboxes' socket directories, the warm interpreter's, lock and gate files, a harness's own
temporary files. The run removes it when it ends.

A run killed all at once (kill -9 of its process group, a cancelled CI job) removes nothing. So the home
has a janitor (runner/run/janitor.py): a process in a session of its own, outside the run's process group,
that waits for the run's process to end and, if the home is still there, does what the run would have done:
removes the run's containers, ends its harnesses' process groups, removes the home. A run whose janitor
died with it (its whole cgroup killed) is swept by the next run: its home here (`sweep`), its containers by
docker.py's `remove_stale` (each is labelled with its owner run).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from loguru import logger

from runner.resources import Resource
from runner.run.janitor import DONE, JANITOR
from runner.sandbox.owner import OWNER_FILE, dir_owner, is_stale, owned_dir, owner_identity, owner_state

PREFIX = "pgsr-run-"
_janitors: list[subprocess.Popen[bytes] | None] = []


class RunHome(Resource):
    """`with RunHome(): ...`: the temporary directory while inside, its janitor watching; removed after."""

    def __init__(self, logs: Path | None = None) -> None:
        self.logs = logs  # where the janitor says what it did, if it has to
        self.path: str | None = None
        self._before: tuple[str | None, str | None] = (None, None)
        self._janitor: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        swept = sweep()
        if swept:
            logger.info("removed {} temporary directories of runs that were killed", swept)
        me = owner_identity(os.getpid())
        self.path = owned_dir(PREFIX, me)
        self._before = (os.environ.get("TMPDIR"), tempfile.tempdir)
        os.environ["TMPDIR"] = tempfile.tempdir = self.path
        log = str(self.logs / "janitor.log") if self.logs is not None else os.devnull
        with open(os.devnull, "rb") as null:
            self._janitor = subprocess.Popen(
                [sys.executable, "-m", "runner.run.janitor", self.path, me, log],
                stdin=null,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        # whose the home is once the run is gone: another run's sweep leaves it to a janitor still at work
        (Path(self.path) / JANITOR).write_text(owner_identity(self._janitor.pid))

    def stop(self) -> None:
        """Everything in the home removed but multiprocess's own directory (its exit removes that, and would
        complain of one gone), the home marked done: the janitor removes it once this process has ended."""
        tmpdir, tempdir = self._before
        if self.path is None:
            return
        if tmpdir is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = tmpdir
        tempfile.tempdir = tempdir
        for entry in Path(self.path).iterdir():
            if entry.name.startswith("pymp-") or entry.name in (OWNER_FILE, JANITOR):
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
        (Path(self.path) / DONE).touch()
        self.path = None
        _janitors.append(self._janitor)  # it outlives this object by design: not a process to reap here
        self._janitor = None


def sweep() -> int:
    """Remove the homes of runs that are gone (killed with their janitor): not one whose janitor is still
    cleaning for its run (its containers too, which it finds by their owner, not by the home)."""
    removed = 0
    for entry in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        owned = dir_owner(str(entry))
        if owned is None or owned[0] is None or not is_stale(owned[0], owned[1]):
            continue
        try:
            janitor = (entry / JANITOR).read_text()
        except OSError:
            janitor = None
        if owner_state(janitor) == "alive":
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed += 1
    return removed
