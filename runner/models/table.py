"""`runner models`: the capabilities table as users read it."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

from rich.table import Table

from runner.config import CLOUDS, Config
from runner.models.capabilities import BUILTIN, PRICE_SOURCES, Capabilities, lookup, table
from runner.models.capabilities import today as clock_today
from runner.models.live import Answer, differences


def _thinking(c: Capabilities) -> str:
    if not c.thinking:
        return "no"
    forms = "/".join(sorted(c.thinking))
    default = "thinks by default" if c.thinks_by_default else "off by default"
    off = (
        ""
        if c.can_disable_thinking
        else ", disabled refused"
        + (
            f" (between_tools at {'/'.join(c.between_tools_efforts)})"
            if "between_tools" in c.thinking
            else ""
        )
    )
    effort = f"; effort {'/'.join(c.efforts)} (default {c.default_effort})" if c.efforts else ""
    return f"{forms}, {default}{off}{effort}"


def _retires(c: Capabilities, today: dt.date) -> str:
    if c.retires is None:
        return "-"
    state = "retired" if c.retires <= today else "retires"
    return f"{state} {c.retires}" + (f" -> {c.successor}" if c.successor else "")


def models_table(overrides: dict[str, dict[str, Any]] | None = None, today: dt.date | None = None) -> Table:
    today = today or clock_today()
    sources = "; ".join(f"{p}: read {d} from {url}" for p, (d, url) in PRICE_SOURCES.items())
    t = Table(
        title="models (USD per 1M tokens)",
        caption=f"prices {sources}; `models:` in a config overrides any field",
    )
    for col in (
        "model",
        "provider",
        "sampling sent",
        "thinking",
        "context",
        "max out",
        "in",
        "out",
        "cache write",
        "cache read",
        "retirement",
    ):
        t.add_column(
            col,
            justify="right"
            if col in ("context", "max out", "in", "out", "cache write", "cache read")
            else "left",
        )
    names = sorted(set(BUILTIN) | set(overrides or {}))
    for name in names:
        base = BUILTIN.get(name)
        c = lookup(name, base.provider if base else "openai", overrides)
        p = c.prices
        prices = (
            [f"{v:g}" for v in (p.input, p.output, p.cache_write, p.cache_read)] if p else ["unknown"] * 4
        )
        t.add_row(
            name,
            c.provider,
            ", ".join(sorted(c.sampling)) or "none",
            _thinking(c),
            f"{c.context_tokens:,}",
            f"{c.max_output_tokens:,}",
            *prices,
            _retires(c, today),
        )
    return t


def live_table(answers: dict[tuple[str, str], Answer], where: str) -> Table:
    """`runner models --live`: what each provider's models endpoint answered, beside the table's belief."""
    t = Table(
        title=f"models: the providers' answers ({where}) beside the built-in table",
        caption="the provider's word wins at a run's start; a config's `models:` wins over both",
    )
    for col in (
        "model",
        "provider",
        "answer",
        "thinking (provider)",
        "thinking (table)",
        "max out",
        "retirement",
        "differs",
    ):
        t.add_column(col, overflow="fold")
    for (provider, model), a in sorted(answers.items()):
        base = table(model, provider)
        if a.error or a.missing:
            t.add_row(
                model,
                provider,
                "404: no such model" if a.missing else f"not asked: {a.error}",
                "-",
                _thinking(base),
                f"{base.max_output_tokens:,}",
                str(base.retires or "-"),
                "-",
            )
            continue
        told = replace(base, **a.told)
        thinking = _thinking(told) if "thinking" in a.told else "(not said)"
        out = f"{told.max_output_tokens:,}" if "max_output_tokens" in a.told else "(not said)"
        retires = str(told.retires or "none scheduled") if "retires" in a.told else "(not said)"
        t.add_row(
            model,
            provider,
            "answered",
            thinking,
            _thinking(base),
            out,
            retires,
            "; ".join(differences(base, a.told)) or "agree",
        )
    return t


def ask_live(cfg: Config | None) -> tuple[dict[tuple[str, str], Answer], str]:
    """Every model of `cfg` (or of the table) asked of its provider: the real API where its key is set, else
    what the simulator serves."""
    from runner.config import api_key
    from runner.models import live

    models: set[tuple[str, str]]
    if cfg is not None:
        models = {
            (ref.provider, ref.model)
            for r in cfg.model_runs()
            for ref in [r.model_ref(), *([r.teacher] if r.teacher else [])]
        }
    else:
        models = {(c.provider, name) for name, c in BUILTIN.items()}
    models = {m for m in models if m[0] not in CLOUDS}  # a cloud's models: the first-party model's entry
    keys = {p: k for p in ("anthropic", "openai") if (k := api_key(p))}
    real = {m for m in models if m[0] in keys}
    answers = live.published(models - real)
    if real:
        urls = {"anthropic": cfg.anthropic.base_url, "openai": cfg.openai.base_url} if cfg else {}
        answers.update(live.ask(real, base_urls=urls, keys=keys))
    where = (
        "the real APIs"
        if real == models
        else "the simulator"
        if not real
        else f"the real APIs for {', '.join(sorted(keys))}, the simulator for the rest"
    )
    return answers, where
