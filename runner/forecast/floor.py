"""The time a job's rate limits alone force: per budget, what its calls ask of each limit over the limit.

A budget (a provider, or provider/model where the config limits one model) refills continuously at its
limit per minute, starting full (the runner's shared budget does, and the simulator's; a provider may
enforce a minute's limit over shorter intervals, which makes the first minute's burst smaller and the
floor up to a minute longer). So the calls of a budget need (asked - one minute's limit) / limit minutes
in the limit that binds, whichever of requests, input and output tokens; the job needs its slowest
budget's time. Anthropic does not count cache reads against input tokens per minute; OpenAI counts every
prompt token (runner/models/usage.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runner.config import Limits

DIMENSIONS = ("requests", "input tokens", "output tokens")


@dataclass(frozen=True)
class Floor:
    """One budget's floor: what its calls ask, its limits, the seconds they force and the limit that binds."""

    key: str
    asked: tuple[float, float, float]  # requests, input tokens (as limited), output tokens
    limits: Limits
    where: str  # where the limits come from: the config, a named tier, none
    seconds: float
    bound_by: str | None  # None: no limit at all

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "requests": round(self.asked[0]),
            "input_tokens": round(self.asked[1]),
            "output_tokens": round(self.asked[2]),
            "rpm": self.limits.rpm,
            "itpm": self.limits.itpm,
            "otpm": self.limits.otpm,
            "limits_from": self.where,
            "seconds": round(self.seconds, 1),
            "bound_by": self.bound_by,
        }


def floor(key: str, asked: tuple[float, float, float], limits: Limits, where: str) -> Floor:
    caps = (limits.rpm, limits.itpm, limits.otpm)
    per = {
        dim: max(0.0, amount - cap) / cap * 60.0
        for dim, amount, cap in zip(DIMENSIONS, asked, caps, strict=True)
        if cap
    }
    if not per:
        return Floor(key, asked, limits, where, 0.0, None)
    dim = max(per, key=lambda d: per[d])
    return Floor(key, asked, limits, where, per[dim], dim)
