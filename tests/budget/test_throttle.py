"""--concurrency auto: the throttle alone, fed windows of results as the supervisor would."""

from __future__ import annotations

from runner.budget.throttle import MIN_WINDOW_SECONDS, ROUNDS, WINDOW_SECONDS, Throttle


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


def test_it_doubles_then_adds_while_the_slots_are_full_and_nothing_goes_wrong_up_to_capacity() -> None:
    t = Throttle(capacity=40, floor=2, step=2)
    now, seen = 0.0, []
    for _ in range(3):
        now = _window(t, now, walls=[3.0] * 5)
        seen.append(t.target)
    assert seen == [8, 16, 32] and "no 429s" in t.why  # slow start: doubling
    now = _window(t, now, walls=[3.0] * 5, rate_limited=1)
    assert t.target == int(32 * 0.67) and not t.slow_start
    for _ in range(20):
        now = _window(t, now, walls=[3.0] * 5)
    assert t.target == 40  # additive after the first cut, then the ceiling
    assert [c[1] for c in t.changes][4:7] == [23, 25, 27]


def test_429s_cut_by_a_third_and_rising_latency_a_little() -> None:
    t = Throttle(capacity=100, floor=4, step=4, target=60, slow_start=False)
    now = _window(t, 0.0, walls=[3.0] * 5)
    assert t.target == 64 and t.best_median == 3.0
    now = _window(t, now, walls=[3.0] * 5, rate_limited=3)
    assert t.target == int(64 * 0.67) and "429s" in t.why
    now = _window(t, now, walls=[5.0] * 5)
    assert t.target == int(int(64 * 0.67) * 0.85) and "latency 5.00s" in t.why
    for _ in range(50):
        now = _window(t, now, walls=[30.0] * 5, rate_limited=1)
    assert t.target == 4  # never below the floor (one record per worker)


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
    assert t.observe(now, 128, True) and t.target == 132
    for _ in range(20):  # 120 calls, 3 of them 429: more than 1 %
        t.result(2.0, 0, 6)
    t.result(2.0, 3, 6)
    assert t.observe(now + WINDOW_SECONDS + 0.1, 132, True)
    assert t.target == int(132 * 0.67) and "3 429s in 126 calls" in t.why


def test_a_window_lasts_a_few_round_trips_of_a_model_call_as_the_budget_times_them() -> None:
    rtt: list[float | None] = [None]
    t = Throttle(capacity=256, step=4, round_trip=lambda: rtt[0])
    t.observe(0.0, 8, True)  # nothing timed yet: the default window...
    assert not t.observe(1.0, 8, True)
    rtt[0] = 0.5  # ...until the first call is timed (200 ms calls waited 10 s, 50 round trips, per doubling)
    assert t.observe(ROUNDS * 0.5 + 0.05, 8, True) and t.target == 16
    now = ROUNDS * 0.5 + 0.05
    assert not t.observe(now + ROUNDS * 0.5 - 0.05, 16, True)
    rtt[0] = 0.01  # a local model: never shorter than MIN_WINDOW_SECONDS (a window's length is set at its start)
    assert t.observe(now + ROUNDS * 0.5 + 0.05, 16, True) and t.target == 32
    now += ROUNDS * 0.5 + 0.05
    assert not t.observe(now + MIN_WINDOW_SECONDS - 0.05, 32, True)
    assert t.observe(now + MIN_WINDOW_SECONDS + 0.05, 32, True) and t.target == 64
    fixed = Throttle(capacity=256, step=4, window=7.0, round_trip=lambda: 0.5)  # configured: as given
    fixed.observe(0.0, 8, True)
    assert not fixed.observe(6.9, 8, True) and fixed.observe(7.1, 8, True)
