"""What each model accepts and costs: one table, overridable from the config.

Per model: the sampling parameters it takes under the API version the installed SDK speaks, its
context and output limits, its prices (input, output, cache write, cache read; USD per 1M tokens),
the smallest prompt prefix its provider caches, and its retirement date with a current successor.

Two facts come from the installed SDKs rather than from this file, so an SDK upgrade moves them:
- which request keys exist at all (`sdk_request_keys`): the anthropic SDK of API version
  2026-10-21 has no `temperature`, `top_p` or `top_k`, so no Claude model is sent one;
- retirement dates (`sdk_retirements`): anthropic's `DEPRECATED_MODELS`, and the "Announced
  shutdown date" notes of openai's `ChatModel` type. They win over the dates written here, which stay for
  the models the seeds name: an SDK drops a model from its deprecation data once it has retired (anthropic
  2.15.0 no longer lists claude-sonnet-4-5-20250929, retired 2026-11-30), and a runner that forgot the date
  would send every request of a run to a model that refuses them all.

Prices were read from the providers' published pages (docs/configuration.md#models says when);
`models:` in the config overrides any field, and a model missing from both has unknown prices
(reported as unknown, never as $0).
"""

from __future__ import annotations

import ast
import datetime as dt
import functools
import importlib.util
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from runner.config import API_OF
from runner.errors import ConfigError

SAMPLING = frozenset({"temperature", "top_p", "top_k"})


@dataclass(frozen=True)
class Prices:
    """USD per 1M tokens. cache_write: Anthropic's 5-minute write; OpenAI writes at the input price.
    cache_write_1h: Anthropic's one-hour write (2 x input, the pricing page of 2026-11-26); None: as the
    5-minute write."""

    input: float
    output: float
    cache_write: float
    cache_read: float
    cache_write_1h: float | None = None

    @property
    def hour_write(self) -> float:
        return self.cache_write if self.cache_write_1h is None else self.cache_write_1h


@dataclass(frozen=True)
class Capabilities:
    provider: str
    sampling: frozenset[str] = frozenset()
    context_tokens: int = 200_000
    max_output_tokens: int = 64_000
    prices: Prices | None = None
    min_cache_tokens: int = 1024
    retires: dt.date | None = None
    successor: str | None = None
    known: bool = True
    notes: tuple[str, ...] = field(default_factory=tuple)
    # Thinking (Anthropic) / reasoning (OpenAI). `thinking`: the forms the model takes: "none" (it does not
    # think), "budget" (thinking: enabled + budget_tokens), "adaptive" (thinking: adaptive + effort; budget
    # refused with a 400), "between_tools" (thinking off, updates between tool calls as thinking
    # blocks). Thinking tokens are output tokens and count toward max_tokens /
    # max_completion_tokens, so a small limit cut a thinking model's answer before it began.
    thinking: frozenset[str] = frozenset()
    thinks_by_default: bool = False  # a request that says nothing about thinking thinks
    # thinking: disabled (Anthropic) / reasoning_effort: none (OpenAI) taken
    can_disable_thinking: bool = True
    # output_config.effort (Anthropic) or reasoning_effort (OpenAI) values taken
    efforts: tuple[str, ...] = ()
    default_effort: str | None = None
    # Anthropic's `thinking: between_tools` (no thinking before answering; short updates between tool calls
    # come back as thinking blocks): the efforts it is taken at (Sonnet 5.5: low, medium, high; a 400 at
    # xhigh and max, which need adaptive thinking)
    between_tools_efforts: tuple[str, ...] = ()
    batch: bool = True  # the provider's batch API takes this model
    source: str = "table"  # where these came from: table, or "provider" once its models endpoint answered
    price_source: str | None = None  # where the prices come from, when not the provider's own price list


def _claude(inp: float, out: float, read_ratio: float = 0.1, **kw: Any) -> Capabilities:
    return Capabilities("anthropic", prices=Prices(inp, out, inp * 1.25, inp * read_ratio, inp * 2.0), **kw)


def _gpt(inp: float, cached: float, out: float, **kw: Any) -> Capabilities:
    return Capabilities("openai", prices=Prices(inp, out, inp, cached), **kw)


