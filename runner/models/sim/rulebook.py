"""What the real APIs refuse and what their models endpoints say, as the providers published it.

The rules live in `published/anthropic.yaml` and `published/openai.yaml`, written from the providers'
own documentation (each rule with its page, the date it was read and a quote) by a checker that had
not seen this project's code: the simulator must not share the client's beliefs, so it never reads
the runner's capabilities table (runner/models/capabilities.py) to decide what to refuse.

A rule is either a set of conditions on the request body (`when:`, all must hold: `in`, `not_in`,
`present`, `absent`, `gt`, `lt` on a dotted path) or a named structural check (`check:`) implemented
in runner/models/sim/checks.py. Every named check the files use is implemented there or listed in
NOT_ENFORCED with the reason (tests/models/sim/test_rulebook.py holds the two to each other).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner import yamlfile

HERE = Path(__file__).with_name("published")
_SNAPSHOT_ANTHROPIC = re.compile(r"-\d{8}")  # claude-sonnet-4-5-20250929
_SNAPSHOT_OPENAI = re.compile(r"-\d{4}-\d{2}-\d{2}$")  # gpt-4.1-2025-04-14
PROVIDERS = ("anthropic", "openai")
_MISSING = object()


@dataclass(frozen=True)
class Rule:
    id: str
    provider: str
    models: tuple[str, ...]
    endpoint: str
    status: int | None
    error_type: str | None
    message: str
    source: str
    when: tuple[dict[str, Any], ...] = ()
    check: str | None = None

    def covers(self, model: str) -> bool:
        return "*" in self.models or model in self.models

    def holds(self, body: Mapping[str, Any]) -> bool:
        """Every condition of `when:` is true of the body (a named check is judged elsewhere)."""
        return bool(self.when) and all(_condition(body, c) for c in self.when)

    def wording(self, body: Mapping[str, Any], model: str) -> str:
        """The message with the placeholders the providers' own wording carries filled in."""
        value = next((_at(body, c["path"]) for c in self.when if ("gt" in c or "lt" in c)), None)
        return self.message.replace("{model}", model).replace("{value}", str(value))


@dataclass(frozen=True)
class Book:
    provider: str
    read_on: str
    sources: dict[str, dict[str, Any]]
    models: dict[str, dict[str, Any]]
    rules: tuple[Rule, ...]
    batch: dict[str, Any] = field(default_factory=dict)
    caching: dict[str, Any] = field(default_factory=dict)

    def model_info(self, model: str) -> dict[str, Any] | None:
        """The body GET /v1/models/{model} answers with (None: the provider does not list it)."""
        entry = self.models.get(self.resolve(model) or "")
        return dict(entry["model_info"]) if entry else None

    def behaviour(self, model: str) -> dict[str, Any]:
        entry = self.models.get(self.resolve(model) or "")
        return dict(entry.get("behaviour") or {}) if entry else {}

    def resolve(self, model: str) -> str | None:
        """The published id a request's model names: itself; for Anthropic a dateless alias of one dated id
        ("the Models API response can ... resolve a model alias to a model ID"); for OpenAI a dated snapshot
        of a published model (`gpt-4.1-2025-04-14` of `gpt-4.1`)."""
        if model in self.models:
            return model
        if self.provider == "anthropic":
            dated = [
                m
                for m in self.models
                if _SNAPSHOT_ANTHROPIC.fullmatch(m[len(model) :]) and m.startswith(model)
            ]
            return dated[0] if len(dated) == 1 else None
        base = _SNAPSHOT_OPENAI.sub("", model)
        return base if base != model and base in self.models else None

    def rules_for(self, endpoint: str, model: str) -> list[Rule]:
        named = self.resolve(model) or model
        return [r for r in self.rules if r.endpoint == endpoint and r.covers(named)]


def _at(body: Mapping[str, Any], path: str) -> Any:
    value: Any = body
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _condition(body: Mapping[str, Any], c: Mapping[str, Any]) -> bool:
    value = _at(body, c["path"])
    if "present" in c:
        return (value is not _MISSING and value is not None) == bool(c["present"])
    if "absent" in c:
        return (value is _MISSING or value is None) == bool(c["absent"])
    if value is _MISSING or value is None:
        return False  # in / not_in / gt / lt say nothing of a field the request does not carry
    if "in" in c:
        return value in c["in"]
    if "not_in" in c:
        return value not in c["not_in"]
    if "gt" in c:
        return isinstance(value, int | float) and value > c["gt"]
    if "lt" in c:
        return isinstance(value, int | float) and value < c["lt"]
    raise ValueError(f"rule condition {dict(c)} has no operator this reader knows")


@functools.cache
def book(provider: str) -> Book:
    data = yamlfile.read(HERE / f"{provider}.yaml")
    rules = tuple(
        Rule(
            id=r["id"],
            provider=provider,
            models=tuple(r.get("models") or ("*",)),
            endpoint=r.get("endpoint", ""),
            status=r.get("status"),
            error_type=r.get("error_type"),
            message=str(r.get("message") or ""),
            source=", ".join(r["source"]) if isinstance(r.get("source"), list) else str(r.get("source")),
            when=tuple(r.get("when") or ()),
            check=r.get("check"),
        )
        for r in data.get("rules") or ()
    )
    return Book(
        provider,
        str(data.get("read_on")),
        dict(data.get("sources") or {}),
        dict(data.get("models") or {}),
        rules,
        dict(data.get("batch") or {}),
        dict(data.get("caching") or {}),
    )


def known(model: str) -> str | None:
    """The provider whose published pages describe `model` (None: neither)."""
    return next((p for p in PROVIDERS if book(p).resolve(model) is not None), None)
