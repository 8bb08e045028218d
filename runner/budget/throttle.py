"""`--concurrency auto`: how many records to keep in flight, found while the run goes.

Fed by the supervisor (results, in flight, the time) and by the shared budget (per model: how long calls
took, how long they waited in it); no clock of its own. Like TCP's congestion window: start small and
double every window in which the slots were full and nothing said stop (slow start); after the first
cut grow by an eighth (at least a step) per window instead. A window lasts ROUNDS round trips of a model
call as the shared budget times them (a fixed 10 s is 3 round trips at 3 s per call but 50 at 200 ms),
one in slow start.

Which signal decides, in this order (the progress line says which):

1. **429s.** More than 1 % of a window's calls answered 429: the provider says the budget is spent.
   Cut by a third.
2. **The shared budget queues.** Calls of every model with traffic waited in the runner's own budget
   (its rate buckets, or its per-model window where no limits are set) for a tenth of a round trip or
   more: the known budget is what limits, and more records would only wait in it. Hold.
3. **Latency that follows load, not work.** A call's latency grows with its prompt and its output, and
   conversations lengthen turn by turn, so each model's median call time in a window (timed by the
   budget: the calls that ended in the window, not the records, whose first finishers are the fastest)
   is judged against the lowest median of that model's last few windows only (an expiring minimum, as
   TCP BBR's min-RTT filter: a baseline that follows the work), and only when the rise came with more
   records in flight than that baseline's window had. Even then the cut is a probe: if the next window's
   latency does not come back down at the lower level, the rise was the work's, the cut is undone and
   the baseline starts again. (The rule it replaces, "1.5 x the best window ever", read the slower calls
   of longer conversations as congestion and held a rate-limited job at 5.38 x its floor: the best
   window was an early one of short first turns.)

Never above the capacity the workers' slots give, never below one record per worker; and without one of
the signals above, never held below what the slots and the budget allow: a full window grows. The first
window starts once the slots are first full: until then the workers are booting. Where every budget has
its limits set, the run starts at every ready slot (`target`, runner/run/job.py): the budget paces the
calls, and any ramp left its refill unused for the run's first seconds.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from runner.budget import timings
from runner.budget.ratelimit import Tally

WINDOW_SECONDS = 10.0  # until a call has been timed
ROUNDS = 3  # a window's length in round trips: the new records' calls out, answered, and some margin
# In slow start a window is one round trip, as TCP's: doubling needs only "the slots were full and nothing
# said stop", and a rate-limited budget's bucket sits full (its refill lost) until the ramp reaches it: at
# three round trips a window the seeds' job reached 256 in flight after 25 s, 5 % of its floor.
SLOW_START_ROUNDS = 1
MIN_WINDOW_SECONDS = 1.0
ASK_EVERY_SECONDS = 0.25
CUT_ON_429 = 0.67
CUT_ON_LATENCY = 0.75  # a probe: deep enough that load's answer stands out of a window's noise
ELASTIC = 0.5  # latency that falls at least half as fast as the records in flight did is load
LATENCY_RISE = 1.5  # a window's median this many times the baseline's, with more in flight, is load
RAMP_RISE = 2.0  # in slow start (short windows, twice the records each round) only a doubling counts
FLIGHT_RISE = 1.05  # "more in flight" than the baseline's window: by more than this share
SETTLED = 0.1  # a window whose records in flight moved less than this share from the last one's is settled
BASELINE_WINDOWS = 6  # the latency baseline is the lowest median of this many recent windows
PROBE_WINDOWS = 8  # a latency cut is judged once in flight came down to it, or after this many windows
GROWTH = 8  # after slow start a full window adds the larger of the step and 1/GROWTH of the target
MIN_RECORDS = 4  # a window with fewer records says nothing about latency (records' own times)
MIN_CALLS = 20  # a model with fewer timed calls in a window says nothing about its latency
RATE_LIMITED_SHARE = 0.01  # of a window's calls answered 429, above which the target is cut
QUEUED_SHARE = 0.1  # calls that waited in the shared budget this share of a round trip: it binds
RECORDS = "records"  # the latency stream of the records' own times, where the budget timed no call


@dataclass
class _Seen:
    """One past window of one latency stream (a model's calls, or the records')."""

    median: float
    in_flight: float


@dataclass
class _Probe:
    """A latency cut on trial: the target before the descent began, the stream, its median and the records
    in flight at the level above, and the windows waited so far for the records in flight to come down."""

    before: int
    stream: str
    high: float
    flight: float
    descending: bool = False  # an earlier step of this descent found load
    waited: int = 0


@dataclass
class Throttle:
    capacity: int
    floor: int = 1
    window: float | None = None  # seconds; None: ROUNDS round trips as `round_trip` measures them
    round_trip: Callable[[], float | None] | None = None
    tally: Callable[[], Mapping[str, Tally]] | None = None
    step: int = 1
    target: int = 0
    why: str = "start"
    signal: str = "start"  # which rule decided last: 429s, budget, latency, work, grow (or a hold's reason)
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
    _flight_sum: float = 0.0
    _flight_n: int = 0
    _tally_at_start: Mapping[str, Tally] = field(default_factory=dict)
    _seen: dict[str, deque[_Seen]] = field(default_factory=dict)
    _knee: dict[str, _Seen] = field(default_factory=dict)  # per stream, the level a descent found load at
    _probe: _Probe | None = None
    _prev_flight: float | None = None  # the last window's records in flight, on average
    _changed: bool = False  # the last window's decision changed the target
    # slow start's recent rounds, per stream
    _ramp_seen: dict[str, deque[_Seen]] = field(default_factory=dict)
    _rounds: int = 0

    def __post_init__(self) -> None:
        self.floor = max(1, min(self.floor, self.capacity))
        self.target = self.target or min(self.capacity, max(self.floor, 2 * self.step))

    def baseline(self, stream: str) -> _Seen | None:
        """The level the stream's latency is judged against: where a descent found its knee, else its recent
        window with the lowest median (None before one was measured)."""
        knee = self._knee.get(stream)
        return knee or min(self._seen.get(stream, ()), key=lambda s: s.median, default=None)

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
            self._open(now)
        start = self._window_start if self._window_start is not None else now
        self._full = self._full and (in_flight >= self.target or not pending)
        self._flight_sum += in_flight
        self._flight_n += 1
        if self._untimed and now - self._asked >= ASK_EVERY_SECONDS:  # opened before any call was timed:
            # paced by the first timing that comes (asked now and then: on Ray a remote call)
            self._asked = now
            self._length = self._next_length()
        if now - start < self._length:
            return False
        changed = self._decide(now, pending)
        self._open(now)
        return changed

    def _open(self, now: float) -> None:
        self._window_start, self._length = now, self._next_length()
        self._walls, self._rate_limited, self._calls, self._full = [], 0, 0, True
        self._flight_sum, self._flight_n = 0.0, 0
        self._tally_at_start = self.tally() if self.tally is not None else {}

    def _next_length(self) -> float:
        if self.window is not None:
            return self.window
        rtt = self.round_trip() if self.round_trip is not None else None
        self._untimed = rtt is None and self.round_trip is not None
        rounds = SLOW_START_ROUNDS if self.slow_start else ROUNDS
        return WINDOW_SECONDS if rtt is None else max(MIN_WINDOW_SECONDS, rounds * rtt)

    # ------------------------------------------------------------------ the decision
    def _decide(self, now: float, pending: bool) -> bool:
        flight = self._flight_sum / self._flight_n if self._flight_n else float(self.target)
        # After a cut, a window's latency says something of the lower level only once the records in flight
        # came down to it and held there for a window: they come down only as they finish, and calls that end
        # in a window began up to a round trip earlier.
        moved = self._changed  # the last decision changed the target
        settled = (
            not moved
            and self._prev_flight is not None
            and abs(flight - self._prev_flight) <= SETTLED * max(self._prev_flight, 1.0)
        )
        self._prev_flight, self._changed = flight, False
        if self._rate_limited > RATE_LIMITED_SHARE * self._calls:
            self._probe = None
            self.slow_start = False
            return self._set(
                now,
                int(self.target * CUT_ON_429),
                "429s",
                f"{self._rate_limited} 429s in {self._calls} calls in {self._length:.3g}s",
            )
        medians, bound = self._read_window()
        if self._probe is not None and self._probe.stream in medians:
            if (flight > FLIGHT_RISE * self.target or not settled) and self._probe.waited < PROBE_WINDOWS:
                self._probe.waited += 1  # the cut has not reached the records in flight yet: no evidence
                return self._hold(
                    "latency", f"waiting for the records in flight ({flight:.0f}) to settle at {self.target}"
                )
            return self._judge_probe(now, medians, flight)
        if bound:
            self._remember(medians, flight)
            return self._hold("budget", f"the shared budget binds ({bound}): more records would wait in it")
        if self.slow_start:
            return self._ramp(now, pending, medians, flight, moved)
        for stream, median in medians.items():
            base = self.baseline(stream)
            if (
                base is not None
                and median > LATENCY_RISE * base.median
                and flight > FLIGHT_RISE * base.in_flight
            ):
                self._probe = _Probe(self.target, stream, median, flight)
                return self._set(
                    now,
                    int(self.target * CUT_ON_LATENCY),
                    "latency",
                    f"{stream} latency {median:.2f}s at {flight:.0f} in flight against "
                    f"{base.median:.2f}s at {base.in_flight:.0f}: trying fewer",
                )
        self._remember(medians, flight)
        return self._grow(now, pending)

    def _ramp(
        self, now: float, pending: bool, medians: Mapping[str, float], flight: float, moved: bool
    ) -> bool:
        """Slow start: a round trip a window, doubling. It ends early (as TCP's HyStart ends it) when a
        model's calls take RAMP_RISE x the fastest of its recent rounds while twice as many records are in
        flight: back to the level of that fast round, and measured growth from there. Only rounds of the ramp
        are held to each other (each is half new calls, whose first to end are their fast ones: a round after
        the ramp stopped reads higher for that alone), its first round is left out, and a rise smaller than
        RAMP_RISE is noise or the longer prompts of later turns, not load: it never cuts a ramp."""
        self._rounds += 1
        if not moved:
            return self._grow(now, pending)
        for stream, median in medians.items():
            low = min(self._ramp_seen.get(stream, ()), key=lambda s: s.median, default=None)
            if low is not None and median > RAMP_RISE * low.median and flight > 2 * low.in_flight:
                self.slow_start = False
                return self._set(
                    now,
                    round(low.in_flight),
                    "latency",
                    f"{stream} latency {median:.2f}s at {flight:.0f} in flight, {median / low.median:.1f} "
                    f"x its {low.median:.2f}s at {low.in_flight:.0f}: the ramp ends there, growing slowly",
                )
            if self._rounds > 1:
                self._ramp_seen.setdefault(stream, deque(maxlen=BASELINE_WINDOWS)).append(
                    _Seen(median, flight)
                )
        return self._grow(now, pending)

    def _read_window(self) -> tuple[dict[str, float], str]:
        """The window's median call time per model the budget timed enough calls of (else the records'
        own times), and the models whose calls waited in the budget when every model with traffic did."""
        medians: dict[str, float] = {}
        bound, active = [], 0
        now_tally = self.tally() if self.tally is not None else {}
        rtt = self.round_trip() if self.round_trip is not None else None
        for key, t in now_tally.items():
            was = self._tally_at_start.get(key)
            admitted = t.admitted - (was.admitted if was else 0)
            if admitted > 0:
                active += 1
                waited = (t.waited_seconds - (was.waited_seconds if was else 0.0)) / admitted
                if waited > QUEUED_SHARE * (rtt or 1.0):
                    bound.append(key)
            counts = timings.since(t.times, was.times if was else None)
            if sum(counts) >= MIN_CALLS and (m := timings.median(counts)) is not None:
                medians[key] = m
        if not medians and len(self._walls) >= MIN_RECORDS:
            medians[RECORDS] = statistics.median(self._walls)
        return medians, ", ".join(bound) if active and len(bound) == active else ""

    def _judge_probe(self, now: float, medians: Mapping[str, float], flight: float) -> bool:
        """The window after a latency cut reached the records in flight. Latency that came down with them
        (at least ELASTIC as fast, in logs) was load: the level is remembered as the stream's knee (a
        baseline that does not expire) and the descent goes on. Latency that did not: on the first step
        the rise was the work's (the cut is undone, the stream's baseline starts again); on a later one
        the descent has passed the knee (back up one step, hold). Either way growth is slow from here."""
        probe = self._probe
        assert probe is not None
        self._probe = None
        self.slow_start = False
        median = medians[probe.stream]
        fewer = math.log(probe.flight / flight) if 0 < flight < probe.flight else 0.0
        if fewer > 0 and math.log(probe.high / median) >= ELASTIC * fewer:
            self._knee[probe.stream] = _Seen(median, flight)
            if self.target > self.floor:
                self._probe = _Probe(probe.before, probe.stream, median, flight, descending=True)
            return self._set(
                now,
                int(self.target * CUT_ON_LATENCY),
                "latency",
                f"{probe.stream} latency {median:.2f}s at {flight:.0f} in flight, down from "
                f"{probe.high:.2f}s at {probe.flight:.0f}: load; trying fewer still",
            )
        if probe.descending:
            self._remember(medians, flight)
            return self._set(
                now,
                round(probe.flight),
                "latency",
                f"{probe.stream} latency {median:.2f}s at {flight:.0f} in flight, no faster than at "
                f"{probe.flight:.0f}: the knee, held there",
            )
        self._seen.pop(probe.stream, None)
        self._knee.pop(probe.stream, None)
        self._remember(medians, flight)
        return self._set(
            now,
            probe.before,
            "work",
            f"{probe.stream} latency {median:.2f}s at fewer in flight "
            "too: the work's, not load (baseline moved)",
        )

    def _remember(self, medians: Mapping[str, float], flight: float) -> None:
        for stream, median in medians.items():
            self._seen.setdefault(stream, deque(maxlen=BASELINE_WINDOWS)).append(_Seen(median, flight))

    def _grow(self, now: float, pending: bool) -> bool:
        if not pending:
            return self._hold("done", "no records left to start")
        if self.target >= self.capacity:
            return self._hold("capacity", f"every ready slot in use ({self.capacity})")
        if not self._full:
            return self._hold("idle", "the slots were not all busy: nothing to learn")
        grown = 2 * self.target if self.slow_start else self.target + max(self.step, self.target // GROWTH)
        return self._set(now, grown, "grow", "slots full, no 429s, budget not binding, latency holding")

    def _hold(self, signal: str, why: str) -> bool:
        self.signal, self.why = signal, why
        return False

    def _set(self, now: float, target: int, signal: str, why: str) -> bool:
        target = max(self.floor, min(self.capacity, target))
        self.signal = signal
        if target == self.target:
            return False
        self.target, self.why, self._changed = target, why, True
        self.changes.append((now, target, why))
        return True
