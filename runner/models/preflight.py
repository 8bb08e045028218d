"""Before anything starts: which models are retired or retiring, and what each run will send.

A retired model stops the run here, with its successor named, unless `allow_retired`; one that
retires within 90 days is a warning. What each run's requests carry (sampling parameters sent,
parameters left out because the model refuses them, prompt caching) goes into the manifest and
the report, so a result says what the model was really asked.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

from runner.clouds import check_credentials, check_extras, target
from runner.config import API_KEY_ENV, API_OF, CLOUDS, Config, ModelRef, api_key, environment, resolve_mode
from runner.errors import ConfigError
from runner.models import live
from runner.models.capabilities import retirement_notice, split_sampling
from runner.models.capabilities import today as clock_today
from runner.models.live import Catalogue
from runner.models.thinking import plan as plan_thinking
from runner.models.thinking import thinking_choice


def _refs(cfg: Config) -> list[tuple[str, str, ModelRef, float | None, int]]:
    """(run, role, model, temperature asked, answer's output limit) for every model a run calls."""
    out: list[tuple[str, str, ModelRef, float | None, int]] = []
    for r in cfg.model_runs():
        out.append((r.name, "agent", r.model_ref(), r.temperature, r.max_output_tokens))
        if r.teacher is not None:
            out.append((r.name, "teacher", r.teacher, 0.0, r.max_output_tokens))
    return out


def check_keys(cfg: Config) -> None:
    """On the real APIs, every key the runs need is set: one error naming them all, before anything starts
    (a worker finding it missing at boot would stop the run only after the sandboxes started). A cloud's
    settings (region, project, API version) are checked on the simulator too: its requests carry them."""
    mode = resolve_mode(cfg)
    for run, role, ref, _, _ in _refs(cfg):
        if ref.provider in CLOUDS:
            who = f"run {run} ({role} {ref.model})"
            t = target(cfg, ref, mode=mode, who=who)
            adc = mode == "real" and not environment().cloud.get("GOOGLE_OAUTH_ACCESS_TOKEN")
            check_extras(ref.provider, who, needs_google_auth=adc)
            if mode == "real":
                check_credentials(ref.provider, t, who)
    if mode != "real":
        return
    missing: dict[str, list[str]] = {}
    for run, role, ref, _, _ in _refs(cfg):
        if ref.provider not in CLOUDS and not api_key(ref.provider):
            missing.setdefault(API_KEY_ENV[ref.provider], []).append(f"{run} ({role} {ref.model})")
    if missing:
        raise ConfigError(
            "; ".join(f"{env} is not set, needed by {', '.join(users)}" for env, users in missing.items())
            + " (or run on the simulator: --providers sim)"
        )


def catalogue(cfg: Config, *, ask: bool = True) -> Catalogue:
    """What every model of the job takes: the providers asked (the real APIs' models endpoints, or on the
    simulator what it serves), their word over the table's; a model the provider does not have stops the run
    here. `ask=False` (a plan, no call made): the table alone."""
    models = {(ref.provider, ref.model) for _, _, ref, _, _ in _refs(cfg)}
    # a cloud's models are not asked: the table's entry of the first-party model each names stands
    asked = {m for m in models if m[0] not in CLOUDS}
    mode = resolve_mode(cfg)
    answers: dict[tuple[str, str], live.Answer] = {}
    if ask and asked and mode == "real":
        answers = live.ask(
            asked,
            base_urls={"anthropic": cfg.anthropic.base_url, "openai": cfg.openai.base_url},
            keys={p: k for p in ("anthropic", "openai") if (k := api_key(p))},
        )
    elif ask and asked:
        answers = live.published(asked)
    missing = sorted(f"{a.provider} has no model {a.model}" for a in answers.values() if a.missing)
    if missing:
        where = "its models endpoint" if mode == "real" else "the simulator's models endpoint"
        raise ConfigError("; ".join(missing) + f" ({where} answered 404): check the model ids in the config")
    cat = live.resolve(models, answers, cfg.model_overrides())
    unasked = sorted({f"{a.provider} ({a.error})" for a in answers.values() if a.error})
    notes = [
        f"could not ask the models endpoint of {p}: capabilities from the built-in table" for p in unasked
    ]
    if not ask and models:
        notes.append("capabilities from the built-in table (no provider asked)")
    clouds = sorted({f"{p} {m}" for p, m in models - asked})
    if clouds:
        notes.append(
            f"{', '.join(clouds)}: capabilities of the first-party model each names (the built-in "
            "table; a cloud's models are not asked)"
        )
    return replace(cat, notes=(*cat.notes, *notes))


def requests_sent(cfg: Config, cat: Catalogue | None = None) -> dict[str, list[dict[str, Any]]]:
    """run -> [{role, provider, model, params, dropped, thinking, max_tokens, prompt_cache, prices_known}];
    a thinking setting the model cannot take is a ConfigError here, before anything starts."""
    cat = cat or Catalogue()
    out: dict[str, list[dict[str, Any]]] = {}
    for run, role, ref, temperature, answer in _refs(cfg):
        caps = cat.of(ref.provider, ref.model, cfg.model_overrides())
        sent, dropped = split_sampling(caps, {"temperature": temperature})
        where = f"runs.{run}{'.teacher' if role == 'teacher' else ''}"
        try:
            thinking = plan_thinking(caps, ref.model, thinking_choice(ref), answer)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
        if role == "teacher" and API_OF[ref.provider] == "anthropic" and thinking.thinks:
            # The teacher reviews the student's tool calls mid-loop: a thinking Claude model must then start
            # that turn with its own thinking blocks (the API answers 400), which another model's turn lacks.
            raise ConfigError(
                f"{where}: {ref.model} would think ({thinking.note.split(';')[0]}), but a teacher "
                "reviews another model's tool calls in the middle of a tool-use loop, where the API "
                "requires the reviewer's own thinking blocks: set thinking: off for the teacher"
            )
        out.setdefault(run, []).append(
            {
                "role": role,
                "provider": ref.provider,
                "model": ref.model,
                "params": {**sent, **thinking.params},
                "dropped": dropped,
                "thinking": thinking.note,
                "thinks": thinking.thinks,
                "max_tokens": thinking.max_tokens,
                "prompt_cache": cfg.prompt_cache if API_OF[ref.provider] == "anthropic" else "automatic",
                "prices_known": caps.prices is not None,
                "capabilities": caps.source,
                **({"prices": caps.price_source} if caps.price_source else {}),
            }
        )
    return out


def describe_requests(sent: dict[str, list[dict[str, Any]]]) -> list[str]:
    """One start line per run: what each of its models is sent, and what was left out."""
    lines = []
    for run, infos in sent.items():
        parts = []
        for m in infos:
            dropped = (
                f"; not sent: {', '.join(m['dropped'])} (not taken by the model)" if m["dropped"] else ""
            )
            parts.append(f"{m['role']} {m['model']}: {m['thinking']}{dropped}")
        lines.append(f"{run}: " + " | ".join(parts))
    return lines


def check_retirements(cfg: Config, today: dt.date | None = None, cat: Catalogue | None = None) -> list[str]:
    """Warnings for models retiring soon; ConfigError for a retired one (unless allow_retired)."""
    today = today or clock_today()
    cat = cat or Catalogue()
    warnings: list[str] = []
    retired: list[str] = []
    seen: set[str] = set()
    for _, _, ref, _, _ in _refs(cfg):
        if ref.model in seen:
            continue
        seen.add(ref.model)
        notice = retirement_notice(ref.model, cat.of(ref.provider, ref.model, cfg.model_overrides()), today)
        if notice is None:
            continue
        text, is_retired = notice
        (retired if is_retired and not cfg.allow_retired else warnings).append(text)
    if retired:
        raise ConfigError(
            "; ".join(retired) + ". Change the model in the config, or pass --allow-retired to try "
            "anyway (the provider will most likely answer 404)"
        )
    return warnings


def unpriced(cfg: Config, cat: Catalogue | None = None) -> list[str]:
    return sorted(
        {m["model"] for infos in requests_sent(cfg, cat).values() for m in infos if not m["prices_known"]}
    )
