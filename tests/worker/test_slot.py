"""The slot clock: a time limit cut into a thread's Python code, never into the runner's."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from runner.config import Config
from runner.harness import reading
from runner.harness.base import Outcome, SandboxInfo
from runner.interrupts import Alarm
from runner.records import Record
from runner.sandbox.witness import Incarnation
from runner.wire.messages import Job
from runner.worker.clock import AlarmClock, WatchedClock
from runner.worker.settings import slot_settings
from runner.worker.slot import Slot
from runner.worker.turns import Turns


class _Keeper:
    """What every fake keeper here has: turns, a tidy that finds nothing, a server that starves nobody."""

    generation = 1

    def __init__(self) -> None:
        self.turns = Turns()
        self.tidied: list[int] = []

    def tidy(self, slot: int, seen: int) -> None:
        self.tidied.append(slot)

    def starved(self, slot: int, since: float, until: float) -> str | None:
        return None


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


def test_an_alarm_that_fires_as_soon_as_it_is_armed_still_cuts_the_harness(monkeypatch: pytest.MonkeyPatch) -> None:
    """The timer is armed for what is left of the deadline; when little is left it can fire before the
    next line runs. Before, the clock armed the timer and then marked the harness as running: such an alarm
    found no mark, was let go, and the record ran on unbounded (1 in 3,000 deadlines idle, 21 under load).
    Here the timer delivers its signal at once, as a near deadline does."""
    clock = AlarmClock()
    clock.install()
    armed = signal.setitimer

    def at_once(which: int, seconds: float, interval: float = 0.0) -> tuple[float, float]:
        old = armed(which, 0)
        if seconds > 0:
            os.kill(os.getpid(), signal.SIGALRM)  # handled before setitimer's caller runs its next line
        return old

    monkeypatch.setattr(signal, "setitimer", at_once)
    try:
        clock.start(0.5)
        with pytest.raises(Alarm), clock.running():
            time.sleep(1.0)  # the harness: it must be cut, not finish
        clock.start(0.0)  # a deadline already past when the harness's next stretch begins
        with pytest.raises(Alarm), clock.running():
            pass
    finally:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)


def _slot(keeper: Any, harness: Any, record_ids: tuple[str, ...] = ("a",)) -> Slot:
    """A slot over stand-ins for its worker's keeper and harness (python kind, success field `ok`)."""
    cfg = Config.model_validate({"dataset": "x.jsonl", "harness": {"kind": "python", "entrypoint": "m:f"},
                                 "runs": [{"name": "r"}], "success_field": "ok"})
    host = SimpleNamespace(slot_settings=slot_settings(cfg), worker_id=0, gateway_url=None, gateway_token=None,
                           inbox=None, keeper=keeper,
                           reading=reading(cfg),
                           discard=lambda job, why, lost="sandbox_lost": None,
                           records={r: Record(r, n, {"id": r}) for n, r in enumerate(record_ids)})
    return Slot(0, host, harness)


class _Harness:
    """Reports `ok` per record id as told, the way a harness that swallows its errors would."""

    info = SimpleNamespace(caller="0")
    counts_own_calls = False

    def __init__(self, ok: Callable[[str], bool]) -> None:
        self.ok, self.attached = ok, list[str]()

    def attach(self, sb: SandboxInfo) -> None:
        self.attached.append(sb.id)

    def detach(self) -> None:
        pass

    def run(self, tasks: list[Any]) -> Any:
        for t in tasks:
            yield t, Outcome({"ok": self.ok(t.record_id)})


def test_a_sandbox_replaced_between_a_slots_attach_and_its_check_is_attached_to_before_a_record_runs() -> None:
    """Another slot replaces the sandbox after this one attached but before it asks the witness: the
    witness then answers for the new sandbox while this slot's harness still points at the old, dead one.
    A harness that swallows errors would report a failure there that the before/after check could not see;
    the slot attaches to the new sandbox first, so its record runs where the check looked."""

    class Keeper(_Keeper):
        generation = 1

        def slot_info(self, slot: int) -> SandboxInfo:
            return SandboxInfo(f"sb{self.generation}", {}, "main")

        def incarnation(self, slot: int, *, failed: bool = False) -> tuple[int, Incarnation]:
            self.generation = 2  # replaced by another slot just now (from the first ask on)
            return self.generation, Incarnation("started", "main")

        def sandbox_id(self) -> str:
            return f"sb{self.generation}"

    harness = _Harness(lambda _id: False)
    harness.ok = lambda _id: harness.attached[-1] == "sb2"
    slot = _slot(Keeper(), harness)
    slot.attach()
    assert harness.attached == ["sb1"]
    (_job, result), = slot.handle((Job(1, "r", "a", 0, 1),), AlarmClock())
    assert harness.attached == ["sb1", "sb2"] and result.success is True


def test_only_a_failed_record_is_checked_through_the_postmaster() -> None:
    """A failure may be the first sign of a death that has not reached the witness's own session yet, so
    its check also asks the postmaster (witness.py); a success's answers all arrived and needs no more."""
    asked: list[bool] = []

    class Keeper(_Keeper):
        generation = 1

        def slot_info(self, slot: int) -> SandboxInfo:
            return SandboxInfo("sb1", {}, "main")

        def incarnation(self, slot: int, *, failed: bool = False) -> tuple[int, Incarnation]:
            asked.append(failed)
            return 1, Incarnation("started", "main")

        def sandbox_id(self) -> str:
            return "sb1"

    slot = _slot(Keeper(), _Harness(lambda rid: rid == "good"), ("good", "bad"))
    slot.attach()
    for n, rid in enumerate(("good", "bad")):
        (_job, result), = slot.handle((Job(n, "r", rid, n, 1),), AlarmClock())
        assert result.success is (rid == "good")
    assert asked == [False, False, False, True]  # before and after each: only after the failure


def test_a_failure_that_met_the_server_out_of_a_shared_resource_runs_again_alone() -> None:
    """A record that failed while its sessions met a class-53 error (a neighbour filled the lock table) is not
    trusted: run again, alone (no other slot runs meanwhile), its second result is its own; the slot is tidied
    after each pass."""
    alone: list[bool] = []

    class Keeper(_Keeper):
        def slot_info(self, slot: int) -> SandboxInfo:
            return SandboxInfo("sb1", {}, "main")

        def incarnation(self, slot: int, *, failed: bool = False) -> tuple[int, Incarnation]:
            alone.append(self.turns._alone)
            return 1, Incarnation("started", "main")

        def starved(self, slot: int, since: float, until: float) -> str | None:
            return "53200 out of shared memory" if not self.turns._alone else None

        def sandbox_id(self) -> str:
            return "sb1"

    tries: list[int] = []
    harness = _Harness(lambda rid: len(tries) > 1)
    run = harness.run

    def counted(tasks: list[Any]) -> Any:
        tries.append(1)
        return run(tasks)

    harness.run = counted  # type: ignore[method-assign]
    keeper = Keeper()
    slot = _slot(keeper, harness)
    slot.attach()
    (job, result), = slot.handle((Job(1, "r", "a", 0, 1),), AlarmClock())
    assert len(tries) == 2 and result.success is True and job.attempt == 2
    assert result.discarded == ["sandbox_lost: attempt 1"]
    assert alone == [False, False, True, True] and keeper.tidied == [0, 0]
