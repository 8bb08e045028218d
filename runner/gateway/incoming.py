"""One caller's request as the gateway reads it: who made it (run, worker), which route (provider, the
model a cloud's path names), its bytes and body, and what it is held to (the model played or priced as)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runner.gateway.routes import Route


@dataclass
class Incoming:
    """One caller's request, as the gateway reads it."""

    run: str
    worker: str | None
    route: Route
    raw: bytes
    body: dict[str, Any] | None
    plays: str = ""  # the model a simulator model stands in for (the caller's x-sim-plays), if it said
    query: str = ""  # the caller's query string, sent on to a cloud (Azure's api-version)
    deployments: Mapping[str, str] = field(default_factory=dict)  # Azure: deployment -> the model it serves

    @property
    def provider(self) -> str:
        return self.route.provider

    @property
    def path(self) -> str:
        """The first-party path of the call's API (what replay, batching and the cache key go by)."""
        return self.route.api_path

    @property
    def model(self) -> str:
        """The model asked for: the path's (a cloud's model id, an Azure deployment), else the body's."""
        return self.route.model or (str(self.body.get("model", "")) if self.body else "")

    @property
    def priced_as(self) -> str:
        """The model whose prices and rules the call is held to: the one played, else the one asked (for an
        Azure deployment, the model it serves)."""
        return self.plays or self.deployments.get(self.model, self.model)

    @property
    def streaming(self) -> bool:
        if self.route.streams is not None:
            return self.route.streams
        return bool(self.body and self.body.get("stream"))
