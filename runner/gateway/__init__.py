"""The model gateway (runner/gateway/server.py): one budget, retries and cache for a harness's SDK calls."""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.config import Limits
from runner.gateway.settings import GatewaySettings, gateway_settings

if TYPE_CHECKING:  # the server (aiohttp) loads where a gateway is built, not wherever this package is touched
    from runner.gateway.server import Gateway


def build_gateway(settings: GatewaySettings, *, token: str | None) -> Gateway:
    """The gateway its settings describe: the shared budget, the response cache, the first-call gates; only
    callers presenting `token` are served (None: every caller, for a gateway no other process can reach)."""
    from runner.budget.gates import Gates
    from runner.budget.ratelimit import SharedLimiter
    from runner.budget.spend import Spend
    from runner.gateway.server import Gateway

    limiter = None
    if settings.limits:
        keys = sorted(settings.limits)
        limiter = SharedLimiter({k: settings.limits[k] for k in keys}, {k: settings.adaptive for k in keys})
    response_cache = None
    if settings.cache_dir is not None:
        from runner.cache import ResponseCache

        response_cache = ResponseCache(settings.cache_dir)
    gates = Gates(settings.gate_keys, settings.gates) if settings.gates else None
    spend = Spend(settings.spend_runs, path=settings.spend) if settings.spend else None
    return Gateway(settings, limiter=limiter, cache=response_cache, token=token, gates=gates, spend=spend)


__all__ = ["GatewaySettings", "Limits", "build_gateway", "gateway_settings"]
