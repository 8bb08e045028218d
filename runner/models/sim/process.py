"""The simulator as a resource: a child process started and stopped by a context manager."""

from __future__ import annotations

import json
import socket
import urllib.request
from typing import Any

from runner.config import SimSettings
from runner.resources import ForkedServer, ServerProcess


class SimServer(ServerProcess):
    """`with SimServer(settings) as sim: sim.url` -- a server process on 127.0.0.1."""

    name = "simulator"

    def __init__(
        self,
        settings: SimSettings,
        *,
        boot_timeout: float = 30.0,
        log_path: str | None = None,
        wait: bool = True,
        apis: tuple[str, ...] | None = None,
        fork: Any = None,
    ) -> None:
        """`apis`: the wire formats it will be asked in, resolved ahead (None: both); `fork`: a multiprocess
        context whose forkserver has loaded what the simulator imports (the SDKs), to fork it from."""
        self.settings, self.apis, self.fork = settings, apis, fork
        warm = ["--warm", ",".join(apis)] if apis is not None else []
        super().__init__(
            ["sim", "serve", "--settings-json", settings.model_dump_json(), *warm],
            boot_timeout=boot_timeout,
            log_path=log_path,
            listen=(settings.host, settings.port),
            wait=wait,
        )

    def spawn(self, extra: list[str], sock: socket.socket | None) -> Any:
        if self.fork is None:
            return super().spawn(extra, sock)
        assert sock is not None  # given `listen`: the run binds its socket
        return ForkedServer(
            self.name,
            self.fork,
            "runner.models.sim.server:serve_on",
            (self.settings.model_dump_json(), self.apis),
            self.log_path,
            self.starts > 1,
            sock,
        )

    def stats(self) -> dict[str, object]:
        with urllib.request.urlopen(f"{self.url}/stats", timeout=10) as r:
            return dict(json.loads(r.read()))
