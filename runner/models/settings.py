"""What making a model client reads of the config (models/client.py), resolved once: whether the calls go
to the simulator or the real APIs, each provider's and cloud's settings, the budgets' keys, retries, prompt
caching and the config's model overrides. The model layer reads no Config."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from runner.config import CloudSettings, Config, LimitSpec, ProviderSettings, RetrySettings, resolve_mode


@dataclass(frozen=True)
class ClientSettings:
    mode: Literal["real", "sim"]
    anthropic: ProviderSettings
    openai: ProviderSettings
    # bedrock, vertex, azure: the config's blocks (a ref's own go over them)
    clouds: Mapping[str, CloudSettings]
    rate_limits: Mapping[str, LimitSpec]
    retry: RetrySettings
    prompt_cache: bool
    model_overrides: Mapping[str, dict[str, Any]] = field(default_factory=dict)

    def provider(self, name: str) -> ProviderSettings:
        """A first-party API's settings (anthropic, openai)."""
        return self.anthropic if name == "anthropic" else self.openai


def client_settings(cfg: Config) -> ClientSettings:
    return ClientSettings(
        mode=resolve_mode(cfg),
        anthropic=cfg.anthropic,
        openai=cfg.openai,
        clouds={"bedrock": cfg.bedrock, "vertex": cfg.vertex, "azure": cfg.azure},
        rate_limits=dict(cfg.rate_limits),
        retry=cfg.retry,
        prompt_cache=cfg.prompt_cache,
        model_overrides=cfg.model_overrides(),
    )
