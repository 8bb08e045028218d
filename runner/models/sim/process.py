"""The simulator as a resource: a child process started and stopped by a context manager."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

from runner.config import SimSettings
from runner.errors import RunStopped
from runner.resources import Resource, stop_process


class SimServer(Resource):
    """`with SimServer(settings) as sim: sim.url` -- a server process on 127.0.0.1."""

    def __init__(self, settings: SimSettings, *, boot_timeout: float = 30.0, log_path: str | None = None) -> None:
        self.settings, self.boot_timeout = settings, boot_timeout
        self.log_path = log_path or os.path.join(tempfile.gettempdir(), f"pgsandbox-sim-{os.getpid()}.log")
        self.url = ""
        self._proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        # stderr to a file: a pipe nobody reads would block the server once it fills.
        with open(self.log_path, "w") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "runner", "sim", "serve", "--settings-json", self.settings.model_dump_json()],
                stdout=subprocess.PIPE, stderr=log, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                start_new_session=True)  # Ctrl-C goes to the supervisor, which stops us last
        assert self._proc.stdout is not None
        deadline = time.monotonic() + self.boot_timeout
        line = ""
        while time.monotonic() < deadline:
            line = self._proc.stdout.readline()
            if line.startswith("listening on "):
                self.url = line.split("listening on ", 1)[1].strip()
                return
            if not line and self._proc.poll() is not None:
                break
        with open(self.log_path) as log:
            err = log.read()[-1500:]
        raise RunStopped(f"the simulator did not start: {line.strip()} {err}")

    def stats(self) -> dict[str, object]:
        with urllib.request.urlopen(f"{self.url}/stats", timeout=10) as r:
            return dict(json.loads(r.read()))

    def reset_stats(self) -> None:
        req = urllib.request.Request(f"{self.url}/stats/reset", method="POST")
        with urllib.request.urlopen(req, timeout=10):
            pass

    def stop(self) -> None:
        stop_process(self._proc)
        self._proc = None
