"""Owner labels: alive, dead, reused pid, another namespace, and the age rule for owners we cannot judge."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from runner.sandbox.owner import STALE_AFTER_HOURS, is_stale, owner_identity, owner_state


def test_a_live_owner_is_alive_and_a_finished_one_dead() -> None:
    assert owner_state(owner_identity(os.getpid())) == "alive"
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    identity = owner_identity(p.pid)
    assert owner_state(identity) == "alive"
    p.wait()
    assert owner_state(identity) == "dead"
    assert is_stale(identity, time.time())


def test_a_reused_pid_is_not_its_old_owner() -> None:
    boot, ns, pid, start = owner_identity(os.getpid()).split("/")
    assert owner_state(f"{boot}/{ns}/{pid}/{int(start) - 1}") == "dead"


def test_an_owner_in_another_namespace_or_boot_is_unknown_until_very_old() -> None:
    boot, ns, pid, start = owner_identity(os.getpid()).split("/")
    for other in (f"{boot}/1/{pid}/{start}", f"other-boot/{ns}/{pid}/{start}", None, "garbage"):
        assert owner_state(other) == "unknown"
        assert not is_stale(other, time.time() - 3600 * (STALE_AFTER_HOURS - 1))
        assert is_stale(other, time.time() - 3600 * (STALE_AFTER_HOURS + 1))


def test_an_owner_labelled_after_it_was_gone_is_dead_once_its_pid_is_free() -> None:
    """A worker that started a sandbox after its supervisor was killed wrote "?" for the start time; such
    containers were judged unknown and stayed 48 h (the fault campaign found them)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    late = owner_identity(p.pid)
    assert late.endswith("/?")
    assert owner_state(late) == "dead" and is_stale(late, time.time())
    boot, ns, _, _ = late.split("/")
    assert owner_state(f"{boot}/{ns}/{os.getpid()}/?") == "unknown"  # a pid in use: perhaps reused, cannot tell


def test_no_sandbox_starts_for_a_run_that_is_gone() -> None:
    import pytest

    from runner.errors import SandboxBootError
    from runner.sandbox.docker import DockerSandbox

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    sb = DockerSandbox("no-such-image", "u", run_id="gone", owner_pid=p.pid, name_hint="t")
    with pytest.raises(SandboxBootError, match="is gone"):
        sb._container_spec("pw", "admin-pw")
