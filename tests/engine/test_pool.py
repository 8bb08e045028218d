"""The worker pool's judgement of silence (runner/engine/pool.py): heartbeats are read by the supervisor's
clock, so a supervisor that was itself stopped (SIGSTOP, a suspended VM) must not take its own pause for its
workers' silence, wherever in its loop the pause landed; a worker truly silent is still killed."""

from __future__ import annotations

import time
from typing import Any

from loguru import logger

from runner.engine.pool import STALL_SECONDS, WorkerHandle, WorkerPool


class _Link:
    def __init__(self) -> None:
        self.aborted = False

    @property
    def exitcode(self) -> int | None:
        return None

    def send(self, msg: Any) -> None:
        pass

    def abort(self) -> None:
        self.aborted = True


def _pool(*beats_ago: float) -> tuple[WorkerPool, list[_Link]]:
    pool = WorkerPool(None, lambda wid: None, None, heartbeat_timeout=6.0, max_restarts=1)  # type: ignore[arg-type]
    links = []
    for wid, ago in enumerate(beats_ago):
        link = _Link()
        links.append(link)
        pool.workers[wid] = WorkerHandle(wid, link, ready=True, last_beat=time.monotonic() - ago)
    return pool, links


def test_a_pause_of_the_supervisor_since_its_last_judgement_kills_nobody() -> None:
    """The pause landed after the loop's last judgement and before this one (between reading its inbox and
    reaping, say): every heartbeat is as old as the pause, and none is judged stale."""
    pool, links = _pool(12.0, 12.0)
    pool.last_turn = time.monotonic() - 12.0  # the last judgement, before the pause
    said: list[str] = []
    sink = logger.add(lambda m: said.append(str(m)), level="WARNING")
    try:
        assert list(pool.gone()) == []
    finally:
        logger.remove(sink)
    assert not any(link.aborted for link in links)
    assert any("did not run for 12s" in line for line in said)


def test_a_worker_silent_past_its_timeout_while_the_supervisor_ran_is_killed() -> None:
    pool, links = _pool(7.0, 1.0)
    pool.last_turn = time.monotonic() - STALL_SECONDS / 2  # the supervisor has been turning all along
    assert list(pool.gone()) == []  # being killed: gone once its exit shows
    assert [link.aborted for link in links] == [True, False]
