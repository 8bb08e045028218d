"""The supervisor and its pool on a fake transport: no processes, no sandboxes, a fake clock. What took
35-100 s subprocess runs to check (the restart cap, heartbeat and overdue kills, the second Ctrl-C, the
requeue of a dead worker's slots) runs here in milliseconds, as pytest-xdist tests its scheduler."""

from __future__ import annotations

import io
import os
import signal
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import runner.engine.dispatch as dispatch_module
import runner.engine.pool as pool_module
import runner.engine.supervisor as supervisor_module
from runner.config import Config
from runner.engine.pool import WorkerPool, restart_cap
from runner.engine.progress import Progress, RunProgress
from runner.engine.scheduler import Scheduler
from runner.engine.settings import engine_settings
from runner.engine.supervisor import Supervisor
from runner.harness import reading, record_source
from runner.harness.settings import harness_settings
from runner.plan import WorkItem
from runner.results.result import Result
from runner.results.sink import ResultSink, read_results
from runner.sandbox.settings import sandbox_settings
from runner.wire.messages import Assign, Heartbeat, ItemDone, SlotReady, Stop, WorkerReady
from runner.worker.main import WorkerSpec
from runner.worker.settings import slot_settings


class Clock:
    """time.monotonic for the pool and the supervisor: moves only when the inbox waits."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class FakeInbox:
    def __init__(self, clock: Clock) -> None:
        self.clock, self.messages, self.idle = clock, deque[Any](), list[Callable[[], None]]()

    def put(self, msg: Any) -> None:
        self.messages.append(msg)

    def get(self, timeout: float) -> Any:
        if not self.messages and timeout > 0:
            self.clock.now += timeout  # nothing waiting: the wait's time passes
            for hook in self.idle:  # what workers do meanwhile: beat, say
                hook()
        return self.messages.popleft() if self.messages else None

    def close(self) -> None:
        pass


class FakeLink:
    """One fake worker: `behaviour` answers what the supervisor sends it."""

    def __init__(self, wid: int, slots: int, behaviour: Behaviour) -> None:
        self.wid, self.slots, self.behaviour = wid, slots, behaviour
        self.code: int | None = None
        self.sent: list[Any] = []
        self.aborted = False

    @property
    def exitcode(self) -> int | None:
        return self.code

    def send(self, msg: Any) -> None:
        self.sent.append(msg)
        self.behaviour.on_message(self, msg)

    def abort(self) -> None:  # never blocks: a fake worker dies at once
        self.aborted = True
        self.code = -signal.SIGKILL

    def join(self, timeout: float) -> None:
        pass

    def terminate(self) -> None:
        if self.code is None:
            self.code = -signal.SIGTERM

    def kill(self) -> None:
        if self.code is None:
            self.code = -signal.SIGKILL


class Behaviour:
    """A well-behaved worker: ready at once, every record a success at once, exits on Stop."""

    def __init__(self) -> None:
        self.inbox: FakeInbox | None = None

    def on_start(self, link: FakeLink) -> None:
        assert self.inbox is not None
        self.inbox.put(WorkerReady(link.wid, f"sb-{link.wid}", "fake", 0.1))
        for n in range(1, link.slots):  # its other slots' databases made
            self.inbox.put(SlotReady(link.wid, n))

    def on_message(self, link: FakeLink, msg: Any) -> None:
        assert self.inbox is not None
        if isinstance(msg, Stop):
            link.code = 0
        elif isinstance(msg, Assign):
            for job in msg.jobs:
                self.inbox.put(done(link.wid, job.item_id, job.run, job.record_id, job.index, job.attempt))


def done(worker: int, item_id: int, run: str, record_id: str, index: int, attempt: int) -> ItemDone:
    r = Result(run=run, record_id=record_id, index=index, item_id=item_id, attempt=attempt, worker=worker,
               status="ok", success=True, started_at="t", finished_at="t")
    return ItemDone(worker, item_id, r.to_json())


class FakeTransport:
    def __init__(self, inbox: FakeInbox, behaviours: Callable[[int], Behaviour]) -> None:
        self.inbox, self.behaviours = inbox, behaviours
        self.links: list[FakeLink] = []

    def start(self, spec: WorkerSpec, limiter: Any) -> FakeLink:
        b = self.behaviours(spec.worker)
        b.inbox = self.inbox
        link = FakeLink(spec.worker, spec.slots, b)
        self.links.append(link)
        b.on_start(link)
        return link


def _supervisor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, behaviours: Callable[[int], Behaviour], *,
                records: int = 6, workers: int = 2, slots: int = 1, spawnable: Callable[[int], bool] | None = None,
                **cfg: Any) -> tuple[Supervisor, FakeTransport]:
    clock = Clock()
    monkeypatch.setattr(pool_module, "time", clock)
    monkeypatch.setattr(supervisor_module, "time", clock)
    monkeypatch.setattr(dispatch_module, "time", clock)
    config = Config.model_validate({"dataset": "x.jsonl", "harness": {"kind": "python", "entrypoint": "m:f"},
                                    "runs": [{"name": "r"}], "heartbeat_timeout_seconds": 30,
                                    "conversation_timeout_seconds": 60, "shutdown_grace_seconds": 30, **cfg})
    inbox = FakeInbox(clock)
    transport = FakeTransport(inbox, behaviours)

    def make_spec(wid: int) -> WorkerSpec:
        sandbox = sandbox_settings(config, None, kind="fake", image=None, run_id="run", owner_pid=1,  # type: ignore[arg-type]
                                   slots=slots)
        return WorkerSpec(wid, record_source(config), sandbox,
                          slot_settings(config), harness_settings(config), reading(config), None, str(tmp_path),
                          str(tmp_path))

    pool = WorkerPool(transport, make_spec, None, heartbeat_timeout=config.heartbeat_timeout_seconds,
                      max_restarts=restart_cap(config.max_worker_restarts, workers), spawnable=spawnable)
    items = [WorkItem(i, "r", f"rec-{i}", i) for i in range(records)]
    progress = Progress({"r": RunProgress(records)}, Console(file=io.StringIO()))
    scheduler = Scheduler(items, max_attempts=config.max_attempts)
    sup = Supervisor(engine_settings(config), scheduler, pool, ResultSink(tmp_path, ["r"]), progress,
                     inbox, workers=workers)  # type: ignore[arg-type]
    return sup, transport


def _results(tmp_path: Path) -> list[Result]:
    return read_results(tmp_path / "results" / "r.jsonl")


def test_every_record_exactly_once_and_every_worker_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sup, transport = _supervisor(tmp_path, monkeypatch, lambda wid: Behaviour(), records=10, workers=3)
    sup.run()
    assert sorted(r.record_id for r in _results(tmp_path)) == sorted(f"rec-{i}" for i in range(10))
    assert sup.error is None and not sup.interrupted
    assert all(isinstance(link.sent[-1], Stop) and link.code == 0 for link in transport.links)


def test_a_worker_whose_sandbox_is_still_launching_holds_up_neither_the_loop_nor_the_others(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker 1's spec waits on its sandbox's launch: worker 0 gets records meanwhile, and start-up is over
    only once worker 1 is ready too."""
    done: list[int] = []
    sup, transport = _supervisor(tmp_path, monkeypatch, lambda wid: Behaviour(), records=10, workers=2,
                                 spawnable=lambda wid: len(_results(tmp_path)) >= 3)
    sup.on_booted = lambda: done.append(len(_results(tmp_path)))
    sup.run()
    results = _results(tmp_path)
    assert sorted(r.record_id for r in results) == sorted(f"rec-{i}" for i in range(10))
    assert [r.worker for r in results[:3]] == [0, 0, 0]
    assert len(transport.links) == 2 and done and done[0] >= 3  # spawned late, and waited for all the same


