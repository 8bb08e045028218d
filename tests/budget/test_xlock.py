"""The cross-process lock: never refused as a deadlock that is not one (threads of one process hold and wait
for two locks while another process holds one of them)."""

from __future__ import annotations

import threading
import time

import multiprocess as mp

from runner.budget.xlock import ProcessLock


def _other(a: ProcessLock, b: ProcessLock, holding_b: object, done: object) -> None:
    with b.held():
        holding_b.set()  # type: ignore[attr-defined]
        with a.held():  # waits for the first process's thread, which lets go of `a` by itself
            pass
    done.set()  # type: ignore[attr-defined]


def test_two_locks_held_and_awaited_by_threads_of_two_processes_are_no_deadlock() -> None:
    """Process 1: thread x holds A for a moment; thread y asks for B. Process 2 holds B and asks for A. To the
    kernel's POSIX-lock deadlock detection (which sees processes) that is a cycle, and lockf refused y's
    request with EDEADLK; it is not one: x lets go of A, process 2 finishes, y gets B."""
    a, b = ProcessLock(), ProcessLock()
    ctx = mp.get_context("spawn")
    holding_b, done = ctx.Event(), ctx.Event()
    errors: list[BaseException] = []
    with a.held():
        other = ctx.Process(target=_other, args=(a, b, holding_b, done))
        other.start()
        assert holding_b.wait(30)
        time.sleep(0.3)  # process 2 now waits for A, which this process holds

        def want_b() -> None:
            try:
                with b.held():
                    pass
            except OSError as e:
                errors.append(e)
        y = threading.Thread(target=want_b)
        y.start()
        time.sleep(0.3)  # y waits for B (or was refused)
    y.join(30)
    other.join(30)
    assert errors == [] and done.is_set() and other.exitcode == 0


def _two_threads_on_fresh_locks(n: int) -> int:
    """In a process of its own: for each of n fresh locks, two threads enter at once; how many locks let
    both in together."""
    both = 0
    for _ in range(n):
        lock = ProcessLock()
        inside = [0]
        peak = [0]
        start = threading.Barrier(2)

        def enter(lock: ProcessLock = lock, inside: list[int] = inside, peak: list[int] = peak,
                  start: threading.Barrier = start) -> None:
            start.wait()
            with lock.held():
                inside[0] += 1
                peak[0] = max(peak[0], inside[0])
                time.sleep(0.002)
                inside[0] -= 1

        threads = [threading.Thread(target=enter) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        both += peak[0] > 1
    return both


def test_two_threads_on_a_fresh_lock_in_a_spawned_process_are_never_both_inside() -> None:
    """The first use in a process made its thread lock then: a thread already inside held the old one while
    the other took the new one (two inside at once in 65 and 122 of 200 fresh locks)."""
    with mp.get_context("spawn").Pool(1) as pool:
        assert pool.apply(_two_threads_on_fresh_locks, (200,)) == 0
