"""One retry policy for a model call: the runner's own client's and the gateway's alike.

Rate limits (429) and transient errors (5xx, 529, a dropped connection) are retried with exponential
backoff and full jitter (a uniform draw below the capped exponential: it spreads many callers' retries
apart instead of sending them back together), bounded by the attempts and the total time of the config's
`retry:`. A rate limit pauses the shared budget for every caller of that key, for the server's
retry-after or else the backoff, and the caller then waits in the budget rather than asleep on its own;
without a shared budget it sleeps the pause itself. A transient error waits the longer of the backoff
and a retry-after. Any other error is the caller's, and is not retried.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from runner.config import RetrySettings

RETRIED = ("rate_limited", "transient")


@dataclass(frozen=True)
class Retry:
    wait: float  # seconds to sleep before the next attempt
    pause: float | None  # a rate limit with a shared budget: hold the budget this long for every caller


class RetryPolicy:
    """One call's attempts: ask `after(kind, retry_after)` when an attempt fails."""

    def __init__(
        self, settings: RetrySettings, *, budget: bool, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.settings, self.budget, self.clock = settings, budget, clock
        self.deadline = clock() + settings.total_cap_seconds
        self.attempts = self.retries = self.rate_limited = 0

    def after(self, kind: str, retry_after: float | None) -> Retry | None:
        """After a failed attempt: how to wait for the next one, or None when there is none (an error not to
        retry, the last attempt, or a wait that would end past the total time)."""
        self.attempts += 1
        if kind not in RETRIED:
            return None
        self.rate_limited += kind == "rate_limited"
        if self.attempts >= self.settings.max_attempts:
            return None
        s = self.settings
        backoff = random.uniform(0, min(s.max_backoff_seconds, s.base_seconds * 2 ** (self.attempts - 1)))
        if kind == "rate_limited":
            pause = retry_after if retry_after is not None else backoff
            retry = Retry(0.0, pause) if self.budget else Retry(pause, None)
        else:
            retry = Retry(max(backoff, retry_after or 0.0), None)
        if self.clock() + retry.wait > self.deadline:
            return None
        self.retries += 1
        return retry
