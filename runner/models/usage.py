"""What model calls cost, one type per role, shared by the runner's own clients and its gateway.

- `Tokens`: one call's tokens, split the way the providers bill them (input excludes cached tokens);
  `cost` prices them and `budget_input_tokens` says what they draw from an input-token budget.
- `Counts`: many calls added up (a client's, or a run's and a worker's in the gateway); `usage()` and
  `split()` make them a record's `Usage` (runner/results/result.py), the form results keep.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from runner.config import API_OF
from runner.models.capabilities import Prices
from runner.results.result import Usage


@dataclass(frozen=True)
class Tokens:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_1h_tokens: int = 0  # of cache_write_tokens, written with the one-hour lifetime (billed apart)


def cost(prices: Prices | None, t: Tokens) -> tuple[float | None, float | None, float]:
    """(total USD, input-side USD, USD saved by cache reads) -- None where prices are unknown."""
    if prices is None:
        return None, None, 0.0
    hour = min(t.cache_write_1h_tokens, t.cache_write_tokens)
    inp = (
        t.input_tokens * prices.input
        + (t.cache_write_tokens - hour) * prices.cache_write
        + hour * prices.hour_write
        + t.cache_read_tokens * prices.cache_read
    ) / 1e6
    saved = t.cache_read_tokens * (prices.input - prices.cache_read) / 1e6
    return inp + t.output_tokens * prices.output / 1e6, inp, saved


def at_batch_price(p: Prices) -> Prices:
    """The batch APIs bill every token, cached or not, at half the price."""
    return Prices(
        p.input / 2,
        p.output / 2,
        p.cache_write / 2,
        p.cache_read / 2,
        p.cache_write_1h / 2 if p.cache_write_1h is not None else None,
    )


def budget_input_tokens(provider: str, t: Tokens) -> int:
    """Input tokens a call draws from the provider's input-token budget.

    Anthropic does not count cache reads against ITPM (most current models); OpenAI counts every
    prompt token, cached or not. A cloud counts as the API whose format it speaks (how Bedrock's and
    Vertex AI's quotas count cache reads is not published where read).
    """
    if API_OF.get(provider, provider) == "anthropic":
        return t.input_tokens + t.cache_write_tokens
    return t.input_tokens + t.cache_read_tokens


# The counts a record's Usage splits as whole numbers when calls are shared by several records.
_WHOLE = (
    "llm_calls",
    "cache_hits",
    "cache_misses",
    "retries",
    "rate_limited",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cache_write_1h_tokens",
    "batched_calls",
    "not_sent",
)


@dataclass
class Counts:
    """Calls added up, named as a result's `usage` fields, plus what a result does not keep (errors
    answered to a caller, calls at an unknown price: one of those makes the cost unknown)."""

    llm_calls: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    retries: int = 0
    rate_limited: int = 0
    errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_1h_tokens: int = 0
    cost_usd: float = 0.0  # of the calls with a known price
    input_cost_usd: float = 0.0
    cache_saved_usd: float = 0.0
    unpriced_calls: int = 0
    latency_seconds: float = 0.0
    batched_calls: int = 0
    batch_saved_usd: float = 0.0
    not_sent: int = 0

    def answered(
        self, t: Tokens, prices: Prices | None, latency: float = 0.0, *, batched: bool = False
    ) -> tuple[float | None, float | None, float]:
        """One answer: its tokens and its cost at the model's prices, at the batch APIs' when it came through
        a batch (what it then saved against the same call interactive is counted too); the cost is returned
        as well. The one place a call is priced: the report's cost is what was billed."""
        self.input_tokens += t.input_tokens
        self.output_tokens += t.output_tokens
        self.cache_read_tokens += t.cache_read_tokens
        self.cache_write_tokens += t.cache_write_tokens
        self.cache_write_1h_tokens += t.cache_write_1h_tokens
        self.latency_seconds += latency
        total, inp, saved = cost(at_batch_price(prices) if batched and prices is not None else prices, t)
        self.cache_saved_usd += saved
        if batched:
            self.batched_calls += 1
            full, _, _ = cost(prices, t)
            self.batch_saved_usd += (full or 0.0) - (total or 0.0)
        if total is None:
            self.unpriced_calls += 1
        else:
            self.cost_usd += total
            self.input_cost_usd += inp or 0.0
        return total, inp, saved

    def add(self, other: Counts) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def since(self, before: Counts) -> Counts:
        return Counts(**{f.name: getattr(self, f.name) - getattr(before, f.name) for f in fields(self)})

    def snapshot(self) -> Counts:
        return Counts(**asdict(self))

    def as_dict(self) -> dict[str, Any]:
        return {
            f.name: round(v, 6) if isinstance(v := getattr(self, f.name), float) else v for f in fields(self)
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Counts:
        """The gateway's JSON form back; names it does not know are left out (an older gateway's)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    def usage(self, latency_seconds: float | None = None) -> Usage:
        """As a record's usage: `latency_seconds` in place of the answered calls' own when given."""
        return self.split(1, latency_seconds)[0]

    def split(self, parts: int, latency_seconds: float | None = None) -> list[Usage]:
        """Evenly over `parts` records that ran together (a command harness's chunk shares its calls as it
        shares its time): whole counts by remainder, money and time by division."""
        unknown = self.unpriced_calls > 0
        latency = self.latency_seconds if latency_seconds is None else latency_seconds
        shares = []
        for i in range(parts):
            whole = {k: getattr(self, k) // parts + (i < getattr(self, k) % parts) for k in _WHOLE}
            shares.append(
                Usage(
                    **whole,
                    cost_usd=None if unknown else round(self.cost_usd / parts, 6),
                    input_cost_usd=None if unknown else round(self.input_cost_usd / parts, 6),
                    cache_saved_usd=round(self.cache_saved_usd / parts, 6),
                    batch_saved_usd=round(self.batch_saved_usd / parts, 6),
                    latency_seconds=round(latency / parts, 4),
                )
            )
        return shares
