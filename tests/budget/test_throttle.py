"""--concurrency auto: the throttle alone, fed windows of results as the supervisor would."""

from __future__ import annotations

from runner.budget import timings
from runner.budget.ratelimit import Tally
from runner.budget.throttle import (
    CUT_ON_429,
    CUT_ON_LATENCY,
    MIN_WINDOW_SECONDS,
    ROUNDS,
    SLOW_START_ROUNDS,
    WINDOW_SECONDS,
    Throttle,
)


def _window(t: Throttle, start: float, *, walls: list[float], rate_limited: int = 0, in_flight: int | None = None,
            pending: bool = True) -> float:
    t.observe(start, t.target if in_flight is None else in_flight, pending)
    for w in walls:
        t.result(w, 0)
    if rate_limited:
        t.result(walls[0] if walls else 1.0, rate_limited)
    end = start + WINDOW_SECONDS + 0.1
    t.observe(end, t.target if in_flight is None else in_flight, pending)
    return end


def test_it_doubles_then_grows_by_an_eighth_while_the_slots_are_full_and_nothing_goes_wrong() -> None:
    t = Throttle(capacity=60, floor=2, step=2)
    now, seen = 0.0, []
    for _ in range(3):
        now = _window(t, now, walls=[3.0] * 5)
        seen.append(t.target)
    assert seen == [8, 16, 32] and t.signal == "grow"  # slow start: doubling
    now = _window(t, now, walls=[3.0] * 5, rate_limited=1)
    assert t.target == int(32 * CUT_ON_429) and not t.slow_start
    for _ in range(20):
        now = _window(t, now, walls=[3.0] * 5)
    assert t.target == 60 and t.signal == "capacity"  # then the ceiling, said so
    assert [c[1] for c in t.changes][4:7] == [23, 25, 28]  # an eighth, at least a step


def test_429s_cut_by_a_third_down_to_one_record_per_worker() -> None:
    t = Throttle(capacity=100, floor=4, step=4, target=60, slow_start=False)
    now = _window(t, 0.0, walls=[3.0] * 5)
    assert t.target == 67 and t.signal == "grow"
    now = _window(t, now, walls=[3.0] * 5, rate_limited=3)
    assert t.target == int(67 * CUT_ON_429) and t.signal == "429s" and "3 429s" in t.why
    for _ in range(50):
        now = _window(t, now, walls=[30.0] * 5, rate_limited=1)
    assert t.target == 4  # never below the floor (one record per worker)


def test_latency_that_rose_with_concurrency_and_falls_with_it_is_load_down_to_the_knee() -> None:
    t = Throttle(capacity=256, step=4, target=40, slow_start=False)
    now = _window(t, 0.0, walls=[2.0] * 8, in_flight=40)
    assert t.target == 45
    now = _window(t, now, walls=[4.0] * 8, in_flight=80)  # 2 x the baseline, at twice as many: a probe
    assert t.target == int(45 * CUT_ON_LATENCY) and t.signal == "latency" and "trying fewer" in t.why
    now = _window(t, now, walls=[3.0] * 8, in_flight=33)  # come down, not yet a window at that level
    assert t.target == 33 and "waiting for the records in flight" in t.why
    now = _window(t, now, walls=[2.0] * 8, in_flight=33)  # settled, and faster: load, and fewer still
    assert t.target == int(33 * CUT_ON_LATENCY) and "load; trying fewer still" in t.why
    now = _window(t, now, walls=[2.0] * 8, in_flight=24)
    now = _window(t, now, walls=[2.0] * 8, in_flight=24)  # no faster at fewer: the knee, back up one step
    assert t.target == 33 and "the knee" in t.why and not t.slow_start


def test_latency_that_stays_high_at_fewer_in_flight_is_the_works_and_the_cut_is_undone() -> None:
    t = Throttle(capacity=256, step=4, target=40, slow_start=False)
    now = _window(t, 0.0, walls=[1.0] * 8, in_flight=40)
    now = _window(t, now, walls=[2.0] * 8, in_flight=45)  # longer conversations: slower calls
    assert t.target == int(45 * CUT_ON_LATENCY) and t.signal == "latency"
    now = _window(t, now, walls=[2.1] * 8, in_flight=33)
    now = _window(t, now, walls=[2.1] * 8, in_flight=33)  # as slow with fewer, settled there: not load
    assert t.target == 45 and t.signal == "work"
    now = _window(t, now, walls=[2.2] * 8, in_flight=45)  # the baseline moved with the work: growth goes on
    assert t.target == 50 and t.signal == "grow"


def test_a_cut_is_judged_only_once_the_records_in_flight_came_down_to_it() -> None:
    t = Throttle(capacity=256, step=4, target=40, slow_start=False)
    now = _window(t, 0.0, walls=[1.0] * 8, in_flight=40)
    now = _window(t, now, walls=[2.0] * 8, in_flight=45)
    assert t.target == 33
    now = _window(t, now, walls=[2.0] * 8, in_flight=44)  # long records: still 44 out
    assert t.target == 33 and "waiting for the records in flight" in t.why


def test_latency_that_rises_without_more_in_flight_cuts_nothing() -> None:
    t = Throttle(capacity=256, step=4, target=40, slow_start=False)
    now = _window(t, 0.0, walls=[1.0] * 8, in_flight=40)
    t.target = 40  # as if held there (the budget binding, say)
    now = _window(t, now, walls=[3.0] * 8, in_flight=40)
    assert t.target == 45 and t.signal == "grow"


