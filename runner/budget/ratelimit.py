"""Rate-limit budgets shared by every worker process.

One shared-memory array holds, per key ("provider" or "provider/model"), token buckets for
requests, input tokens and output tokens per minute, a pause-until time set by 429s, an
adaptive concurrency window and the calls' smoothed round trip (what `--concurrency auto` paces
its windows by). Every worker draws from the same buckets, so N workers together
stay under the provider's limit and an idle worker leaves its share to the others -- the gap the
per-process limiters of the seeds admit to.

A reservation counts as in flight until it is settled. `held(res)` settles it however the call
ends (a time limit, a bug, a cancelled task): a leaked one would shrink every worker's concurrency
window for the rest of the run. A worker killed mid-call cannot settle at all, so in-flight counts
are also kept per lane (one per live worker): the supervisor reclaims a dead worker's lane.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import multiprocess as mp

from runner.budget import timings
from runner.budget.gates import Gates
from runner.budget.spend import Spend
from runner.budget.xlock import ProcessLock
from runner.config import Config, Limits, LimitSpec
from runner.interrupts import shielded

(
    _RPM_CAP,
    _RPM,
    _ITPM_CAP,
    _ITPM,
    _OTPM_CAP,
    _OTPM,
    _STAMP,
    _PAUSED,
    _CONC,
    _INFLIGHT,
    _ADAPTIVE,
    _CONC_MAX,
    _SSTHRESH,
    _FULL_AT,
    _RTT,
    _WAITED,
    _ADMITTED,
    _USED_REQ,
    _USED_IN,
    _USED_OUT,
    _HEAD_SINCE,
    _HEAD_SEEN,
    _HEAD_IN,
    _HEAD_OUT,
    _TIMES,
) = range(25)
_F = _TIMES + timings.BUCKETS  # floats per key: the counters, then the call-time histogram
INF = float("inf")
_BUCKETS = ((_RPM_CAP, _RPM), (_ITPM_CAP, _ITPM), (_OTPM_CAP, _OTPM))  # (cap, level) per bucket
RTT_GAIN = 1 / 16  # each successful call's share of the smoothed round trip (TCP's SRTT uses 1/8)
# The oldest waiter of a key is served first (see try_acquire): it is the oldest while it keeps asking (a
# waiter asks at least every 0.5 s), and callers that came within this of it are as old.
HEAD_STALE_SECONDS = 0.75
SAME_AGE_SECONDS = 0.05


@dataclass(frozen=True)
class Tally:
    """What the budget counted for one key since the run began: seconds calls waited in it before they
    were admitted, how many were admitted, and how long the calls that succeeded took (a histogram,
    runner/budget/timings.py)."""

    waited_seconds: float
    admitted: int
    times: tuple[float, ...] = ()
    used: tuple[float, float, float] = (0.0, 0.0, 0.0)  # requests, input and output tokens settled
    # its limits per minute: requests, input, output tokens
    caps: tuple[float, float, float] = (INF, INF, INF)


@dataclass(frozen=True)
class Reservation:
    slot: int
    input_tokens: float
    output_tokens: float
    lane: int = -1
    at: float = 0.0  # when admitted (monotonic): did the window fill while this call was out?
    run: int = -1  # the run whose call it is (Budget.run_index), whose usage it settles into; -1: none


class Held:
    """A reservation being used: `used(input, output)` settles it with the call's real usage."""

    def __init__(self, limiter: Budget, res: Reservation) -> None:
        self.limiter, self.res = limiter, res
        self.settled = False

    def used(self, input_tokens: float, output_tokens: float) -> None:
        with shielded():  # settled and marked so together: a cut between would settle it twice
            self.limiter.settle(self.res, input_tokens, output_tokens)
            self.settled = True


