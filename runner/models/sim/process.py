"""The simulator as a resource: a child process started and stopped by a context manager."""

from __future__ import annotations

import json
import urllib.request

from runner.config import SimSettings
from runner.resources import ServerProcess


class SimServer(ServerProcess):
    """`with SimServer(settings) as sim: sim.url` -- a server process on 127.0.0.1."""

    name = "simulator"

    def __init__(self, settings: SimSettings, *, boot_timeout: float = 30.0, log_path: str | None = None) -> None:
        self.settings = settings
        super().__init__(self.on_port(settings.port), boot_timeout=boot_timeout, log_path=log_path)

    def on_port(self, port: int) -> list[str]:
        return ["sim", "serve", "--settings-json", self.settings.model_copy(update={"port": port}).model_dump_json()]

    def stats(self) -> dict[str, object]:
        with urllib.request.urlopen(f"{self.url}/stats", timeout=10) as r:
            return dict(json.loads(r.read()))

