"""`runner models`: the capabilities table as users read it."""

from __future__ import annotations

import datetime as dt
from typing import Any

from rich.table import Table

from runner.models.capabilities import BUILTIN, PRICE_SOURCES, Capabilities, lookup


def _thinking(c: Capabilities) -> str:
    if not c.thinking:
        return "no"
    forms = "/".join(sorted(c.thinking))
    default = "thinks by default" if c.thinks_by_default else "off by default"
    off = "" if c.can_disable_thinking else ", cannot be turned off"
    effort = f"; effort {'/'.join(c.efforts)} (default {c.default_effort})" if c.efforts else ""
    return f"{forms}, {default}{off}{effort}"


def _retires(c: Capabilities, today: dt.date) -> str:
    if c.retires is None:
        return "-"
    state = "retired" if c.retires <= today else "retires"
    return f"{state} {c.retires}" + (f" -> {c.successor}" if c.successor else "")


def models_table(overrides: dict[str, dict[str, Any]] | None = None, today: dt.date | None = None) -> Table:
    today = today or dt.date.today()
    sources = "; ".join(f"{p}: read {d} from {url}" for p, (d, url) in PRICE_SOURCES.items())
    t = Table(title="models (USD per 1M tokens)", caption=f"prices {sources}; `models:` in a config overrides "
                                                           "any field")
    for col in ("model", "provider", "sampling sent", "thinking", "context", "max out", "in", "out",
                "cache write", "cache read", "retirement"):
        t.add_column(col, justify="right" if col in ("context", "max out", "in", "out", "cache write", "cache read")
                     else "left")
    names = sorted(set(BUILTIN) | set(overrides or {}))
    for name in names:
        base = BUILTIN.get(name)
        c = lookup(name, base.provider if base else "openai", overrides)
        p = c.prices
        prices = [f"{v:g}" for v in (p.input, p.output, p.cache_write, p.cache_read)] if p else ["unknown"] * 4
        t.add_row(name, c.provider, ", ".join(sorted(c.sampling)) or "none", _thinking(c), f"{c.context_tokens:,}",
                  f"{c.max_output_tokens:,}", *prices, _retires(c, today))
    return t
