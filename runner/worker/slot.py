"""A slot: one record at a time, on its own databases of the worker's sandbox, through its own harness.

A worker has K slots. With K = 1 the one slot runs in the worker's main thread and its time limit is
SIGALRM, as it always was. With K > 1 each slot is a thread (harness code blocks: on the database,
on the model's API), its databases are copies made from the sandbox's at boot, and its time limit is
watched by the worker's main thread, which raises the same exception in the slot's thread and
cancels the slot's queries so a thread blocked in the database returns to take it. Results go to
the supervisor from whichever thread has them (the outbox is thread-safe).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any, Protocol

import psycopg
from loguru import logger

from runner.errors import ErrorKind, RunStopped, SlotProcessDied, WorkerClosing
from runner.harness import Reading, build_result
from runner.harness.base import Harness, SandboxInfo, Task
from runner.interrupts import Alarm
from runner.models.base import trial
from runner.records import RecordFile
from runner.results.result import Result, Usage, error_result, now_iso, outcome
from runner.sandbox.witness import Incarnation
from runner.wire.messages import Assign, ItemDone, Job, SlotReady
from runner.worker.clock import Clock, WatchedClock
from runner.worker.settings import SlotSettings
from runner.worker.slot_gateway import SlotGateway
from runner.worker.turns import Turns

# Which record each slot of this process runs now: marks what the harness prints in the worker's log.
running: dict[int, str] = {}


def _succeeded(r: Result) -> bool:
    """A failure may be the first sign of a sandbox's death: its check also asks the postmaster
    (witness.py)."""
    return outcome(r) == "success"


# A command harness enforces its own limit per chunk; the alarm is the backstop a little later.
ALARM_SLACK_SECONDS = 5.0


class Keeper(Protocol):
    """What a slot needs of the sandbox its worker keeps (runner/worker/keeper.py): replaced under it."""

    generation: int
    turns: Turns

    def slot_info(self, slot: int) -> SandboxInfo: ...
    def sandbox_id(self) -> str | None: ...
    def sandbox_dead(self) -> bool: ...
    def incarnation(self, slot: int, *, failed: bool = False) -> tuple[int, Incarnation] | None: ...
    def replace_sandbox(self, why: str, seen: int) -> None: ...
    def reset_slot(self, slot: int) -> None: ...
    def tidy(self, slot: int, seen: int) -> None: ...
    def starved(self, slot: int, since: float, until: float) -> str | None: ...
    def wait_copied(self, slot: int) -> None: ...


class Host(Protocol):
    """What a slot needs of its worker: its settings, its sandbox's keeper, records, the outbox."""

    slot_settings: SlotSettings
    worker_id: int
    gateway_url: str | None
    gateway_token: str | None
    records: RecordFile
    reading: Reading
    inbox: Any
    keeper: Keeper

    def discard(self, job: Job, reason: str, lost: str = "sandbox_lost") -> None: ...


