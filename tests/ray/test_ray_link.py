"""The supervisor's handle on a Ray worker asks Ray whether the actor ended at most every
EXIT_CHECK_SECONDS (it is asked on every loop turn, for every worker), yet a join still learns the
end at once."""

from __future__ import annotations

import signal
from typing import Any

import pytest
from ray.exceptions import RayActorError

from runner.engine import ray_executor
from runner.engine.ray_executor import RayLink


class _Ray:
    """ray.wait/get/kill over one fake run: ended or not, with an exit code or killed."""

    def __init__(self) -> None:
        self.waits = 0
        self.ended = False
        self.code: int | None = 0

    def wait(self, refs: list[Any], timeout: float = 0) -> tuple[list[Any], list[Any]]:
        self.waits += 1
        return (refs, []) if self.ended else ([], refs)

    def get(self, ref: Any, timeout: float | None = None) -> int:
        if self.code is None:
            raise RayActorError()
        return self.code

    def kill(self, actor: Any, no_restart: bool = True) -> None:
        pass


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> _Ray:
    ray = _Ray()
    for name in ("wait", "get", "kill"):
        monkeypatch.setattr(ray_executor.ray, name, getattr(ray, name))
    return ray


def test_exit_is_asked_of_ray_at_most_every_interval(fake: _Ray, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(ray_executor.time, "monotonic", lambda: now[0])
    link = RayLink(actor=object(), run_ref=object())
    assert [link.exitcode for _ in range(50)] == [None] * 50
    assert fake.waits == 1  # 50 loop turns, one round trip to Ray
    fake.ended, fake.code = True, 3
    assert link.exitcode is None  # ended, but not asked again yet
    now[0] += ray_executor.EXIT_CHECK_SECONDS
    assert link.exitcode == 3
    assert fake.waits == 2
    assert link.exitcode == 3 and fake.waits == 2  # known: never asked again


def test_a_join_learns_the_end_whenever_exitcode_last_asked(fake: _Ray) -> None:
    link = RayLink(actor=object(), run_ref=object())
    assert link.exitcode is None
    fake.ended, fake.code = True, None  # killed: its result raises
    link.join(1)
    assert link.exitcode == -signal.SIGKILL