# Reasoning models: only default sampling; reasoning tokens count toward max_completion_tokens. "Using
# GPT-5.4" (developers.openai.com, read 2026-11-26): efforts none, low, medium, high, xhigh, and none is
# GPT-5.4's default; GPT-5.5 reasons at medium by default. For gpt-5.4-mini and -nano no OpenAI page read says
# which efforts they take or their default: taken as GPT-5.5's until the first call says otherwise (a refused
# setting stops the run at its first call, runner/models/first_call.py).
_GPT5: dict[str, Any] = {
    "context_tokens": 1_000_000,
    "max_output_tokens": 128_000,
    "thinking": frozenset({"effort"}),
    "thinks_by_default": True,
    "efforts": ("none", "low", "medium", "high", "xhigh"),
    "default_effort": "medium",
}
_GPT54: dict[str, Any] = {**_GPT5, "thinks_by_default": False, "default_effort": "none"}
_GPT41: dict[str, Any] = {
    "sampling": frozenset({"temperature", "top_p"}),
    "context_tokens": 1_047_576,
    "max_output_tokens": 32_768,
}
# The Claude 5 generation thinks when a request says nothing (adaptive, effort high); budget_tokens is gone
# (a 400 names adaptive instead); thinking: disabled is taken by Sonnet 5.
_SONNET5: dict[str, Any] = {
    "context_tokens": 1_000_000,
    "max_output_tokens": 128_000,
    "thinking": frozenset({"adaptive"}),
    "thinks_by_default": True,
    "efforts": ("low", "medium", "high", "xhigh", "max"),
    "default_effort": "high",
}
# Claude Sonnet 5.5 ("What's new in Claude Sonnet 5.5", platform.claude.com, read 2026-11-26): `disabled` is a
# 400 pointing at `between_tools`, its lowest setting, taken at effort low, medium and high only; forced
# tool_choice is a 400; prompts cache from 512 tokens.
_SONNET55: dict[str, Any] = {
    **_SONNET5,
    "thinking": frozenset({"adaptive", "between_tools"}),
    "can_disable_thinking": False,
    "between_tools_efforts": ("low", "medium", "high"),
    "min_cache_tokens": 512,
}
# Claude Opus 5.5 ("What's new in Claude Opus 5.5", read 2026-11-26): thinking always on (disabled and enabled
# are 400s), default effort medium.
_OPUS55: dict[str, Any] = {
    **_SONNET5,
    "can_disable_thinking": False,
    "default_effort": "medium",
    "min_cache_tokens": 512,
}
# Claude 4.5: manual thinking only (enabled + budget_tokens), off unless asked; 4.6 takes adaptive too.
_CLAUDE45: dict[str, Any] = {"sampling": SAMPLING, "thinking": frozenset({"budget"})}
_CLAUDE46: dict[str, Any] = {
    "sampling": SAMPLING,
    "thinking": frozenset({"budget", "adaptive"}),
    "efforts": ("low", "medium", "high", "max"),
    "default_effort": "high",
    "context_tokens": 1_000_000,
    "max_output_tokens": 128_000,
}

# Where the prices in BUILTIN were read, and when: a price is a fact with a date. Override any of them
# under `models:` if your invoice says otherwise.
PRICE_SOURCES = {
    "anthropic": ("2026-11-26", "https://platform.claude.com/docs/en/about-claude/pricing"),
    "openai": ("2026-11-26", "https://developers.openai.com/api/docs/pricing"),
}
# The clouds' own prices were not published where they were read (runner/models/sim/published/clouds.yaml:
# Bedrock's page renders them client-side, Vertex's and Azure's pages were not read): a cloud's model is
# priced as the first-party model it names, said so, until `models:` in the config gives the cloud's prices.
CLOUD_PRICES = {
    "bedrock": "Anthropic's first-party prices (Amazon Bedrock's own not published where read; cross-region "
    "profiles cost the source region's price): set the cloud's under models:",
    "vertex": "Anthropic's first-party prices (Vertex AI's own not published where read; regional endpoints "
    "may cost more than global ones): set the cloud's under models:",
    "azure": "OpenAI's first-party prices (Azure OpenAI's own not read): set the cloud's under models:",
}

_SONNET45_RETIRED = dt.date(2026, 11, 30)
_GPT41_SHUTDOWN = dt.date(2027, 1, 14)