class Slot:
    def __init__(self, n: int, host: Host, harness: Harness) -> None:
        self.n, self.host, self.harness, self.settings = n, host, harness, host.slot_settings
        self.generation = 0  # the sandbox generation the harness is attached to
        self.gateway = SlotGateway(host.gateway_url, host.gateway_token, harness.info.caller)
        self.abandoned = False  # stuck where its Alarm cannot reach: whatever it finishes is not sent

    # ------------------------------------------------------------------ the sandbox
    def attach(self) -> None:
        """Attach the harness to the worker's current sandbox (this slot's databases there)."""
        if self.generation:
            with contextlib.suppress(Exception):
                self.harness.detach()
        generation = self.host.keeper.generation
        self.harness.attach(self.host.keeper.slot_info(self.n))
        self.generation = generation

    def reconnect(self) -> None:
        with contextlib.suppress(Exception):
            self.harness.detach()
        try:
            self.harness.attach(self.host.keeper.slot_info(self.n))
        except Exception as e:  # detached: the next chunk attaches before it runs (handle)
            logger.warning(
                "slot {} could not reconnect ({}); it attaches again before its next record", self.n, e
            )
            self.generation = 0

    def detach(self) -> None:
        """Drop the harness's connections now, attach again before the next record: after a cut, whose cause
        (a frozen server?) the witness judges first, and a connect to a frozen server only waits."""
        with contextlib.suppress(Exception):
            self.harness.detach()
        self.generation = 0

    # ------------------------------------------------------------------ a chunk
    def serve(self, msg: Assign, clock: Clock) -> None:
        """Run a chunk and send each result to the supervisor as it comes."""
        for job, result in self.handle(msg.jobs, clock):
            if self.abandoned:
                return
            self.send(job, result, sandbox_id=self.host.keeper.sandbox_id())

    def send(self, job: Job, result: Result, *, sandbox_id: str | None = None) -> None:
        """A job's result to the supervisor, stamped with where and as which attempt it ran."""
        update: dict[str, object] = {
            "worker": self.host.worker_id,
            "attempt": job.attempt,
            "item_id": job.item_id,
            "index": job.index,
            "epoch": job.epoch,
        }
        if sandbox_id is not None:
            update["sandbox_id"] = sandbox_id
        self.host.inbox.put(
            ItemDone(self.host.worker_id, job.item_id, result.model_copy(update=update).to_json())
        )

    def handle(self, jobs: tuple[Job, ...], clock: Clock) -> Iterator[tuple[Job, Result]]:
        """Each job's result, kept only if one live sandbox served the whole record.

        The harness's word is not enough: most harnesses catch every exception and report a failed record
        when their database dies under them. So the worker's witness (sandbox/witness.py) is asked before
        and after (after a failure, through the postmaster too): a result whose sandbox died, froze, was
        replaced or lost the slot's databases meanwhile is discarded, the sandbox replaced (once for all
        slots), and the record run again as its next attempt, until max_attempts. So is a failure that met
        the server out of a resource every slot shares (its lock table, memory, disk: tenancy.py). A record
        run again runs alone (turns.py): a neighbour that failed it once cannot fail it again. After each
        chunk, what its records changed beyond their databases is put back (the slot's role and databases).

        A python harness's slot process that died under a record (slot_died) is handled the same way: the
        sandbox served, the process did not; only that record is run again, its neighbours go on."""
        left = list(jobs)
        discarded: dict[int, list[str]] = {j.item_id: [] for j in jobs}
        again = False
        while left:
            with self.host.keeper.turns.alone() if again else self.host.keeper.turns.shared():
                lost, why, kind = yield from self._through(left, clock, discarded)
            if not lost:
                return
            again, left = True, []
            for job in lost:
                self.host.discard(job, why, kind)
                discarded[job.item_id].append(f"{kind}: attempt {job.attempt}")
                if job.attempt < self.settings.max_attempts:
                    left.append(dataclasses.replace(job, attempt=job.attempt + 1))
                else:
                    yield (
                        job,
                        error_result(
                            job.run,
                            job.record_id,
                            job.index,
                            f"{why}, on each of {job.attempt} attempts",
                            kind=kind,
                            discarded=discarded[job.item_id],
                        ),
                    )

    def _through(
        self, jobs: list[Job], clock: Clock, discarded: dict[int, list[str]]
    ) -> Generator[tuple[Job, Result], None, tuple[list[Job], str, ErrorKind]]:
        """One pass of the jobs on the sandbox: the results it served whole, yielded; the jobs it did not,
        why, and what was lost (the sandbox, or the slot's process), returned."""
        while True:
            if self.generation != self.host.keeper.generation:
                self.attach()
            seen = self.generation
            before = self._before_records()
            if before is None or before[0] == seen:
                break  # else another slot replaced the sandbox since this one attached: attach to the new one
        lost: list[Job] = []
        why, broken = "", False
        kind: ErrorKind = "sandbox_lost"
        since = time.time()
        try:
            for job, res in self.attempt(jobs, clock):
                failed = not _succeeded(res)
                if res.error_kind == "slot_died":  # the sandbox served; the slot's own process did not
                    lost.append(job)
                    why, kind = res.error or "the slot's process died", "slot_died"
                elif before is None or self.host.keeper.incarnation(self.n, failed=failed) != before:
                    lost.append(job)
                    broken = True
                elif failed and (short := self.host.keeper.starved(self.n, since, time.time())) is not None:
                    lost.append(job)
                    why = (
                        why or f"the server ran out of what every slot shares while the record ran ({short})"
                    )
                else:
                    yield (
                        job,
                        res.model_copy(update={"discarded": discarded[job.item_id]})
                        if discarded[job.item_id]
                        else res,
                    )
        finally:
            if not broken:  # a sandbox that did not serve its records is replaced, not tidied
                self.host.keeper.tidy(self.n, seen)
        if broken:
            why = "the sandbox did not serve the whole record (it died, froze or was replaced meanwhile)"
            self.host.keeper.replace_sandbox(
                f"{len(lost)} record(s) ran while the database stopped answering", seen
            )
            kind = "sandbox_lost"
        return lost, why, kind

    def _before_records(self) -> tuple[int, Incarnation] | None:
        """Reset the slot's databases if the harness asks for it, then which sandbox serves them (None:
        none does, so whatever runs now is lost)."""
        if self.settings.recreate:
            try:
                self.host.keeper.reset_slot(self.n)
            except (psycopg.OperationalError, psycopg.InterfaceError) as e:
                logger.warning("slot {}: resetting its databases failed: {}", self.n, e)
                return None
        return self.host.keeper.incarnation(self.n)

    def attempt(self, jobs: list[Job], clock: Clock) -> Iterator[tuple[Job, Result]]:
        """Run jobs through the harness under the time limit; every job comes back with a result.

        The clock runs only while the harness's code does: the cut never lands in the runner's own
        code (half a message on the supervisor's pipe), only in the harness's.
        """
        left = {j.item_id: j for j in jobs}
        tasks = [self.task(j) for j in jobs]
        limit = self.settings.conversation_limit * len(jobs)
        started = (now_iso(), time.monotonic())  # a chunk's records run together
        usage: list[Usage] = []
        running[self.n] = f"{jobs[0].run}:{jobs[0].record_id}" + (
            f" +{len(jobs) - 1}" if len(jobs) > 1 else ""
        )
        told = trial.set(jobs[0].epoch)  # a chunk is one trial (the scheduler's doing)
        if self.settings.epochs > 1 and self.host.gateway_url is not None:
            self.gateway.tell_trial(jobs[0].epoch)
        clock.start(limit + (ALARM_SLACK_SECONDS if len(jobs) > 1 else 0))
        try:
            outcomes = self.harness.run(tasks)
            for n in itertools.count():
                with clock.running():
                    step = next(outcomes, None)
                if step is None:
                    break
                task, outcome = step
                job = left.pop(task.item_id)
                if self._usage_from_gateway():
                    usage = usage or self.gateway.take_usage(len(jobs))
                    outcome.usage = usage[n] if n < len(usage) else outcome.usage
                yield job, build_result(task, outcome, job.index, started, self.host.reading, share=len(jobs))
        except Alarm:
            self.detach()  # the cut may have left a query half-done on a connection
            yield from self._fail_all(
                left,
                f"over the time limit of {self.settings.conversation_limit:g}s",
                "timeout",
                started,
                self._spent(len(jobs), usage),
            )
        except (psycopg.OperationalError, psycopg.InterfaceError) as e:
            yield from self._fail_all(left, str(e), "database", started, self._spent(len(jobs), usage))
            if not self.host.keeper.sandbox_dead():
                self.reconnect()
        except SlotProcessDied as e:  # judged by the caller (_through): run again, never a neighbour's
            yield from self._fail_all(left, str(e), "slot_died", started, self._spent(len(jobs), usage))
        except RunStopped:
            raise
        except Exception as e:  # a bug or an unexpected answer: these records fail, the worker goes on
            logger.exception("harness failed")
            yield from self._fail_all(
                left, f"{type(e).__name__}: {e}", "harness_error", started, self._spent(len(jobs), usage)
            )
        finally:
            clock.stop()
            trial.reset(told)
            running.pop(self.n, None)

    def _spent(self, parts: int, taken: list[Usage]) -> list[Usage]:
        """What the records cut short had cost, in chunk order: the gateway's count for a user harness's
        SDK calls, else the harness's own count for the record it was running."""
        if not self._usage_from_gateway():
            return [self.harness.spent()]
        return taken or self.gateway.take_usage(parts)

    def _usage_from_gateway(self) -> bool:
        return self.host.gateway_url is not None and not self.harness.counts_own_calls

    def _fail_all(
        self, left: dict[int, Job], why: str, kind: ErrorKind, started: tuple[str, float], spent: list[Usage]
    ) -> Iterator[tuple[Job, Result]]:
        """Every job left fails with why; each keeps its time and what its calls cost."""
        started_at, t0 = started
        wall = round((time.monotonic() - t0) / max(1, len(left)), 4)
        if len(spent) > 1:  # a share per record of the chunk: the ones already done took theirs
            spent = spent[-len(left) :]
        shares = spent + [Usage()] * (len(left) - len(spent))
        for job, usage in zip(list(left.values()), shares, strict=False):
            yield (
                job,
                error_result(
                    job.run,
                    job.record_id,
                    job.index,
                    why,
                    kind=kind,
                    started_at=started_at,
                    wall_seconds=wall,
                    usage=usage,
                ),
            )
        left.clear()

    def abandon(self, msg: Assign, since: tuple[str, float]) -> None:
        """Give up on a chunk whose harness code never took its Alarm (blocked in a C call that neither a
        signal nor a query cancel ends): its records become timeouts; the thread is left behind."""
        self.abandoned = True
        limit = self.settings.conversation_limit
        for job, result in self._fail_all(
            {j.item_id: j for j in msg.jobs},
            f"over the time limit of {limit:g}s (stuck where the limit could not "
            "cut it; its worker was retired)",
            "timeout",
            since,
            [],
        ):
            self.send(job, result)

    def task(self, job: Job) -> Task:
        return Task(
            job.item_id,
            self.settings.runs[job.run],
            job.record_id,
            self.host.records[job.record_id].data,
            job.attempt,
            job.epoch,
        )

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.harness.detach()
        with contextlib.suppress(Exception):
            self.harness.close()