class Budget:
    """What callers do with a budget, wherever its counts live (shared memory here, a Ray actor in
    runner/engine/ray_executor.py)."""

    keys: list[str]
    runs: list[str]
    lanes: int
    lane: int
    out_estimate: float

    def slot(self, key: str) -> int:
        return self.keys.index(key)

    def run_index(self, run: str | None) -> int:
        """The index a run's calls carry into their reservations (-1: a run the budget does not count)."""
        return self.runs.index(run) if run in self.runs else -1

    def per_run(self) -> dict[str, dict[str, tuple[float, float, float]]]:
        """Per run, per key: the calls settled and their input (as limited) and output tokens."""
        return {}

    def pause(self, slot: int, seconds: float) -> None:
        raise NotImplementedError

    def reclaim(self, lane: int) -> float:
        raise NotImplementedError

    def snapshot(self, slot: int) -> dict[str, float]:
        raise NotImplementedError

    def round_trip(self) -> float | None:
        """The slowest key's smoothed call time in seconds, from admission to settle (None before any
        call succeeded): how long the effect of more calls in flight takes to show."""
        times = [t for t in (self.snapshot(s)["round_trip"] for s in range(len(self.keys))) if t > 0]
        return max(times, default=None)

    def try_acquire(
        self,
        slot: int,
        input_tokens: float,
        output_tokens: float | None = None,
        lane: int | None = None,
        waited: float = 0.0,
        run: int = -1,
    ) -> Reservation | float:
        """A reservation, or the seconds to wait before trying again. `waited`: how long this caller has
        waited for it so far (counted once admitted: the budget's queueing, a signal for the throttle);
        `run`: whose call it is (run_index)."""
        raise NotImplementedError

    def tally(self) -> dict[str, Tally]:
        """Per key, what it counted since the run began (the throttle reads the difference per window)."""
        raise NotImplementedError

    def settle(self, res: Reservation, input_tokens: float, output_tokens: float, *, ok: bool = True) -> None:
        raise NotImplementedError

    def acquire(
        self,
        slot: int,
        input_tokens: float,
        output_tokens: float | None = None,
        deadline: float | None = None,
        *,
        taken: Callable[[Reservation], None] | None = None,
        run: int = -1,
    ) -> Reservation | None:
        """Block until admitted (None if the deadline passes first). `taken` is called with the reservation
        inside the shield that admitted it (runner/interrupts.py): a caller the time limit may cut records it
        there, with no instruction between admission and its record."""
        first = time.monotonic()
        while True:
            with shielded():
                r = self.try_acquire(
                    slot, input_tokens, output_tokens, waited=time.monotonic() - first, run=run
                )
                if isinstance(r, Reservation):
                    if taken is not None:
                        taken(r)
                    return r
            if deadline is not None and time.monotonic() + min(r, 0.5) > deadline:
                return None
            time.sleep(min(max(r, 0.005), 0.5))  # waiting is the caller's time: a cut may land here

    @contextmanager
    def reserving(
        self,
        slot: int,
        input_tokens: float,
        output_tokens: float | None = None,
        deadline: float | None = None,
        run: int = -1,
    ) -> Iterator[Held | None]:
        """`acquire` and `held` in one, for a caller the time limit may cut anywhere: the reservation is this
        block's from the instant it is admitted, so no cut can fall between admission and the `finally` that
        settles it. None if the deadline passes first."""
        box: list[Held] = []
        try:
            self.acquire(
                slot,
                input_tokens,
                output_tokens,
                deadline,
                taken=lambda r: box.append(Held(self, r)),
                run=run,
            )
            yield box[0] if box else None
        finally:
            if box and not box[0].settled:
                with shielded():
                    self.settle(box[0].res, box[0].res.input_tokens, 0, ok=False)

    @contextmanager
    def held(self, res: Reservation) -> Iterator[Held]:
        """Settle `res` on every way out: with `used(...)`, else as a failed call (output refunded, the
        input estimate kept: the provider may have read it)."""
        h = Held(self, res)
        try:
            yield h
        finally:
            if not h.settled:
                self.settle(res, res.input_tokens, 0, ok=False)


