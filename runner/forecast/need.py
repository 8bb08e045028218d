"""Calls and tokens, as a forecast counts them: floats (a mean per record times records), summable."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from runner.models.usage import Tokens, budget_input_tokens


@dataclass(frozen=True)
class Need:
    """Model calls and their tokens, split as the providers bill them: `input_tokens` excludes what a prompt
    cache read or wrote; `output_tokens` includes thinking."""

    calls: float = 0.0
    input_tokens: float = 0.0
    cache_read_tokens: float = 0.0
    cache_write_tokens: float = 0.0
    output_tokens: float = 0.0

    def __add__(self, other: Need) -> Need:
        return Need(
            self.calls + other.calls,
            self.input_tokens + other.input_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.output_tokens + other.output_tokens,
        )

    def scaled(self, k: float) -> Need:
        return Need(
            self.calls * k,
            self.input_tokens * k,
            self.cache_read_tokens * k,
            self.cache_write_tokens * k,
            self.output_tokens * k,
        )

    @property
    def prompt_tokens(self) -> float:
        """Every input token, cached or not."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    def uncached(self) -> Need:
        """The same calls with no prompt cache: every input token at the input price."""
        return Need(self.calls, self.prompt_tokens, 0.0, 0.0, self.output_tokens)

    def tokens(self) -> Tokens:
        return Tokens(
            round(self.input_tokens),
            round(self.output_tokens),
            round(self.cache_write_tokens),
            round(self.cache_read_tokens),
        )

    def limited_input(self, provider: str) -> float:
        """What these calls draw from an input-token-per-minute limit (Anthropic: not cache reads)."""
        return float(budget_input_tokens(provider, self.tokens()))

    def as_dict(self) -> dict[str, Any]:
        return {f.name: round(getattr(self, f.name), 1) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Need:
        return cls(**{f.name: float(d.get(f.name, 0.0)) for f in fields(cls)})