# ---------------------------------------------------------------------- K > 1: a thread per slot
class SlotThread(threading.Thread):
    """Runs its slot's chunks from its own queue, on a WatchedClock the worker's main thread checks."""

    def __init__(self, slot: Slot, cancel: Callable[..., None]) -> None:
        super().__init__(daemon=True, name=f"slot-{slot.n}")
        self.announce = slot.n > 0  # slot 0's readiness is the worker's (WorkerReady)
        self.slot = slot

        def cut() -> None:  # what its thread may be blocked on: the database, a model's answer
            try:
                cancel(slot.n)
            finally:
                slot.gateway.abort_calls()

        self.clock = WatchedClock(cut, lambda: cancel(slot.n, terminate=True))
        self.jobs: queue.SimpleQueue[Assign | None] = queue.SimpleQueue()
        self.failure: BaseException | None = None  # a RunStopped, or a crash: the worker ends with it
        self.attached = threading.Event()
        self.current: Assign | None = None

    def _attach(self) -> None:
        """Attach; if the sandbox died meanwhile (another slot is replacing it, or this one must),
        once more on the new one."""
        seen = self.slot.host.keeper.generation
        try:
            self.slot.attach()
        except Exception as e:
            if not self.slot.host.keeper.sandbox_dead() and self.slot.host.keeper.generation == seen:
                raise
            logger.warning(
                "slot {} could not attach ({}); the sandbox is gone: once more on a new one", self.slot.n, e
            )
            self.slot.host.keeper.replace_sandbox(f"slot {self.slot.n} could not attach: {e}", seen)
            self.slot.attach()

    def run(self) -> None:
        try:
            self.slot.host.keeper.wait_copied(self.slot.n)
            self._attach()
            if self.announce:
                self.slot.host.inbox.put(SlotReady(self.slot.host.worker_id, self.slot.n))
        except WorkerClosing:  # stopped while it attached
            return
        except BaseException as e:
            logger.exception("slot {} could not attach", self.slot.n)
            self.failure = e
            return
        finally:
            self.attached.set()
        while True:
            try:
                msg = self.jobs.get()
                if msg is None:
                    return
                self.current = msg
                self.slot.serve(msg, self.clock)
                self.current = None
            except WorkerClosing as e:  # its sandbox went with the worker's stop: nothing to say or send
                logger.debug("slot {}: {}", self.slot.n, e)
                return
            except BaseException as e:  # RunStopped (a fatal provider error), or a bug in the runner
                if not isinstance(e, RunStopped):
                    logger.exception("slot {} crashed", self.slot.n)
                self.failure = e
                return
