"""The gateway as a resource: a child process the run starts before its workers and stops last."""

from __future__ import annotations

import json
import secrets
import urllib.request
from typing import Any

from runner.gateway.settings import TOKEN_ENV, GatewaySettings
from runner.models.usage import Counts
from runner.resources import ServerProcess
from runner.results.result import Usage


def new_token() -> str:
    """A run's gateway token: what its callers present, and no other process knows."""
    return secrets.token_urlsafe(32)


class GatewayServer(ServerProcess):
    """`with GatewayServer(settings, token) as gw: gw.url`; `gw.stats()` per run at any time. Only callers
    that present `token` are served (the run hands it to its harnesses as their API key)."""

    name = "gateway"

    def __init__(
        self,
        settings: GatewaySettings,
        token: str,
        *,
        log_path: str | None = None,
        host: str = "127.0.0.1",
        wait: bool = True,
    ) -> None:
        self.settings, self.token, self.host = settings, token, host
        args = ["gateway", "--host", host, "--settings-json", settings.model_dump_json()]
        super().__init__(args, log_path=log_path, listen=(host, 0), wait=wait, env={TOKEN_ENV: token})

    def base_url(self, provider: str, run: str, worker: int) -> str:
        """What a worker's SDK gets: the run and worker in the path (OpenAI's clients add /v1 themselves)."""
        return f"{self.url}/run/{run}/worker/{worker}" + ("/v1" if provider == "openai" else "")

    def stats(self) -> dict[str, Any]:
        return dict(_ask(self.url, "/stats", self.token))

    def batches(self) -> dict[str, float]:
        """Batch mode's counts: batches out and ended, requests held, answered, retried, given up."""
        return {k: v for k, v in _ask(self.url, "/batches", self.token).items() if isinstance(v, int | float)}


def _ask(url: str, path: str, token: str | None, *, post: bool = False) -> Any:
    headers = {"x-runner-token": token} if token else {}
    req = urllib.request.Request(
        url + path, method="POST" if post else "GET", data=b"" if post else None, headers=headers
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read() or b"{}")


def set_trial(gateway_url: str, token: str | None, worker: int | str, epoch: int) -> None:
    """Tell the gateway which trial of its record a worker's (slot's) next calls belong to."""
    _ask(gateway_url, f"/workers/{worker}/trial/{epoch}", token, post=True)


def abort_calls(gateway_url: str, token: str | None, worker: int | str) -> int:
    """Close the connections of a worker's (slot's) calls in flight (its record was cut); how many."""
    return int(_ask(gateway_url, f"/workers/{worker}/abort", token, post=True).get("aborted", 0))


def take_usage(gateway_url: str, token: str | None, worker: int | str, parts: int = 1) -> list[Usage]:
    """The calls a worker made since it last asked, as result usage; split evenly over `parts` records
    that ran together (a command harness's chunk shares its calls as it shares its time)."""
    t: dict[str, Any] = _ask(gateway_url, f"/workers/{worker}/take", token, post=True)
    return Counts.from_dict(t).split(parts)