class SharedLimiter(Budget):
    """Created once by the supervisor, handed to workers at spawn (shared memory + one lock)."""

    def __init__(
        self,
        limits: dict[str, Limits],
        adaptive: dict[str, bool],
        *,
        start_concurrency: float = 8,
        max_concurrency: float = 256,
        out_estimate: float = 200,
        lanes: int = 0,
        runs: list[str] | None = None,
    ) -> None:
        self.keys = sorted(limits)
        self.runs = list(runs or [])
        self.out_estimate = out_estimate
        ctx = mp.get_context("spawn")
        # The kernel releases it when its holder dies (kill -9 of a worker mid-update): nobody guesses from a
        # recorded pid whether the holder still lives (a guess that let two processes in at once, and waited
        # for ever on a reused pid).
        self._lock = ProcessLock()
        self._arr: Any = ctx.RawArray("d", max(1, len(self.keys)) * _F)  # guarded by _lock
        self.lanes = lanes
        self._lanes: Any = ctx.RawArray("d", max(1, lanes * len(self.keys)))  # guarded by _lock
        # per run and key: calls settled, their input (as limited) and output tokens; guarded by _lock
        self._usage: Any = ctx.RawArray("d", max(1, len(self.runs) * len(self.keys) * 3))
        self.lane = -1  # a worker sets its own after spawn
        self.gates: Gates | None = None  # each run's first-call gate, carried with the budget to every worker
        self.spend: Spend | None = None  # the job's and its runs' spending caps, carried likewise
        now = time.monotonic()
        for i, k in enumerate(self.keys):
            lim = limits[k]
            base = i * _F
            for cap_i, lvl_i, cap in (
                (_RPM_CAP, _RPM, lim.rpm),
                (_ITPM_CAP, _ITPM, lim.itpm),
                (_OTPM_CAP, _OTPM, lim.otpm),
            ):
                self._arr[base + cap_i] = cap or INF
                self._arr[base + lvl_i] = cap or INF
            self._arr[base + _STAMP] = now
            self._arr[base + _PAUSED] = 0.0
            self._arr[base + _ADAPTIVE] = 1.0 if adaptive.get(k) else 0.0
            self._arr[base + _CONC] = start_concurrency if adaptive.get(k) else INF
            self._arr[base + _CONC_MAX] = max_concurrency
            self._arr[base + _SSTHRESH] = max_concurrency
            self._arr[base + _FULL_AT] = -INF
            self._arr[base + _INFLIGHT] = 0.0
            self._arr[base + _RTT] = 0.0
            self._arr[base + _HEAD_SEEN] = -INF  # no oldest waiter: its other fields are read only once seen
            for i in (_WAITED, _ADMITTED, _USED_REQ, _USED_IN, _USED_OUT):
                self._arr[base + i] = 0.0

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The budget's lock, held for microseconds. Inside a shield: a time-limit cut landing mid-update
        would leave the counts torn."""
        with shielded(), self._lock.held():
            yield

    def _refill(self, base: int, now: float) -> None:
        a = self._arr
        dt = now - a[base + _STAMP]
        a[base + _STAMP] = now
        for cap_i, lvl_i in _BUCKETS:
            cap = a[base + cap_i]
            if cap != INF:
                a[base + lvl_i] = min(cap, a[base + lvl_i] + dt * cap / 60.0)

    def try_acquire(
        self,
        slot: int,
        input_tokens: float,
        output_tokens: float | None = None,
        lane: int | None = None,
        waited: float = 0.0,
        run: int = -1,
    ) -> Reservation | float:
        """A reservation, or the seconds to wait before trying again; in-flight counted on `lane` (the
        caller's, default this process's).

        First come, first served: while the key's oldest waiter (the caller that has waited longest and still
        asks) cannot be admitted, the tokens it needs are kept for it and a younger caller gets only what is
        left over. Without, whoever asked when enough had come back took it: a small request again and again,
        and a large one waited on (the seeds' job: the largest fifth of its binding model's calls waited 7 s
        on average and up to 53 s, the smallest fifth 1 s; a conversation's last turns, its largest, were
        left to the end, one after the other, while the budget sat partly unused).

        The budget keeps one oldest waiter per key, learnt from the asks: once it is served, the next one is
        known at its next ask (within 0.5 s), and meanwhile younger callers may take what came back; callers
        that came within SAME_AGE_SECONDS of it count as as old (the caller's clock and the budget's differ
        by a call's time on Ray). So an order nearly first come, first served: a younger caller may get
        ahead by up to one poll's refill per waiter served, never again and again (an independent check
        found both, and no waiter held back longer)."""
        out = self.out_estimate if output_tokens is None else output_tokens
        lane = self.lane if lane is None else lane
        a, base = self._arr, slot * _F
        with self._locked():
            now = time.monotonic()
            self._refill(base, now)
            if a[base + _PAUSED] > now:
                return a[base + _PAUSED] - now
            conc = a[base + _CONC]
            if conc != INF and a[base + _INFLIGHT] >= int(conc):
                a[base + _FULL_AT] = now
                return 0.02
            since = now - waited
            head = a[base + _HEAD_SEEN] >= now - HEAD_STALE_SECONDS
            oldest = not head or since <= a[base + _HEAD_SINCE] + SAME_AGE_SECONDS
            kept = (0.0, 0.0, 0.0) if oldest else (1.0, a[base + _HEAD_IN], a[base + _HEAD_OUT])
            waits = []
            for (cap_i, lvl_i), need, held in zip(_BUCKETS, (1.0, input_tokens, out), kept, strict=True):
                cap = a[base + cap_i]
                need = min(need, cap)  # a request larger than a whole minute's budget waits for a full bucket
                if cap != INF and a[base + lvl_i] - held < need:
                    waits.append((need + held - a[base + lvl_i]) * 60.0 / cap)
            if waits:
                if oldest:  # the tokens that come back are kept for this caller from now on
                    a[base + _HEAD_SINCE] = min(since, a[base + _HEAD_SINCE]) if head else since
                    a[base + _HEAD_SEEN] = now
                    a[base + _HEAD_IN] = min(input_tokens, a[base + _ITPM_CAP])
                    a[base + _HEAD_OUT] = min(out, a[base + _OTPM_CAP])
                return max(waits)
            if oldest and head:
                a[base + _HEAD_SEEN] = -INF  # the oldest waiter is served: the next one asks for itself
            a[base + _RPM] -= 1.0
            a[base + _ITPM] -= input_tokens
            a[base + _OTPM] -= out
            a[base + _INFLIGHT] += 1
            a[base + _WAITED] += waited
            a[base + _ADMITTED] += 1
            if conc != INF and a[base + _INFLIGHT] >= int(conc):
                a[base + _FULL_AT] = now
            if 0 <= lane < self.lanes:
                self._lanes[lane * len(self.keys) + slot] += 1
            return Reservation(slot, input_tokens, out, lane, now, run)

    def settle(self, res: Reservation, input_tokens: float, output_tokens: float, *, ok: bool = True) -> None:
        """Charge real usage instead of the estimate; on success time the call and grow the window if it
        was what limited."""
        a, base = self._arr, res.slot * _F
        with self._locked():
            if ok and res.at > 0:
                took = time.monotonic() - res.at
                rtt = a[base + _RTT]
                a[base + _RTT] = took if rtt <= 0 else rtt + RTT_GAIN * (took - rtt)
                a[base + _TIMES + timings.bucket(took)] += 1
            if ok and a[base + _ADAPTIVE] and a[base + _FULL_AT] >= res.at:
                self._grow(base)
            a[base + _INFLIGHT] = max(0.0, a[base + _INFLIGHT] - 1)
            if 0 <= res.lane < self.lanes:
                i = res.lane * len(self.keys) + res.slot
                self._lanes[i] = max(0.0, self._lanes[i] - 1)
            a[base + _ITPM] += res.input_tokens - input_tokens
            a[base + _OTPM] += res.output_tokens - output_tokens
            a[base + _USED_REQ] += 1
            a[base + _USED_IN] += input_tokens
            a[base + _USED_OUT] += output_tokens
            if ok and 0 <= res.run < len(self.runs):
                u = (res.run * len(self.keys) + res.slot) * 3
                self._usage[u] += 1
                self._usage[u + 1] += input_tokens
                self._usage[u + 2] += output_tokens

    def _grow(self, base: int) -> None:
        """TCP's congestion control on calls in flight, for a call during which the window was full
        (one idle at 5 of 64 would otherwise climb to its maximum and admit a burst the provider never
        allowed): below the threshold (none until the first 429) one more per success, so a full
        window doubles each round trip ("slow start": from 8 to 64 calls in flight took ~2,000 calls
        of additive growth, and slots waited on the window); above it, one more per window's worth."""
        a = self._arr
        conc = a[base + _CONC]
        step = 1.0 if conc < a[base + _SSTHRESH] else 1.0 / max(conc, 1.0)
        a[base + _CONC] = min(a[base + _CONC_MAX], conc + step)

    def reclaim(self, lane: int) -> float:
        """A dead worker's reservations, given back; returns how many there were."""
        if not 0 <= lane < self.lanes:
            return 0.0
        a, n, freed = self._arr, len(self.keys), 0.0
        with self._locked():
            for slot in range(n):
                held = self._lanes[lane * n + slot]
                self._lanes[lane * n + slot] = 0.0
                base = slot * _F
                a[base + _INFLIGHT] = max(0.0, a[base + _INFLIGHT] - held)
                freed += held
        return freed

    def pause(self, slot: int, seconds: float) -> None:
        """The server said wait: nobody sends on this key until then; the window halves."""
        a, base = self._arr, slot * _F
        with self._locked():
            a[base + _PAUSED] = max(a[base + _PAUSED], time.monotonic() + seconds)
            if a[base + _ADAPTIVE]:  # and growth turns additive from here
                a[base + _CONC] = a[base + _SSTHRESH] = max(1.0, a[base + _CONC] / 2)

    def headroom(self, slot: int) -> float:
        """How much of its tightest budget the key has unspent, 0..1 (1: unlimited or idle, 0: spent or
        paused): a key well under its limits needs more calls in flight, one at 0 gains nothing."""
        a, base = self._arr, slot * _F
        with self._locked():
            now = time.monotonic()
            self._refill(base, now)
            if a[base + _PAUSED] > now:
                return 0.0
            shares = [
                max(0.0, a[base + lvl_i]) / a[base + cap_i]
                for cap_i, lvl_i in _BUCKETS
                if a[base + cap_i] != INF
            ]
            return min(shares, default=1.0)

    def tally(self) -> dict[str, Tally]:
        a = self._arr
        with self._locked():
            return {
                key: Tally(
                    a[b + _WAITED],
                    int(a[b + _ADMITTED]),
                    tuple(a[b + _TIMES : b + _F]),
                    (a[b + _USED_REQ], a[b + _USED_IN], a[b + _USED_OUT]),
                    (a[b + _RPM_CAP], a[b + _ITPM_CAP], a[b + _OTPM_CAP]),
                )
                for key, b in ((key, i * _F) for i, key in enumerate(self.keys))
            }

    def per_run(self) -> dict[str, dict[str, tuple[float, float, float]]]:
        n = len(self.keys)
        with self._locked():
            u = list(self._usage)
        return {
            run: {
                key: (u[(r * n + k) * 3], u[(r * n + k) * 3 + 1], u[(r * n + k) * 3 + 2])
                for k, key in enumerate(self.keys)
            }
            for r, run in enumerate(self.runs)
        }

    def snapshot(self, slot: int) -> dict[str, float]:
        a, base = self._arr, slot * _F
        with self._locked():
            return {
                "requests": a[base + _RPM],
                "input_tokens": a[base + _ITPM],
                "output_tokens": a[base + _OTPM],
                "concurrency": a[base + _CONC],
                "in_flight": a[base + _INFLIGHT],
                "round_trip": a[base + _RTT],
                "paused_for": max(0.0, a[base + _PAUSED] - time.monotonic()),
            }


