"""Who owns a sandbox container, in a form another run can judge without guessing.

A bare pid is not enough: a run in another PID namespace (a CI job sharing the Docker socket) has
pids this one cannot see, so they look dead, and a pid can be reused after its owner died. The
owner label is `boot id / PID namespace / pid / start time`: in our own namespace and boot the
owner is alive exactly when that pid exists with that start time. An owner we cannot judge (another
namespace, another boot, a container from before these labels) is left alone until the container
is older than STALE_AFTER_HOURS, longer than any real run (the seeds' job takes 18-24 hours).

The directories a run makes under the temporary directory (a sandbox's socket, a warm interpreter's)
hold the same identity in a file (`owned_dir`), so the next run's sweep can judge one its run left.
"""

from __future__ import annotations

import functools
import os
import tempfile
import time
from typing import Literal

STALE_AFTER_HOURS = 48.0

OwnerState = Literal["alive", "dead", "unknown"]


@functools.cache
def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return "?"


@functools.cache
def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid").removeprefix("pid:").strip("[]")
    except OSError:
        return "?"


def _start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat), None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # fields after the command name, which may hold spaces


def owner_identity(pid: int) -> str:
    return f"{_boot_id()}/{_pid_namespace()}/{pid}/{_start_ticks(pid) or '?'}"


def owner_state(identity: str | None) -> OwnerState:
    parts = (identity or "").split("/")
    if len(parts) != 4 or parts[0] != _boot_id() or parts[1] != _pid_namespace() or not parts[2].isdigit():
        return "unknown"
    now = _start_ticks(int(parts[2]))
    if parts[3] == "?":  # labelled when its owner was already gone: dead unless the pid is in use (reused?)
        return "dead" if now is None else "unknown"
    return "alive" if now == parts[3] else "dead"


def is_stale(identity: str | None, created_unix: float, *, now: float | None = None) -> bool:
    """Remove this container? Its owner is gone, or unknowable and the container past any run's length."""
    state = owner_state(identity)
    if state == "unknown":
        return ((now or time.time()) - created_unix) / 3600 > STALE_AFTER_HOURS
    return state == "dead"


OWNER_FILE = "owner"  # in a directory of owned_dir's: the identity of the run that made it
# A run's directory this old with no owner file (an older version's) or, for a sandbox's, without its
# container is nobody's: each is made a moment before its file and its container.
ORPHAN_SECONDS = 3600


def owned_dir(prefix: str, identity: str) -> str:
    """A new directory under the temporary directory (0700), holding the identity of the run it is for."""
    path = tempfile.mkdtemp(prefix=prefix)
    with open(os.path.join(path, OWNER_FILE), "w") as f:
        f.write(identity)
    return path


def dir_owner(path: str) -> tuple[str | None, float] | None:
    """Who a directory of owned_dir's is for (None: one made without the file, or a moment before it)
    and when it was made; None if it is gone."""
    try:
        made = os.stat(path).st_mtime
        with open(os.path.join(path, OWNER_FILE)) as f:
            return f.read().strip(), made
    except FileNotFoundError:
        return (None, made) if os.path.isdir(path) else None
    except OSError:
        return None
