"""The gateway as a resource: a child process the run starts before its workers and stops last."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from runner.config import Config
from runner.models.usage import Counts
from runner.resources import ServerProcess
from runner.results.result import Usage


class GatewayServer(ServerProcess):
    """`with GatewayServer(cfg, sim_url) as gw: gw.url`; `gw.stats()` per run at any time."""

    name = "gateway"

    def __init__(self, cfg: Config, *, sim_url: str | None = None, log_path: str | None = None,
                 host: str = "127.0.0.1", wait: bool = True) -> None:
        self.cfg, self.sim_url, self.host = cfg, sim_url, host
        args = ["gateway", "--host", host, "--config-json", cfg.model_dump_json()]
        args += ["--upstream-sim", sim_url] if sim_url else []
        super().__init__(args + ([] if cfg.cache else ["--no-cache"]), log_path=log_path, listen=(host, 0), wait=wait)

    def base_url(self, provider: str, run: str, worker: int) -> str:
        """What a worker's SDK gets: the run and worker in the path (OpenAI's clients add /v1 themselves)."""
        return f"{self.url}/run/{run}/worker/{worker}" + ("/v1" if provider == "openai" else "")

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}/stats", timeout=10) as r:
            return dict(json.loads(r.read()))

    def batches(self) -> dict[str, float]:
        """Batch mode's counts: batches out and ended, requests held, answered, retried, given up."""
        with urllib.request.urlopen(f"{self.url}/batches", timeout=10) as r:
            return {k: v for k, v in json.loads(r.read()).items() if isinstance(v, int | float)}


def set_trial(gateway_url: str, worker: int | str, epoch: int) -> None:
    """Tell the gateway which trial of its record a worker's (slot's) next calls belong to."""
    req = urllib.request.Request(f"{gateway_url}/workers/{worker}/trial/{epoch}", method="POST", data=b"")
    with urllib.request.urlopen(req, timeout=10):
        pass


def take_usage(gateway_url: str, worker: int | str, parts: int = 1) -> list[Usage]:
    """The calls a worker made since it last asked, as result usage; split evenly over `parts` records
    that ran together (a command harness's chunk shares its calls as it shares its time)."""
    req = urllib.request.Request(f"{gateway_url}/workers/{worker}/take", method="POST", data=b"")
    with urllib.request.urlopen(req, timeout=10) as r:
        t: dict[str, Any] = json.loads(r.read())
    return Counts.from_dict(t).split(parts)
