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
