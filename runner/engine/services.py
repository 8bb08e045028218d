"""The servers a run's workers call (the simulator, the gateway), watched like workers.

A dead one comes back on its port at once, so the URLs the workers hold stay valid and the calls it
dropped are retried by their clients as transient connection errors, instead of failing every record
in flight; one that keeps dying is a bug of ours, and stops the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from loguru import logger

from runner.errors import RunStopped

SERVICE_MAX_RESTARTS = 5


class Service(Protocol):
    name: str

    def alive(self) -> bool: ...

    def restart(self) -> None: ...

    def exit_description(self) -> str: ...


class ServiceWatch:
    def __init__(self, services: Sequence[Service] = ()) -> None:
        self.restarts = {s: 0 for s in services}

    def check(self) -> str | None:
        """Restart what died; the reason to stop the run when one cannot come back or keeps dying."""
        for service, restarts in self.restarts.items():
            if service.alive():
                continue
            if restarts >= SERVICE_MAX_RESTARTS:
                return (
                    f"the {service.name} died {restarts + 1} times ({service.exit_description()}); stopping "
                    f"(see logs/{service.name}.log)"
                )
            logger.error(
                "the {} died ({}); restarting it on its port", service.name, service.exit_description()
            )
            self.restarts[service] = restarts + 1
            try:
                service.restart()
            except RunStopped as e:
                return str(e)
        return None
