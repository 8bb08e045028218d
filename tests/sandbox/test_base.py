"""Waiting for a sandbox's server (runner/sandbox/base.py): cheap while it boots, quick to say it died."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from runner.errors import SandboxBootError
from runner.sandbox.base import DEATH_CHECK_SECONDS, Endpoint, wait_connectable


def test_a_booting_server_is_waited_for_by_its_socket_file_and_asked_whether_it_died_now_and_then(
        tmp_path: Path) -> None:
    asked: list[float] = []

    def is_dead() -> str | None:
        asked.append(time.monotonic())
        return "status exited; logs: FATAL" if len(asked) == 3 else None

    t0 = time.monotonic()
    with pytest.raises(SandboxBootError, match="exited while starting: status exited"):
        # no socket file ever appears: no login is tried (a login to a missing socket would say so instead)
        wait_connectable(Endpoint(str(tmp_path), 5432, "u", "p", socket_dir=str(tmp_path)), timeout=30,
                         is_dead=is_dead)
    assert len(asked) == 3 and time.monotonic() - t0 >= 3 * DEATH_CHECK_SECONDS * 0.9


def test_a_server_that_never_answers_is_given_up_on_with_the_last_reason(tmp_path: Path) -> None:
    with pytest.raises(SandboxBootError, match=f"no socket in {tmp_path}"):
        wait_connectable(Endpoint(str(tmp_path), 5432, "u", "p"), timeout=0.2)
