"""What each model of a job takes, asked of its provider before the first record.

The built-in table (capabilities.py) is what the runner believed when it was written; the providers'
models endpoints say what each model takes today. Anthropic's (`client.models.retrieve(id)`, anthropic
SDK `ModelInfo`) names the thinking types a model accepts (`adaptive`, `between_tools`, `disabled`,
`enabled`: "False exactly when a request that sends it gets a 400"), its efforts, its output limit,
whether its batch API takes it and its lifecycle; OpenAI's (`openai.types.Model`) whether a model exists
and its shutdown date. So at a run's start each provider is asked about every model of the job, and the
answer wins over the table, with one warning line per model where they disagree. The table keeps prices
and what no endpoint tells (which efforts between_tools takes, whether a model thinks when not told), and
stands alone, said at start, when a provider cannot be asked. A config's `models:` entry wins over both.

On the simulator the simulator is the provider: its models endpoint answers from what the providers
published (runner/models/sim/published/), read here without the round trip.
"""

from __future__ import annotations

import concurrent.futures
import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from runner.models.capabilities import Capabilities, overridden, table, today

EFFORTS = ("low", "medium", "high", "xhigh", "max")  # Anthropic's EffortCapability keys, lowest first
ASK_TIMEOUT_SECONDS = 15.0
_COMPARED = (
    "thinking",
    "can_disable_thinking",
    "efforts",
    "max_output_tokens",
    "context_tokens",
    "batch",
    "retires",
)


@dataclass(frozen=True)
class Answer:
    """One provider's word on one model: the capability fields it settles, or why it could not be asked."""

    provider: str
    model: str
    told: dict[str, Any] = field(default_factory=dict)
    missing: bool = False  # the provider has no such model (its endpoint answered 404)
    error: str | None = None  # the endpoint could not be asked: the table stands


@dataclass(frozen=True)
class Catalogue:
    """Per (provider, model) of a job, what it takes and costs: resolved once at the start, handed to every
    layer that builds or prices a request."""

    caps: dict[tuple[str, str], Capabilities] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # start lines: where the capabilities came from, where sources disagree

    def of(
        self, provider: str, model: str, overrides: dict[str, dict[str, Any]] | None = None
    ) -> Capabilities:
        """The resolved capabilities (a model the catalogue did not resolve: the table's, with overrides)."""
        caps = self.caps.get((provider, model))
        return caps if caps is not None else overridden(table(model, provider), (overrides or {}).get(model))


def from_anthropic(info: dict[str, Any]) -> dict[str, Any]:
    """The capability fields an Anthropic ModelInfo body settles."""
    told: dict[str, Any] = {}
    caps = info.get("capabilities") or {}
    thinking = caps.get("thinking") or {}
    if thinking:
        types = thinking.get("types") or {}
        forms = {
            name
            for key, name in (
                ("enabled", "budget"),
                ("adaptive", "adaptive"),
                ("between_tools", "between_tools"),
            )
            if (types.get(key) or {}).get("supported") and thinking.get("supported")
        }
        told["thinking"] = frozenset(forms)
        if "disabled" in types:
            told["can_disable_thinking"] = bool(types["disabled"].get("supported"))
    effort = caps.get("effort") or {}
    if effort:
        taken = effort.get("supported")
        told["efforts"] = tuple(e for e in EFFORTS if taken and (effort.get(e) or {}).get("supported"))
    if "batch" in caps:
        told["batch"] = bool((caps["batch"] or {}).get("supported"))
    if info.get("max_tokens"):
        told["max_output_tokens"] = int(info["max_tokens"])
    if info.get("max_input_tokens"):
        told["context_tokens"] = int(info["max_input_tokens"])
    told.update(_lifecycle(info))
    return told


def _lifecycle(info: dict[str, Any]) -> dict[str, Any]:
    """When the model retires: its scheduled date, or (retired already) the date it was deprecated."""

    def day(value: Any) -> dt.date | None:
        if not value:
            return None
        text = str(value)
        return dt.date.fromisoformat(text[:10])

    if info.get("lifecycle") == "retired":
        return {"retires": day(info.get("retires_at")) or day(info.get("deprecated_at")) or today()}
    if "retires_at" in info:
        return {"retires": day(info.get("retires_at"))}
    return {}


