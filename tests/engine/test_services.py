"""The servers the workers call are restarted in place when they die, and stop the run when they keep dying."""

from __future__ import annotations

from runner.engine.services import SERVICE_MAX_RESTARTS, ServiceWatch
from runner.errors import RunStopped


class FakeServer:
    name = "simulator"

    def __init__(self, *, comes_back: bool = True) -> None:
        self.up, self.comes_back, self.restarts = True, comes_back, 0

    def alive(self) -> bool:
        return self.up

    def restart(self) -> None:
        self.restarts += 1
        if not self.comes_back:
            raise RunStopped("the simulator did not start (port taken)")
        self.up = True

    def exit_description(self) -> str:
        return "killed by SIGKILL"


def test_a_dead_server_is_restarted_until_it_keeps_dying() -> None:
    s = FakeServer()
    watch = ServiceWatch([s])
    assert watch.check() is None and s.restarts == 0
    for n in range(1, SERVICE_MAX_RESTARTS + 1):
        s.up = False
        assert watch.check() is None and s.restarts == n and s.alive()
    s.up = False
    why = watch.check()
    assert why is not None and f"died {SERVICE_MAX_RESTARTS + 1} times" in why and "logs/simulator.log" in why


def test_a_server_that_cannot_come_back_stops_the_run_with_its_reason() -> None:
    s = FakeServer(comes_back=False)
    s.up = False
    assert ServiceWatch([s]).check() == "the simulator did not start (port taken)"
