"""The gateway as a resource: a child process the run starts before its workers and stops last."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from runner.config import Config
from runner.resources import ServerProcess


class GatewayServer(ServerProcess):
    """`with GatewayServer(cfg, sim_url) as gw: gw.url`; `gw.stats()` per run at any time."""

    name = "gateway"

    def __init__(self, cfg: Config, *, sim_url: str | None = None, log_path: str | None = None) -> None:
        args = ["gateway", "--port", "0", "--config-json", cfg.model_dump_json()]
        args += ["--upstream-sim", sim_url] if sim_url else []
        args += [] if cfg.cache else ["--no-cache"]
        super().__init__(args, log_path=log_path)

    def base_url(self, provider: str, run: str, worker: int) -> str:
        """What a worker's SDK gets: the run and worker in the path (OpenAI's clients add /v1 themselves)."""
        return f"{self.url}/run/{run}/worker/{worker}" + ("/v1" if provider == "openai" else "")

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}/stats", timeout=10) as r:
            return dict(json.loads(r.read()))
