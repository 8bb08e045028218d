"""The gateway's side of the spending caps (runner/budget/spend.py): before a call goes, its expected cost is
held against the job's and its run's caps (its request's tokens at the input price, the usual answer, or
its output limit if less, at the output price; a batch run's at the batch price); once answered, what it
cost replaces that. A call that would pass a cap raises Spent and is not sent."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from runner.budget.spend import Spend, Ticket
from runner.models.capabilities import Prices
from runner.models.usage import Tokens, at_batch_price, cost

# a call's answer, in tokens, as the shared budget reserves it (runner/budget/ratelimit.py)
OUT_ESTIMATE = 200.0


class Spending:
    def __init__(
        self, spend: Spend | None, price: Callable[[str, str], Prices | None], batched: Callable[[str], bool]
    ) -> None:
        """`price(provider, model)`: the model's prices; `batched(run)`: whether the run's calls go in
        batches."""
        self.spend, self.price, self.batched = spend, price, batched

    def reserve(
        self, run: str, provider: str, model: str, raw: bytes, body: dict[str, Any] | None
    ) -> Ticket | None:
        if self.spend is None:
            return None
        if not self.spend.capped:  # nothing to hold against: no estimate (it still counts when it settles)
            return self.spend.reserve(run, 0.0, 0.0)
        est_in = len(raw) / 4
        asked = (body or {}).get("max_tokens") or (body or {}).get("max_completion_tokens")
        est_out = min(float(asked), OUT_ESTIMATE) if isinstance(asked, (int, float)) else OUT_ESTIMATE
        p = self.price(provider, model)
        p = at_batch_price(p) if self.batched(run) and p is not None else p
        usd = (est_in * p.input + est_out * p.output) / 1e6 if p is not None else 0.0
        return self.spend.reserve(run, usd, est_in + est_out)

    @contextlib.contextmanager
    def held(
        self, ticket: Ticket | None, provider: str, model: str
    ) -> Iterator[Callable[[Tokens, bool], None]]:
        """Yields `paid(usage, batched)`, to call with an answered call's usage; a call never paid for costs
        nothing."""
        if self.spend is None or ticket is None:
            yield lambda usage, batched: None
            return
        with self.spend.held(ticket) as spent:

            def paid(usage: Tokens, batched: bool) -> None:
                p = self.price(provider, model)
                billed = at_batch_price(p) if batched and p is not None else p
                spent.append(
                    (
                        cost(billed, usage)[0] or 0.0,
                        float(
                            usage.input_tokens
                            + usage.cache_read_tokens
                            + usage.cache_write_tokens
                            + usage.output_tokens
                        ),
                    )
                )

            yield paid
