"""The slot clock: a time limit cut into a thread's Python code, never into the runner's."""

from __future__ import annotations

import threading
import time

from runner.slot import Alarm, WatchedClock


def _watch(clock: WatchedClock, stop: threading.Event) -> None:
    while not stop.is_set():
        clock.check(time.monotonic())
        time.sleep(0.01)


def test_a_thread_over_its_limit_takes_alarm_and_its_queries_are_cancelled() -> None:
    cancelled = threading.Event()
    clock = WatchedClock(cancelled.set)
    got: list[str] = []

    def slot() -> None:
        clock.start(0.2)
        try:
            with clock.running():
                while True:  # harness code that never returns by itself
                    sum(range(1000))
        except Alarm:
            got.append("alarm")
        finally:
            clock.stop()

    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(clock, stop))
    watcher.start()
    t = threading.Thread(target=slot)
    t0 = time.monotonic()
    t.start()
    t.join(5)
    stop.set()
    watcher.join()
    assert got == ["alarm"] and cancelled.is_set() and time.monotonic() - t0 < 2


def test_outside_the_harness_the_clock_never_cuts() -> None:
    clock = WatchedClock(lambda: None)
    done: list[str] = []

    def slot() -> None:
        clock.start(0.05)
        with clock.running():
            pass  # the harness returned in time
        time.sleep(0.3)  # the runner's own work past the deadline: sending results, say
        sum(range(100000))
        done.append("finished")

    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(clock, stop))
    watcher.start()
    t = threading.Thread(target=slot)
    t.start()
    t.join(5)
    stop.set()
    watcher.join()
    assert done == ["finished"]


def test_a_thread_stuck_in_a_c_call_is_reported_stuck() -> None:
    clock = WatchedClock(lambda: None)
    entered = threading.Event()

    def slot() -> None:
        clock.start(0.05)
        try:
            with clock.running():
                entered.set()
                time.sleep(1.0)  # a C call: the Alarm waits until it returns
        except Alarm:
            pass

    t = threading.Thread(target=slot, daemon=True)
    t.start()
    entered.wait(2)
    time.sleep(0.1)
    assert clock.check(time.monotonic()) is True
    assert not clock.stuck(time.monotonic(), grace=5.0)
    assert clock.stuck(time.monotonic() + 6.0, grace=5.0)
    t.join(3)
    assert not clock.stuck(time.monotonic() + 6.0, grace=5.0)  # it took the Alarm on its way out
