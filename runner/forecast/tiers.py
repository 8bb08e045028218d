"""The providers' published rate-limit tiers, for a forecast under a tier other than the config's limits.

The tables are runner/budget/published.yaml, read from the providers' own pages (Anthropic:
https://platform.claude.com/docs/en/api/rate-limits, OpenAI:
https://platform.openai.com/docs/guides/rate-limits and each model's page), each figure with its source
and how sure it is, on the date the file gives (2026-11-26). A tier names limits per model (Anthropic
pools some models: "Sonnet 4.x" is 4.6 and 4.5); a model the table does not list under that tier has no
published figure, and the forecast says so. OpenAI publishes one tokens-per-minute limit, which counts
input tokens (the forecast holds input to it).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

from runner import yamlfile
from runner.config import Limits

PUBLISHED = Path(__file__).resolve().parents[1] / "budget" / "published.yaml"


@functools.cache
def _table() -> dict[str, Any]:
    data: dict[str, Any] = yamlfile.read(PUBLISHED)
    return data


def _tiers(provider: str) -> dict[str, Any]:
    section = _table().get(provider, {})
    tiers = dict(section.get("tiers", {}))
    legacy = section.get("tiers_legacy", {})
    tiers.update(
        {k: v for k, v in legacy.items() if isinstance(v, dict) and "models" in v and k not in tiers}
    )
    return tiers


def names(provider: str) -> list[str]:
    """The tiers the table has figures for (some have none published)."""
    return [k for k, v in _tiers(provider).items() if isinstance(v, dict) and v.get("models")]


def _covers(key: str, model: str) -> bool:
    """Whether a table row (`claude-sonnet-5-5`, or a pool such as `claude-sonnet-4.x-pool (claude-sonnet-4-6
    + claude-sonnet-4-5)`) limits `model` (a dated id such as claude-sonnet-4-5-20250929 included)."""
    listed = [key.split(" ", 1)[0], *re.findall(r"[a-z0-9][a-z0-9.-]+", key.partition("(")[2])]
    return any(model == m or model.startswith(m + "-") for m in listed if m and not m.endswith("pool"))


def limits(provider: str, tier: str, model: str) -> tuple[Limits, str] | None:
    """The model's limits under the named tier and where they were read; None where none are published."""
    t = _tiers(provider).get(tier)
    if not isinstance(t, dict):
        raise KeyError(f"{provider} has no tier {tier!r} (tiers with figures: {', '.join(names(provider))})")
    for key, row in (t.get("models") or {}).items():
        if (
            isinstance(row, dict)
            and _covers(key, model)
            and (row.get("rpm") or row.get("itpm") or row.get("tpm"))
        ):
            lim = Limits(
                rpm=row.get("rpm") or None,
                itpm=row.get("itpm") or row.get("tpm") or None,
                otpm=row.get("otpm") or None,
            )
            return (
                lim,
                f"{provider} {tier}: {key} ({row.get('src') or t.get('src') or 'published.yaml'}, "
                f"{row.get('quality', 'unrated')})",
            )
    return None