def from_openai(info: dict[str, Any]) -> dict[str, Any]:
    """The capability fields an OpenAI Model body settles: only its shutdown date."""
    if "shutdown_date" in info:
        when = info.get("shutdown_date")
        return {"retires": dt.date.fromisoformat(str(when)[:10]) if when else None}
    return {}


def differences(table_caps: Capabilities, told: dict[str, Any]) -> list[str]:
    """Where the provider's word and the table disagree, in words."""
    out = []
    for name in _COMPARED:
        if name not in told or not table_caps.known:
            continue
        was, now = getattr(table_caps, name), told[name]
        if was != now:
            out.append(f"{name} {_show(now)} (the table: {_show(was)})")
    return out


def _show(value: Any) -> str:
    if isinstance(value, frozenset | tuple | list):
        return "/".join(sorted(str(v) for v in value)) or "none"
    return str(value)


def resolve(
    models: Iterable[tuple[str, str]],
    answers: dict[tuple[str, str], Answer],
    overrides: dict[str, dict[str, Any]] | None = None,
) -> Catalogue:
    """The catalogue: each model's table entry, the provider's answer on top, the config's overrides last."""
    caps: dict[tuple[str, str], Capabilities] = {}
    notes: list[str] = []
    for provider, model in sorted(set(models)):
        base = table(model, provider)
        answer = answers.get((provider, model))
        if answer is not None and answer.told:
            disagree = differences(base, answer.told)
            if disagree:
                notes.append(
                    f"{model}: {provider}'s models endpoint says {'; '.join(disagree)}: using the provider's"
                )
            base = replace(base, **answer.told, source="provider")
        caps[(provider, model)] = overridden(base, (overrides or {}).get(model))
    return Catalogue(caps, tuple(notes))


def ask(
    models: Iterable[tuple[str, str]], *, base_urls: dict[str, str | None], keys: dict[str, str]
) -> dict[tuple[str, str], Answer]:
    """Each model's provider asked through its official SDK's models API, every model at once (a few round
    trips beside a run's start)."""
    wanted = sorted(set(models))
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(8, len(wanted)))) as pool:
        futures = {
            m: pool.submit(_ask_one, m[0], m[1], base_urls.get(m[0]), keys.get(m[0], "")) for m in wanted
        }
        return {m: f.result() for m, f in futures.items()}


def _ask_one(provider: str, model: str, base_url: str | None, key: str) -> Answer:
    try:
        if provider == "anthropic":
            import anthropic

            with anthropic.Anthropic(
                api_key=key, base_url=base_url, timeout=ASK_TIMEOUT_SECONDS, max_retries=2
            ) as client:
                info = client.models.retrieve(model).model_dump(mode="json")
            return Answer(provider, model, from_anthropic(info))
        import openai

        with openai.OpenAI(
            api_key=key, base_url=base_url, timeout=ASK_TIMEOUT_SECONDS, max_retries=2
        ) as oclient:
            body = oclient.models.retrieve(model).model_dump(mode="json")
        return Answer(provider, model, from_openai(body))
    except Exception as e:  # the SDKs' NotFoundError, connection and status errors
        if getattr(e, "status_code", None) == 404:
            return Answer(provider, model, missing=True)
        return Answer(provider, model, error=f"{type(e).__name__}: {e}"[:300])


def published(models: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Answer]:
    """What the simulator's models endpoint answers, read from the providers' published pages it serves."""
    from runner.models.sim import rulebook
    from runner.models.sim.policy import PROFILES

    out = {}
    for provider, model in set(models):
        if model in PROFILES:  # a simulator model asked for by its own name: no provider stands behind it
            continue
        info = rulebook.book(provider).model_info(model)
        if info is None:
            out[(provider, model)] = Answer(provider, model, missing=True)
        else:
            out[(provider, model)] = Answer(
                provider, model, from_anthropic(info) if provider == "anthropic" else from_openai(info)
            )
    return out