BUILTIN: dict[str, Capabilities] = {
    # Anthropic. Sonnet 4.x still took temperature on older API versions; Sonnet 5+ answer 400 to any
    # non-default sampling value. Under the SDK's 2026-10-21 version none is sent (see module doc).
    # Retired 2026-11-30: Anthropic's model deprecations page and the Sonnet 4.5 model page ("retires on
    # November 30, 2026", sources of runner/models/sim/published/anthropic.yaml), and anthropic 2.14.0's
    # DEPRECATED_MODELS ("November 30th, 2026"; read 2026-12-02; gone from 2.15.0).
    "claude-sonnet-4-5-20250929": _claude(
        3.0, 15.0, retires=_SONNET45_RETIRED, successor="claude-sonnet-5-5", **_CLAUDE45
    ),
    "claude-sonnet-4-5": _claude(
        3.0, 15.0, retires=_SONNET45_RETIRED, successor="claude-sonnet-5-5", **_CLAUDE45
    ),
    "claude-sonnet-4-6": _claude(3.0, 15.0, successor="claude-sonnet-5-5", **_CLAUDE46),
    "claude-sonnet-5": _claude(2.0, 10.0, successor="claude-sonnet-5-5", **_SONNET5),
    # Sonnet 5.5 cache reads at $0.10 (0.05 x input) since 2026-10-07 (its pricing row and model page, read
    # 2026-11-26; earlier crawls said $0.20)
    "claude-sonnet-5-5": _claude(2.0, 10.0, read_ratio=0.05, **_SONNET55),
    "claude-haiku-4-5": _claude(1.0, 5.0, min_cache_tokens=2048, max_output_tokens=64_000, **_CLAUDE45),
    "claude-haiku-4-5-20251001": _claude(1.0, 5.0, min_cache_tokens=2048, **_CLAUDE45),
    "claude-opus-5-5": _claude(4.0, 20.0, read_ratio=0.05, **_OPUS55),
    # OpenAI: cached input is priced apart (GPT-4.1: 75 % off; GPT-5.x: 90 % off).
    # Shut down 2027-01-14: the "Announced shutdown date" note of openai 3.57.0's ChatModel (read 2026-12-02).
    "gpt-4.1": _gpt(2.0, 0.5, 8.0, retires=_GPT41_SHUTDOWN, successor="gpt-5.4", **_GPT41),
    "gpt-4.1-2025-04-14": _gpt(2.0, 0.5, 8.0, retires=_GPT41_SHUTDOWN, successor="gpt-5.4", **_GPT41),
    "gpt-4.1-mini": _gpt(0.4, 0.1, 1.6, retires=_GPT41_SHUTDOWN, successor="gpt-5.4-mini", **_GPT41),
    "gpt-4.1-mini-2025-04-14": _gpt(
        0.4, 0.1, 1.6, retires=_GPT41_SHUTDOWN, successor="gpt-5.4-mini", **_GPT41
    ),
    "gpt-5.5": _gpt(5.0, 0.5, 30.0, **_GPT5),
    "gpt-5.4": _gpt(2.5, 0.25, 15.0, **_GPT54),
    "gpt-5.4-mini": _gpt(0.75, 0.075, 4.5, **_GPT5),
    "gpt-5.4-nano": _gpt(0.2, 0.02, 1.25, **_GPT5),
}


# Where each SDK's create() request type lives: (package, file under it, TypedDict class).
_REQUEST_TYPES = {
    "anthropic": ("anthropic", ("types", "message_create_params.py"), "MessageCreateParamsBase"),
    "openai": ("openai", ("types", "chat", "completion_create_params.py"), "CompletionCreateParamsBase"),
}


@functools.cache
def sdk_request_keys(provider: str) -> frozenset[str]:
    """Every top-level request key the installed SDK's create() types define, read from the type's source
    (importing anthropic costs ~0.7 s: every run's start and every resume paid it for a set of names)."""
    package, parts, name = _REQUEST_TYPES.get(provider, _REQUEST_TYPES["openai"])
    source = _sdk_source(package, *parts)
    keys = _typed_dict_keys(source, name) if source is not None else None
    if keys is None:  # a layout this parser does not know: ask the type itself
        keys = sdk_request_keys_imported(provider)
    return keys | {"stream"}


def _typed_dict_keys(source: str, name: str) -> frozenset[str] | None:
    """The annotated fields of class `name` in a module's source, or None if it is not a plain TypedDict."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == name:
            if [b.id for b in node.bases if isinstance(b, ast.Name)] != ["TypedDict"]:
                return None  # inherits fields from elsewhere: not for this reader
            return frozenset(
                s.target.id
                for s in node.body
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
            )
    return None


def sdk_request_keys_imported(provider: str) -> frozenset[str]:
    """The same keys from the imported type (the reference the source reader is tested against)."""
    from typing_extensions import get_type_hints

    if provider == "anthropic":
        from anthropic.types.message_create_params import MessageCreateParamsBase as T
    else:
        from openai.types.chat.completion_create_params import (  # type: ignore[assignment]
            CompletionCreateParamsBase as T,
        )
    return frozenset(get_type_hints(T))


_MONTH_DAY = re.compile(r"([A-Z][a-z]+) (\d+)(?:st|nd|rd|th)?, (\d{4})")
_OPENAI_NOTE = re.compile(
    r"((?:\s*\"[^\"]+\",?)+):?\s*Announced\s+shutdown\s+date:\s*(\d{4}-\d{2}-\d{2})", re.S
)


def _sdk_source(package: str, *parts: str) -> str | None:
    """A file of an installed SDK, read without importing it (importing anthropic takes seconds: the
    supervisor only needs these tables; its workers import the SDKs anyway)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations)), *parts)
    return path.read_text(encoding="utf-8") if path.is_file() else None


