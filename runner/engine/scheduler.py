"""Which worker does what next: pending work, what each worker holds, what is finished.

Pure (no processes, no clocks, no I/O), so every rule is unit-tested with fake workers, after
pytest-xdist's scheduler: `take` hands out a chunk, `complete` records an item exactly once,
`lose` returns what a dead worker held to the front of the queue, or, past the attempt limit,
to the caller to record as failed.

With slots a worker holds several items at once; when it dies, any of them may be what killed it.
Each goes back marked `alone`: it runs only on a worker holding nothing else, and nothing joins it
until it is done. The culprit then dies alone, spending only its own attempts, and its neighbours
finish (otherwise the requeued group would be taken together again and exhaust their attempts with it).
"""

from __future__ import annotations

import itertools
from collections import Counter, deque
from dataclasses import dataclass

from runner.plan import WorkItem

PREFER_SCAN = 512  # how far ahead a preferred run's next item is looked for: a bounded lead, a cheap scan


@dataclass(frozen=True)
class Assignment:
    item: WorkItem
    attempt: int
    alone: bool = False  # held by a worker that died holding others too: run it by itself


class Scheduler:
    def __init__(self, items: list[WorkItem], *, max_attempts: int, chunk_size: int = 1) -> None:
        self.pending: deque[Assignment] = deque(Assignment(i, 1) for i in items)
        self.max_attempts = max_attempts
        self.chunk_size = chunk_size
        self.holding: dict[int, dict[int, Assignment]] = {}
        self.completed: set[int] = set()
        self._run_of = {i.id: i.run for i in items}
        self.left = Counter(i.run for i in items)  # per run, items not yet completed (pending or held)

    def take(self, worker: int, prefer: str | None = None) -> list[Assignment]:
        """Up to chunk_size pending items of one run (a harness call serves one run); [] when none.
        `prefer`: that run's next items if one is among the next PREFER_SCAN, else plan order.

        An `alone` item goes only to a worker that holds nothing, as a chunk of its own; a worker that
        holds one gets nothing more until it is done."""
        chunk: list[Assignment] = []
        skipped: list[Assignment] = []
        held = self.holding.setdefault(worker, {})
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
        for a in chunk:
            held[a.item.id] = a
        return chunk

    def _bring_forward(self, run: str) -> None:
        """Move the first pending item of `run` (within PREFER_SCAN) to the front; the rest keep their order."""
        for i, a in enumerate(itertools.islice(self.pending, PREFER_SCAN)):
            if a.item.run == run and not a.alone and a.item.id not in self.completed:
                if i:
                    del self.pending[i]
                    self.pending.appendleft(a)
                return

    def complete(self, worker: int, item_id: int) -> bool:
        """True the first time an item finishes; False for a late duplicate (then nothing changes)."""
        self.holding.get(worker, {}).pop(item_id, None)
        if item_id in self.completed:
            return False
        self.completed.add(item_id)
        run = self._run_of.get(item_id)
        if run is not None:
            self.left[run] -= 1
        return True

    def again(self, worker: int, item_id: int) -> None:
        """The worker runs an item it holds once more (its result was discarded): one more attempt spent."""
        held = self.holding.get(worker, {})
        if (a := held.get(item_id)) is not None:
            held[item_id] = Assignment(a.item, a.attempt + 1, a.alone)

    def lose(self, worker: int) -> list[Assignment]:
        """The worker is gone: requeue its unfinished items first in line; return the exhausted ones."""
        held = self.holding.pop(worker, {})
        exhausted: list[Assignment] = []
        retry: list[Assignment] = []
        unfinished = [a for a in held.values() if a.item.id not in self.completed]
        alone = len(unfinished) > 1
        for a in unfinished:
            (exhausted if a.attempt >= self.max_attempts else retry).append(Assignment(a.item, a.attempt + 1,
                                                                                       alone or a.alone))
        self.pending.extendleft(reversed(retry))
        return [Assignment(a.item, a.attempt - 1) for a in exhausted]

    def held(self, worker: int) -> list[Assignment]:
        return list(self.holding.get(worker, {}).values())

    def busy(self, worker: int) -> bool:
        return bool(self.holding.get(worker))

    def has_pending(self) -> bool:
        return any(a.item.id not in self.completed for a in self.pending)

    def in_flight(self) -> int:
        return sum(len(h) for h in self.holding.values())
