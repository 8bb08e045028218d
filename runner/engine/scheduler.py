"""Which worker does what next: pending work, what each slot of each worker holds and until when, what
is finished.

Pure (no processes, no clock of its own, no I/O: the caller says what time it is), so every rule is
unit-tested with fake workers, after pytest-xdist's scheduler: `take` hands a slot a chunk with its
deadline, `complete` records an item exactly once, `overdue` names the workers past a deadline, `lose`
returns what a dead worker held to the front of the queue, or, past the attempt limit, to the caller to
record as failed. The pool (runner/engine/pool.py) keeps only the processes.

With slots a worker holds several items at once; when it dies, any of them may be what killed it.
Each goes back marked `alone`: it runs only on a worker holding nothing else, and nothing joins it
until it is done. The culprit then dies alone, spending only its own attempts, and its neighbours
finish (otherwise the requeued group would be taken together again and exhaust their attempts with it).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass

from runner.plan import WorkItem

PREFER_SCAN = 512  # how far ahead a preferred run's next item is looked for: a bounded lead, a cheap scan


@dataclass(frozen=True)
class Assignment:
    item: WorkItem
    attempt: int
    alone: bool = False  # held by a worker that died holding others too: run it by itself


@dataclass
class Holding:
    """What one slot of a worker holds: the items not yet done, since when, and for how long at most."""

    items: dict[int, Assignment]
    since: float
    limit: float

    def overdue(self, now: float) -> bool:
        return now - self.since > self.limit


class Scheduler:
    def __init__(self, items: list[WorkItem], *, max_attempts: int, chunk_size: int = 1) -> None:
        self.pending: deque[Assignment] = deque(Assignment(i, 1) for i in items)
        self.max_attempts = max_attempts
        self.chunk_size = chunk_size
        self.holding: dict[int, dict[int, Holding]] = {}  # worker -> slot -> what it holds
        self.completed: set[int] = set()
        self._run_of = {i.id: i.run for i in items}
        self.left = Counter(i.run for i in items)  # per run, items not yet completed (pending or held)
        self.stopped: set[str] = set()  # runs stopped for a refusal every request of theirs repeats

    def take(
        self,
        worker: int,
        slot: int = 0,
        *,
        prefer: str | None = None,
        now: float = 0.0,
        limit_per_item: float = math.inf,
        margin: float = 0.0,
    ) -> list[Assignment]:
        """Up to chunk_size pending items of one run (a harness call serves one run) for a free slot of the
        worker, overdue past `now` + limit_per_item x their number + margin; [] when none.
        `prefer`: that run's next items if one is among the next PREFER_SCAN, else plan order.

        An `alone` item goes only to a worker that holds nothing, as a chunk of its own; a worker that
        holds one gets nothing more until it is done."""
        chunk: list[Assignment] = []
        skipped: list[Assignment] = []
        held = self._items(worker)
        if any(a.alone for a in held.values()):
            return []
        if prefer is not None:
            self._bring_forward(prefer)
        while self.pending and len(chunk) < self.chunk_size:
            a = self.pending.popleft()
            if a.item.id in self.completed:
                continue
            if a.alone:
                if not chunk and not held:
                    chunk.append(a)
                    break
                skipped.append(a)
                continue
            # a harness call serves one run; one trial of it, so a gateway knows which trial its calls are
            if chunk and (a.item.run, a.item.epoch) != (chunk[0].item.run, chunk[0].item.epoch):
                skipped.append(a)
                if len(skipped) > 4 * self.chunk_size:
                    break  # the rest of this run is far away: a short chunk beats a scan of the queue
                continue
            chunk.append(a)
        self.pending.extendleft(reversed(skipped))
        if chunk:
            self.holding.setdefault(worker, {})[slot] = Holding(
                {a.item.id: a for a in chunk}, now, limit_per_item * len(chunk) + margin
            )
        return chunk

    def _bring_forward(self, run: str) -> None:
        """Move the first pending item of `run` (within PREFER_SCAN) to the front; the rest keep their
        order."""
        for i, a in enumerate(itertools.islice(self.pending, PREFER_SCAN)):
            if a.item.run == run and not a.alone and a.item.id not in self.completed:
                if i:
                    del self.pending[i]
                    self.pending.appendleft(a)
                return

    def complete(self, worker: int, item_id: int) -> bool:
        """True the first time an item finishes; False for a late duplicate (then nothing changes). Its
        slot is free once the whole chunk is done."""
        slots = self.holding.get(worker, {})
        for slot, h in list(slots.items()):
            if h.items.pop(item_id, None) is not None and not h.items:
                del slots[slot]
        if item_id in self.completed:
            return False
        self.completed.add(item_id)
        run = self._run_of.get(item_id)
        if run is not None:
            self.left[run] -= 1
        return True

    def stop_run(self, run: str) -> int:
        """No more of `run` is handed out (its requests are refused): its pending items leave the queue,
        undone (a later invocation runs them); returns how many."""
        kept = deque(a for a in self.pending if a.item.run != run or a.item.id in self.completed)
        dropped = len(self.pending) - len(kept)
        self.pending = kept
        self.stopped.add(run)
        self.left[run] = max(0, self.left[run] - dropped)
        return dropped

    def again(self, worker: int, item_id: int, now: float = 0.0) -> None:
        """The worker runs an item it holds once more (its result was discarded): one more attempt spent,
        and its chunk's clock starts again."""
        for h in self.holding.get(worker, {}).values():
            if (a := h.items.get(item_id)) is not None:
                h.items[item_id] = Assignment(a.item, a.attempt + 1, a.alone)
                h.since = now

    def restart_clocks(self, worker: int, now: float) -> None:
        """Its chunks' time limits start again now, in full: records run again on a new sandbox are never
        cut short by their first try's time."""
        for h in self.holding.get(worker, {}).values():
            h.since = now

    def overdue(self, now: float, workers: Iterable[int] | None = None) -> set[int]:
        """Workers holding a chunk past its deadline: stuck where their own alarm cannot reach them."""
        return {
            w
            for w, slots in self.holding.items()
            if (workers is None or w in workers) and any(h.overdue(now) for h in slots.values())
        }

    def free_slots(self, worker: int, ready: Iterable[int]) -> list[int]:
        held = self.holding.get(worker, {})
        return [n for n in sorted(ready) if n not in held]

    def slots_held(self, worker: int) -> int:
        return len(self.holding.get(worker, {}))

    def holds(self, worker: int) -> int:
        """Records in flight on this worker."""
        return len(self._items(worker))

    def _items(self, worker: int) -> dict[int, Assignment]:
        return {i: a for h in self.holding.get(worker, {}).values() for i, a in h.items.items()}

    def lose(self, worker: int) -> list[Assignment]:
        """The worker is gone: requeue its unfinished items first in line; return the exhausted ones."""
        held = self._items(worker)
        self.holding.pop(worker, None)
        exhausted: list[Assignment] = []
        retry: list[Assignment] = []
        unfinished = [a for a in held.values() if a.item.id not in self.completed]
        alone = len(unfinished) > 1
        for a in unfinished:
            (exhausted if a.attempt >= self.max_attempts else retry).append(
                Assignment(a.item, a.attempt + 1, alone or a.alone)
            )
        self.pending.extendleft(reversed(retry))
        return [Assignment(a.item, a.attempt - 1) for a in exhausted]

    def held(self, worker: int) -> list[Assignment]:
        return list(self._items(worker).values())

    def busy(self, worker: int) -> bool:
        return bool(self.holding.get(worker))

    def has_pending(self) -> bool:
        return any(a.item.id not in self.completed for a in self.pending)

    def in_flight(self) -> int:
        return sum(len(h.items) for slots in self.holding.values() for h in slots.values())