def limiter_key(cfg: Config, provider: str, model: str) -> str:
    """The budget a call draws from: provider/model if configured (or covered by another key's budget), else
    provider (or the budget covering it). A cloud is a provider of its own (bedrock, vertex, azure): another
    account, with limits of its own, than the first-party API of the same models, unless a budget covers
    it."""
    return budget_key(cfg.rate_limits, provider, model)


def budget_key(rate_limits: Mapping[str, LimitSpec], provider: str, model: str) -> str:
    """limiter_key, given the config's rate_limits."""
    for key in (f"{provider}/{model}", provider):
        if key in rate_limits:
            return key
        owner = next((k for k, spec in rate_limits.items() if key in spec.covers), None)
        if owner is not None:
            return owner
    return provider


def budget_spec(cfg: Config) -> tuple[dict[str, Limits], dict[str, bool]]:
    """Limits and adaptive-concurrency switches per key any run uses; unlimited keys still get adaptive
    concurrency by default."""
    keys: set[str] = set()
    for r in cfg.model_runs():
        ref = r.model_ref()
        keys.add(limiter_key(cfg, ref.provider, ref.model))
        if r.teacher:
            keys.add(limiter_key(cfg, r.teacher.provider, r.teacher.model))
    limits = {k: cfg.rate_limits[k].resolved() if k in cfg.rate_limits else Limits() for k in keys}
    adaptive = {
        k: (cfg.adaptive_concurrency if cfg.adaptive_concurrency is not None else k not in cfg.rate_limits)
        for k in keys
    }
    return limits, adaptive


def build_limiter(cfg: Config, *, lanes: int = 0) -> SharedLimiter:
    return SharedLimiter(*budget_spec(cfg), lanes=lanes, runs=[r.name for r in cfg.runs])
