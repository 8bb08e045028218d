"""The model gateway (runner/gateway/server.py): one budget, retries and cache for SDK calls a harness makes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.config import Config, Limits, model_endpoints

if TYPE_CHECKING:  # the server (aiohttp) loads where a gateway is built, not wherever this package is touched
    from runner.gateway.server import Gateway


def build_gateway(cfg: Config, *, sim_url: str | None = None, cache: bool | None = None) -> Gateway:
    """The gateway a config describes: its rate_limits as one shared budget, its providers' base URLs
    (or the simulator), its retry policy, its response cache."""
    from runner.budget.ratelimit import SharedLimiter
    from runner.gateway.server import Gateway, GatewaySettings

    upstreams = model_endpoints(cfg, sim_url)
    keys = sorted(cfg.rate_limits)
    limiter = SharedLimiter({k: cfg.rate_limits[k].resolved() for k in keys},
                            {k: bool(cfg.adaptive_concurrency) for k in keys}) if keys else None
    settings = GatewaySettings(upstreams=upstreams, retry=cfg.retry, limit_keys={k: k for k in keys},
                               sim_models={} if sim_url else None, model_overrides=cfg.model_overrides())
    response_cache = None
    if cfg.cache if cache is None else cache:
        from runner.cache import DEFAULT_DIR, ResponseCache

        response_cache = ResponseCache(cfg.cache_dir or DEFAULT_DIR)
    return Gateway(settings, limiter=limiter, cache=response_cache)


__all__ = ["Limits", "build_gateway"]
