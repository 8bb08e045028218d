"""`--concurrency auto`: how many records to keep in flight, found while the run goes (AIMD).

Fed by the supervisor (results, in flight, the time) and by the shared budget (how long a call
takes); no clock of its own. Like TCP's congestion window:
start small and double every window in which the slots were full and nothing went wrong (slow
start), after the first cut add a step per such window instead. A window lasts ROUNDS round trips
of a model call as the shared budget times them, as TCP paces itself by its RTT: a fixed 10 s is 3
round trips at 3 s per call but 50 at 200 ms, and the ramp to 256 in flight took 50 s whatever the
API's speed;
a window in which more than 1 % of the calls were answered 429 (the provider says the budget is
spent; a stray one the shared budget's own pause absorbs) cuts the target by a third; a window
whose model calls took much longer than the best seen so far (the API, or this machine, is
saturating) cuts it a little. Latency is per model call where a record made calls (records differ
in length many times over: a long Atlas conversation is not a slower API), else the record's time.
Never above the capacity the workers' slots give (bounded by memory when the layout was chosen),
never below one record per worker. The first window starts once the slots are first full: until
then the workers are booting, and windows spent on that only delayed the doubling (40 s of 4,800
conversations' run at 8 records in flight).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

WINDOW_SECONDS = 10.0  # until a call has been timed
ROUNDS = 3  # a window's length in round trips: the new records' calls out, answered, and some margin
MIN_WINDOW_SECONDS = 1.0
ASK_EVERY_SECONDS = 0.25
CUT_ON_429 = 0.67
CUT_ON_LATENCY = 0.85
LATENCY_RISE = 1.5  # a window's median latency this many times the best window's is "rising"
MIN_RECORDS = 4  # a window with fewer results says nothing about latency
RATE_LIMITED_SHARE = 0.01  # of a window's calls answered 429, above which the target is cut


@dataclass
class Throttle:
    capacity: int
    floor: int = 1
    window: float | None = None  # seconds; None: ROUNDS round trips as `round_trip` measures them
    round_trip: Callable[[], float | None] | None = None
    step: int = 1
    target: int = 0
    why: str = "start"
    best_median: float | None = None
    changes: list[tuple[float, int, str]] = field(default_factory=list)
    slow_start: bool = True
    _window_start: float | None = None
    _length: float = WINDOW_SECONDS  # the current window's
    _untimed: bool = False  # the current window opened before a call was timed
    _asked: float = -1e9  # when the budget was last asked for a timing, while untimed
    _walls: list[float] = field(default_factory=list)
    _rate_limited: int = 0
    _calls: int = 0
    _full: bool = True

    def __post_init__(self) -> None:
        self.floor = max(1, min(self.floor, self.capacity))
        self.target = self.target or min(self.capacity, max(self.floor, 2 * self.step))

    def result(self, latency: float, rate_limited: int, calls: int = 1) -> None:
        """One record finished: its latency (per model call, else its time), its calls to the APIs and
        the 429s they met."""
        self._walls.append(latency)
        self._rate_limited += rate_limited
        self._calls += max(calls, rate_limited, 1)

    def observe(self, now: float, in_flight: int, pending: bool) -> bool:
        """Called every supervisor turn; at each window's end decide. True if the target changed."""
        if self._window_start is None:
            if in_flight < self.target and pending:
                return False  # not yet full once: workers still booting
            self._window_start, self._length = now, self._next_length()
        self._full = self._full and (in_flight >= self.target or not pending)
        if self._untimed and now - self._asked >= ASK_EVERY_SECONDS:  # opened before any call was timed:
            self._asked = now  # paced by the first timing that comes (asked now and then: on Ray a remote call)
            self._length = self._next_length()
        if now - self._window_start < self._length:
            return False
        changed = self._decide(now, pending)
        self._window_start, self._walls, self._rate_limited, self._calls, self._full = now, [], 0, 0, True
        self._length = self._next_length()
        return changed

    def _next_length(self) -> float:
        if self.window is not None:
            return self.window
        rtt = self.round_trip() if self.round_trip is not None else None
        self._untimed = rtt is None and self.round_trip is not None
        return WINDOW_SECONDS if rtt is None else max(MIN_WINDOW_SECONDS, ROUNDS * rtt)

    def _decide(self, now: float, pending: bool) -> bool:
        median = statistics.median(self._walls) if len(self._walls) >= MIN_RECORDS else None
        limited = self._rate_limited > RATE_LIMITED_SHARE * self._calls
        if limited or (median is not None and self.best_median is not None
                       and median > LATENCY_RISE * self.best_median):
            self.slow_start = False
        if limited:
            return self._set(now, int(self.target * CUT_ON_429),
                             f"{self._rate_limited} 429s in {self._calls} calls in {self._length:.3g}s")
        if median is not None and self.best_median is not None and median > LATENCY_RISE * self.best_median:
            return self._set(now, int(self.target * CUT_ON_LATENCY),
                             f"latency {median:.2f}s (best {self.best_median:.2f}s)")
        if median is not None:
            self.best_median = median if self.best_median is None else min(self.best_median, median)
        if self._full and pending and self.target < self.capacity:
            grown = 2 * self.target if self.slow_start else self.target + self.step
            return self._set(now, grown, "slots full, no 429s, latency holding")
        return False

    def _set(self, now: float, target: int, why: str) -> bool:
        target = max(self.floor, min(self.capacity, target))
        if target == self.target:
            return False
        self.target, self.why = target, why
        self.changes.append((now, target, why))
        return True
