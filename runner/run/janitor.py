"""A run's janitor: `python -m runner.run.janitor HOME OWNER LOG`, started by the run (home.py) in a session
of its own. It waits for the run's process (OWNER: its identity, sandbox/owner.py) to end. If the run marked
its home done, it ended well: the janitor removes what is left of the home
(the temporary directory multiprocess removes at exit, if it could not). If not, the run was killed, and the
janitor does its cleaning: the run's sandboxes (every container and local server whose owner is gone), the
process groups of its harnesses (their leaders named in HOME/leash), and the home itself."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from runner.sandbox.owner import owner_state

POLL_SECONDS = 0.25
SWEEPS, SWEEP_SECONDS = 5, 2.0
DONE = "done"  # in the home: the run cleaned up (home.py); the rest is the process's own, removed at its exit
JANITOR = "janitor"  # in the home: this process's identity (sandbox/owner.py), while it may still clean


def main(home: str, owner: str, log: str) -> None:
    while owner_state(owner) == "alive" and os.path.isdir(home):
        time.sleep(POLL_SECONDS)
    if not os.path.isdir(home):
        return
    if os.path.exists(os.path.join(home, DONE)):  # it ended well: what is left (multiprocess's, at exit) goes
        while owner_state(owner) == "alive":
            time.sleep(POLL_SECONDS)
        shutil.rmtree(home, ignore_errors=True)
        return
    said = [f"the run ({owner}) ended without cleaning up; cleaning for it"]
    for leader in _leaders(Path(home)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(leader, signal.SIGKILL)
            said.append(f"ended harness process group {leader}")
    # A sandbox's server may still be shutting down (its worker's death reaches it a moment after the run's):
    # the sweeps skip a running one, so they go again for a while.
    containers = servers = 0
    for _ in range(SWEEPS):
        containers, servers = containers + _containers(said), servers + _servers(said)
        time.sleep(SWEEP_SECONDS)
    said.append(f"removed {containers} container(s), {servers} local sandbox(es)")
    shutil.rmtree(home, ignore_errors=True)
    said.append(f"removed {home}")
    with contextlib.suppress(OSError), open(log, "a") as f:
        f.write("".join(f"{time.strftime('%Y-%m-%d %H:%M:%S')} janitor: {line}\n" for line in said))


def _containers(said: list[str]) -> int:
    try:
        from runner.sandbox.docker import engine_answers, remove_stale

        return remove_stale() if engine_answers() else 0
    except Exception as e:  # the rest of the cleaning goes on
        said.append(f"containers: {e}")
        return 0


def _servers(said: list[str]) -> int:
    try:
        from runner.sandbox.local import remove_stale_local

        return remove_stale_local()
    except Exception as e:  # the rest of the cleaning goes on
        said.append(f"local sandboxes: {e}")
        return 0


def _leaders(home: Path) -> list[int]:
    try:
        return [int(p.name) for p in (home / "leash").iterdir() if p.name.isdigit()]
    except OSError:
        return []


if __name__ == "__main__":
    main(*sys.argv[1:4])