def test_call_times_from_the_budget_decide_over_the_records_own() -> None:
    times = {"m": Tally(0.0, 0, tuple([0.0] * timings.BUCKETS))}
    t = Throttle(capacity=256, step=4, target=40, slow_start=False, tally=lambda: dict(times))

    def calls(seconds: float, n: int) -> None:
        counts = list(times["m"].times)
        counts[timings.bucket(seconds)] += n
        times["m"] = Tally(0.0, times["m"].admitted + n, tuple(counts))

    t.observe(0.0, 40, True)
    calls(1.0, 50)
    for _ in range(8):
        t.result(9.0, 0)  # records' own times: long, and not what is judged
    assert t.observe(WINDOW_SECONDS + 0.1, 40, True) and t.baseline("m") is not None
    assert t.baseline("records") is None
    calls(1.05, 50)
    for _ in range(8):
        t.result(30.0, 0)
    assert t.observe(2 * WINDOW_SECONDS + 0.2, 45, True) and t.signal == "grow"


def test_a_budget_every_model_waits_in_holds_the_target_and_one_with_room_lets_it_grow() -> None:
    waited = {"anthropic": Tally(0.0, 0), "openai": Tally(0.0, 0)}
    t = Throttle(capacity=256, step=4, target=40, slow_start=False, round_trip=lambda: 2.0,
                 tally=lambda: dict(waited))
    t.observe(0.0, 40, True)
    waited.update(anthropic=Tally(30.0, 100), openai=Tally(40.0, 100))  # 0.3-0.4 s each: both bind
    for _ in range(5):
        t.result(2.0, 0, 1)
    assert not t.observe(6.1, 40, True) and t.target == 40 and t.signal == "budget"
    assert "anthropic, openai" in t.why
    waited.update(anthropic=Tally(60.0, 200), openai=Tally(40.5, 200))  # openai has room again
    for _ in range(5):
        t.result(2.0, 0, 1)
    assert t.observe(12.2, 40, True) and t.target == 45 and t.signal == "grow"


def test_it_does_not_grow_when_the_slots_were_not_full_or_work_ran_out() -> None:
    t = Throttle(capacity=50, step=5, target=20)
    _window(t, 0.0, walls=[2.0] * 5, in_flight=11)  # the target was not the limit: nothing learned
    assert t.target == 20
    _window(t, 20.0, walls=[2.0] * 5, pending=False)
    assert t.target == 20 and [c[1] for c in t.changes] == []


def test_the_first_window_starts_once_the_slots_are_full() -> None:
    t = Throttle(capacity=64, step=4)
    for now in range(0, 60, 5):  # workers booting: a minute with nothing in flight, then 3 of 8
        assert not t.observe(float(now), 0 if now < 50 else 3, True)
    t.observe(60.0, 8, True)  # full: the first window starts here, not at the first observation
    for _ in range(5):
        t.result(2.0, 0, 6)
    assert not t.observe(69.0, 8, True)
    assert t.observe(70.5, 8, True) and t.target == 16


def test_a_stray_429_among_many_calls_cuts_nothing_more_than_one_percent_does() -> None:
    t = Throttle(capacity=256, step=4, target=128, slow_start=False)
    now = 0.0
    t.observe(now, 128, True)
    for _ in range(100):  # 600 calls, 2 answered 429: the shared budget's pause absorbs them
        t.result(2.0, 0, 6)
    t.result(2.0, 2, 6)
    now += WINDOW_SECONDS + 0.1
    assert t.observe(now, 128, True) and t.target == 144
    for _ in range(20):  # 120 calls, 3 of them 429: more than 1 %
        t.result(2.0, 0, 6)
    t.result(2.0, 3, 6)
    assert t.observe(now + WINDOW_SECONDS + 0.1, 144, True)
    assert t.target == int(144 * CUT_ON_429) and "3 429s in 126 calls" in t.why


def test_a_window_lasts_a_few_round_trips_of_a_model_call_as_the_budget_times_them() -> None:
    rtt: list[float | None] = [None]
    t = Throttle(capacity=256, step=4, round_trip=lambda: rtt[0])
    t.observe(0.0, 8, True)  # nothing timed yet: the default window...
    assert not t.observe(1.0, 8, True)
    rtt[0] = 2.0  # ...until the first call is timed; in slow start a window is one round trip
    assert t.observe(SLOW_START_ROUNDS * 2.0 + 0.05, 8, True) and t.target == 16
    now = SLOW_START_ROUNDS * 2.0 + 0.05
    assert not t.observe(now + SLOW_START_ROUNDS * 2.0 - 0.05, 16, True)
    rtt[0] = 0.01  # a local model: never shorter than MIN_WINDOW_SECONDS (a window's length is set at its start)
    assert t.observe(now + SLOW_START_ROUNDS * 2.0 + 0.05, 16, True) and t.target == 32
    now += SLOW_START_ROUNDS * 2.0 + 0.05
    assert not t.observe(now + MIN_WINDOW_SECONDS - 0.05, 32, True)
    assert t.observe(now + MIN_WINDOW_SECONDS + 0.05, 32, True) and t.target == 64
    after = Throttle(capacity=256, step=4, round_trip=lambda: 0.5, slow_start=False)  # measured growth: ROUNDS
    after.observe(0.0, 8, True)
    assert not after.observe(ROUNDS * 0.5 - 0.05, 8, True) and after.observe(ROUNDS * 0.5 + 0.05, 8, True)
    fixed = Throttle(capacity=256, step=4, window=7.0, round_trip=lambda: 0.5)  # configured: as given
    fixed.observe(0.0, 8, True)
    assert not fixed.observe(6.9, 8, True) and fixed.observe(7.1, 8, True)