def _anthropic_retirements() -> dict[str, dt.date]:
    source = _sdk_source("anthropic", "_data", "deprecated_models.py")
    if source is None:
        return {}
    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.AnnAssign | ast.Assign) and isinstance(node.value, ast.Dict):
            found = ast.literal_eval(node.value)
    out = {}
    for model, text in found.items():
        m = _MONTH_DAY.search(text)
        if m:
            out[model] = dt.datetime.strptime(f"{m[1]} {m[2]} {m[3]}", "%B %d %Y").date()
    return out


def _openai_retirements() -> dict[str, dt.date]:
    # The dates live in the documentation string after the ChatModel literal: read the source.
    source = _sdk_source("openai", "types", "shared", "chat_model.py")
    if source is None:
        return {}
    text = source.replace("\n  ", " ").replace("\n", " ")
    out = {}
    for names, date in _OPENAI_NOTE.findall(text):
        for name in re.findall(r"\"([^\"]+)\"", names):
            out[name] = dt.date.fromisoformat(date)
    return out


@functools.cache
def sdk_retirements() -> dict[str, dt.date]:
    return {**_openai_retirements(), **_anthropic_retirements()}


def table(model: str, provider: str) -> Capabilities:
    """The built-in table's entry, with the installed SDK's retirement date where it has one. A cloud's model
    id is looked up as the first-party model it names (runner/models/cloud_models.py), at the first-party
    prices, said so in `price_source` (no cloud's own prices were published where they were read), and
    without the SDK's retirement date: that is the first-party API's schedule, a cloud keeps its own (a
    config's `models:` entry may give it)."""
    from runner.models.cloud_models import first_party

    if provider in CLOUD_PRICES:
        caps = BUILTIN.get(first_party(provider, model) or "") or Capabilities(API_OF[provider], known=False)
        return replace(caps, retires=None, price_source=CLOUD_PRICES[provider] if caps.prices else None)
    caps = BUILTIN.get(model) or Capabilities(provider, known=False)
    retires = sdk_retirements().get(model)
    return replace(caps, retires=retires) if retires is not None else caps


def overridden(caps: Capabilities, over: dict[str, Any] | None) -> Capabilities:
    """`caps` with a config's `models:` entry applied on top (the user's word wins over every source)."""
    if over:
        fields: dict[str, Any] = {k: v for k, v in over.items() if v is not None and k != "prices"}
        if "sampling" in fields:
            fields["sampling"] = frozenset(fields["sampling"])
        if over.get("prices"):
            fields["prices"] = Prices(**over["prices"])
        caps = replace(caps, **fields)
    # Whatever the model would take, the SDK's request types decide what can be sent at all.
    return replace(caps, sampling=caps.sampling & sdk_request_keys(caps.provider))


def lookup(model: str, provider: str, overrides: dict[str, dict[str, Any]] | None = None) -> Capabilities:
    """The model's capabilities from the built-in table, SDK retirement data and the config's overrides (what
    the provider's models endpoint says comes on top at a run's start: runner/models/live.py)."""
    return overridden(table(model, provider), (overrides or {}).get(model))


def split_sampling(
    caps: Capabilities, requested: dict[str, float | None]
) -> tuple[dict[str, float], list[str]]:
    """(parameters to send, names not sent because the model does not accept them)."""
    sent = {k: v for k, v in requested.items() if v is not None and k in caps.sampling}
    dropped = sorted(k for k, v in requested.items() if v is not None and k not in caps.sampling)
    return sent, dropped


def today() -> dt.date:
    """The day retirements are judged on: the machine's, or RUNNER_TODAY (YYYY-MM-DD) to see a config as it
    will stand on another day; the test suite sets it, so that no test's verdict moves with the calendar."""
    told = os.environ.get("RUNNER_TODAY")
    if not told:
        return dt.date.today()
    try:
        return dt.date.fromisoformat(told)
    except ValueError:
        raise ConfigError(f"RUNNER_TODAY={told!r} is not a date (YYYY-MM-DD)") from None


def retirement_notice(
    model: str, caps: Capabilities, today: dt.date, *, warn_days: int = 90
) -> tuple[str, bool] | None:
    """(message, retired) for a model retired or retiring within warn_days; None otherwise."""
    if caps.retires is None or (caps.retires - today).days > warn_days:
        return None
    instead = f"; use {caps.successor} instead" if caps.successor else ""
    if caps.retires <= today:
        return f"{model} was retired on {caps.retires.isoformat()}{instead}", True
    days = (caps.retires - today).days
    return f"{model} retires on {caps.retires.isoformat()} (in {days} days){instead}", False
