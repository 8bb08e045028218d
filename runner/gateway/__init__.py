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
    # batch mode for the runs that ask for it; with `batch.enabled` and no run opting out, for every caller
    # (`runner gateway` serves callers of any run name)
    every = cfg.batch.enabled and all(r.batch is not False for r in cfg.runs)
    batch_runs = frozenset(cfg.batch_runs() | ({"*"} if every else set()))
    settings = GatewaySettings(upstreams=upstreams, retry=cfg.retry, limit_keys={k: k for k in keys},
                               sim_models={} if sim_url else None, model_overrides=cfg.model_overrides(),
                               batch=cfg.batch if batch_runs else None, batch_runs=batch_runs,
                               journal=str(cfg.output_dir / "batches.jsonl") if batch_runs else None)
    response_cache = None
    if cfg.cache if cache is None else cache:
        from runner.cache import DEFAULT_DIR, ResponseCache

        response_cache = ResponseCache(cfg.cache_dir or DEFAULT_DIR)
    return Gateway(settings, limiter=limiter, cache=response_cache)


__all__ = ["Limits", "build_gateway"]