def test_on_done_runs_once_when_the_last_result_lands_and_not_when_the_run_stops_short(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The results' last rewrite starts while the workers shut down, with every result in: once, and never
    for a run stopped before its end (its end finalizes what there is)."""
    for stops in (False, True):
        out = tmp_path / str(stops)
        sup, _ = _supervisor(out, monkeypatch, lambda wid: Behaviour(), records=10, workers=3)
        seen: list[int] = []
        sup.on_done = lambda: seen.append(len(_results(out)))  # noqa: B023 - run inside this iteration
        if stops:
            sup.fail("stopped from outside")
        sup.run()
        assert seen == ([] if stops else [10])


class DiesAtOnce(Behaviour):
    def on_start(self, link: FakeLink) -> None:
        link.code = 1  # a harness that crashes its worker before it is ready


def test_workers_that_keep_dying_stop_the_run_at_the_restart_cap(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    sup, transport = _supervisor(tmp_path, monkeypatch, lambda wid: DiesAtOnce(), workers=2, max_worker_restarts=5)
    sup.run()
    assert sup.error is not None and "max_worker_restarts 5" in sup.error
    assert len(transport.links) == 2 + 5  # the first two, then a replacement per death up to the cap


class Silent(Behaviour):
    """Ready, takes its first chunk, then never beats nor answers again (a worker frozen in C)."""

    def on_message(self, link: FakeLink, msg: Any) -> None:
        if isinstance(msg, Stop):
            link.code = 0


def test_a_worker_that_stops_beating_is_killed_and_its_record_runs_elsewhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sup, transport = _supervisor(tmp_path, monkeypatch, lambda wid: Silent() if wid == 0 else Behaviour(),
                                 records=4, workers=2)
    sup.run()
    first = transport.links[0]
    assert first.aborted  # killed for its stale heartbeat (30 s of fake time), not waited for
    results = {r.record_id: r for r in _results(tmp_path)}
    assert len(results) == 4 and all(r.ok for r in results.values())
    held = first.sent[0].jobs[0].record_id
    assert results[held].attempt == 2 and results[held].worker != 0


class BeatsButNeverFinishes(Behaviour):
    """Beats every time the clock moves, but its record never ends (stuck where its alarm cannot reach)."""

    def on_start(self, link: FakeLink) -> None:
        super().on_start(link)
        assert self.inbox is not None
        inbox, last = self.inbox, [self.inbox.clock.now]

        def beat() -> None:  # every 2 s of the clock, as a worker's heartbeat thread does
            if link.code is None and inbox.clock.now - last[0] >= 2.0:
                last[0] = inbox.clock.now
                inbox.put(Heartbeat(link.wid, None, 50.0, 1.0))

        inbox.idle.append(beat)

    def on_message(self, link: FakeLink, msg: Any) -> None:
        if isinstance(msg, Stop):
            link.code = 0


def test_a_worker_holding_a_record_past_its_time_is_killed_as_overdue(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sup, transport = _supervisor(tmp_path, monkeypatch,
                                 lambda wid: BeatsButNeverFinishes() if wid == 0 else Behaviour(), records=3)
    sup.run()
    assert transport.links[0].aborted
    results = _results(tmp_path)
    assert len(results) == 3 and all(r.ok for r in results)


class HoldsThenDies(Behaviour):
    """Takes a chunk on each of its slots, then dies with all of them in flight."""

    def on_message(self, link: FakeLink, msg: Any) -> None:
        if isinstance(msg, Assign) and sum(isinstance(m, Assign) for m in link.sent) == link.slots:
            link.code = -signal.SIGKILL


def test_a_dead_worker_s_slots_all_go_back_in_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sup, transport = _supervisor(tmp_path, monkeypatch, lambda wid: HoldsThenDies() if wid == 0 else Behaviour(),
                                 records=8, workers=1, slots=3)
    sup.run()
    lost = [m.jobs[0].record_id for m in transport.links[0].sent if isinstance(m, Assign)]
    assert len(lost) == 3
    results = {r.record_id: r for r in _results(tmp_path)}
    assert len(results) == 8 and all(results[rid].attempt == 2 for rid in lost)
    assert sup.pool.restarts == 1 and sup.error is None


class CtrlCTwice(Behaviour):
    """Never finishes; the user presses Ctrl-C twice while its records run."""

    def __init__(self, sup: list[Supervisor]) -> None:
        super().__init__()
        self.sup = sup

    def on_message(self, link: FakeLink, msg: Any) -> None:
        if isinstance(msg, Assign):
            self.sup[0].signals.note(signal.SIGINT)
            self.sup[0].signals.note(signal.SIGINT)


def test_a_second_ctrl_c_stops_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    holder: list[Supervisor] = []
    sup, transport = _supervisor(tmp_path, monkeypatch, lambda wid: CtrlCTwice(holder), records=4, workers=1)
    holder.append(sup)
    start = supervisor_module.time.monotonic()
    sup.run()
    assert sup.hard_stop and sup.interrupted
    assert supervisor_module.time.monotonic() - start < 5  # not the 30 s grace: the second Ctrl-C ends it
    assert _results(tmp_path) == [] and transport.links[0].code is not None  # terminated, not left running


class CtrlCOnceStillWorking(Behaviour):
    """Beats on, its record never done; the user presses Ctrl-C once while it runs."""

    def __init__(self, sup: list[Supervisor]) -> None:
        super().__init__()
        self.sup = sup

    def on_start(self, link: FakeLink) -> None:
        super().on_start(link)
        assert self.inbox is not None
        inbox = self.inbox
        inbox.idle.append(lambda: inbox.put(Heartbeat(link.wid, 0, 100.0, 1.0)) if link.code is None else None)

    def on_message(self, link: FakeLink, msg: Any) -> None:
        if isinstance(msg, Assign):
            self.sup[0].signals.note(signal.SIGINT)


def test_at_the_grace_periods_end_the_records_still_running_are_not_waited_for_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, "grace period over; stopping workers now" was followed by the pool's stop, which waited up to
    10 s more for the same records to finish before it terminated the workers."""
    holder: list[Supervisor] = []
    sup, transport = _supervisor(tmp_path, monkeypatch, lambda wid: CtrlCOnceStillWorking(holder), records=4,
                                 workers=1, shutdown_grace_seconds=5)
    holder.append(sup)
    start = supervisor_module.time.monotonic()
    sup.run()
    took = supervisor_module.time.monotonic() - start
    assert sup.interrupted and transport.links[0].code == -signal.SIGTERM  # terminated: it would not stop
    assert 5 <= took < 5 + pool_module.STOP_WAIT_SECONDS / 2, took


class SlowToStop(Behaviour):
    """Holds its first record; told to stop, it sends that record's result 1.5 s later and would take 20 s more to
    exit (a harness finishing its turn). The user presses Ctrl-C (a real SIGINT) twice meanwhile."""

    def __init__(self, handlers: list[Any]) -> None:
        super().__init__()
        self.handlers = handlers

    def on_message(self, link: FakeLink, msg: Any) -> None:
        assert self.inbox is not None
        inbox = self.inbox
        if isinstance(msg, Assign) and not any(isinstance(m, Assign) for m in link.sent[:-1]):
            os.kill(os.getpid(), signal.SIGINT)  # the first Ctrl-C: finish what runs, within the grace period
        elif isinstance(msg, Stop) and not any(isinstance(m, Stop) for m in link.sent[:-1]):
            job = next(m for m in link.sent if isinstance(m, Assign)).jobs[0]
            stop_at, pressed = inbox.clock.now, []

            def later() -> None:
                if inbox.clock.now >= stop_at + 1.5 and not pressed:
                    pressed.append(inbox.clock.now)
                    inbox.put(done(link.wid, job.item_id, job.run, job.record_id, job.index, job.attempt))
                    self.handlers.append(signal.getsignal(signal.SIGINT))  # still the supervisor's own
                    for _ in range(2):  # a Ctrl-C twice while the pool waits for the worker to exit
                        os.kill(os.getpid(), signal.SIGINT)
                if inbox.clock.now >= stop_at + 20 and link.code is None:
                    link.code = 0

            inbox.idle.append(later)


def test_ctrl_c_twice_during_the_workers_shutdown_keeps_their_results_and_stops_them_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, the handlers were restored before the pool's shutdown (up to 10 s): a Ctrl-C there raised
    KeyboardInterrupt out of the supervisor, and the result sent meanwhile was lost with everything after it."""
    handlers: list[Any] = []
    sup, transport = _supervisor(tmp_path, monkeypatch, lambda wid: SlowToStop(handlers), records=3, workers=1,
                                 shutdown_grace_seconds=1)
    before = signal.getsignal(signal.SIGINT)
    start = supervisor_module.time.monotonic()
    sup.run()  # no KeyboardInterrupt
    assert handlers and handlers[0] not in (before, signal.default_int_handler)
    assert signal.getsignal(signal.SIGINT) is before  # restored once every worker is gone
    held = next(m for m in transport.links[0].sent if isinstance(m, Assign)).jobs[0].record_id
    assert [r.record_id for r in _results(tmp_path)] == [held]  # sent during the shutdown, recorded
    assert sup.hard_stop and sup.interrupted and transport.links[0].code is not None
    assert supervisor_module.time.monotonic() - start < 5  # the second Ctrl-C cut the 10 s wait short


class SlowToDie(Silent):
    """A stuck worker that takes a while to die once killed (SIGABRT ignored, SIGKILL seconds later)."""

    def on_start(self, link: FakeLink) -> None:
        super().on_start(link)
        assert self.inbox is not None
        inbox = self.inbox

        def abort() -> None:  # returns at once, as the pool's kill must; the exit shows 5 s later
            link.aborted = True
            dies_at = inbox.clock.now + 5.0
            inbox.idle.append(lambda: setattr(link, "code", -signal.SIGKILL) if inbox.clock.now >= dies_at
                              and link.code is None else None)

        link.abort = abort  # type: ignore[method-assign]


def test_killing_a_stuck_worker_never_holds_up_the_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, the pool's kill joined the stuck process for up to 10 s inside the loop: no Ctrl-C seen, no
    other worker's result recorded meanwhile. Now the kill returns at once and the worker is reaped (its
    record requeued) when its exit shows."""
    sup, transport = _supervisor(tmp_path, monkeypatch, lambda wid: SlowToDie() if wid == 0 else Behaviour(),
                                 records=5, workers=2)
    sup.run()
    assert transport.links[0].aborted and transport.links[0].code == -signal.SIGKILL
    results = {r.record_id: r for r in _results(tmp_path)}
    assert len(results) == 5 and all(r.ok for r in results.values()) and sup.error is None


def _stuck_in_c(ready: Any) -> None:
    import time

    signal.signal(signal.SIGABRT, signal.SIG_IGN)  # as a process stuck where no handler runs
    ready.set()
    time.sleep(60)


def test_a_process_link_s_abort_returns_at_once_and_kills_later() -> None:
    import multiprocess as mp

    from runner.engine.pool import KILL_WAIT_SECONDS, ProcessLink

    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=_stuck_in_c, args=(ready,))
    proc.start()
    assert ready.wait(60)
    link = ProcessLink(proc, None)
    try:
        import time

        t0 = time.monotonic()
        link.abort()
        assert time.monotonic() - t0 < KILL_WAIT_SECONDS / 2  # it did not wait for the process
        proc.join(KILL_WAIT_SECONDS + 30)
        assert link.exitcode == -signal.SIGKILL  # SIGABRT ignored: killed once the wait was over
    finally:
        proc.kill()
