"""The scheduler alone: chunks, exactly-once, requeue of a dead worker's items, the attempt limit."""

from __future__ import annotations

from runner.plan import WorkItem
from runner.scheduler import Scheduler


def _items(runs: str = "ab", n: int = 3) -> list[WorkItem]:
    items = []
    for i in range(n):
        for r in runs:
            items.append(WorkItem(len(items), r, f"rec-{i}", i))
    return items


def test_take_hands_out_in_plan_order_and_holds_what_it_gave() -> None:
    s = Scheduler(_items(), max_attempts=3)
    first, second = s.take(0), s.take(1)
    assert [a.item.id for a in first + second] == [0, 1] and first[0].attempt == 1
    assert s.busy(0) and s.busy(1) and s.in_flight() == 2


def test_chunks_hold_one_run_and_keep_the_others_in_order() -> None:
    s = Scheduler(_items(), max_attempts=3, chunk_size=3)
    chunk = s.take(0)
    assert {a.item.run for a in chunk} == {"a"} and [a.item.record_id for a in chunk] == ["rec-0", "rec-1", "rec-2"]
    assert [a.item.run for a in s.take(1)] == ["b", "b", "b"]
    assert not s.has_pending()


def test_complete_is_exactly_once() -> None:
    s = Scheduler(_items(n=1), max_attempts=3)
    a = s.take(0)[0]
    assert s.complete(0, a.item.id) is True
    assert s.complete(0, a.item.id) is False  # a late duplicate changes nothing
    assert not s.busy(0)


def test_a_dead_workers_items_go_first_in_line_with_the_next_attempt() -> None:
    s = Scheduler(_items(), max_attempts=3)
    held = s.take(0)
    assert s.lose(0) == []  # nothing exhausted
    again = s.take(1)
    assert [a.item.id for a in again] == [held[0].item.id] and again[0].attempt == 2


def test_past_the_attempt_limit_the_item_comes_back_to_be_recorded_as_failed() -> None:
    s = Scheduler(_items(n=1, runs="a"), max_attempts=2)
    s.take(0)
    s.lose(0)
    s.take(1)
    exhausted = s.lose(1)
    assert [(a.item.id, a.attempt) for a in exhausted] == [(0, 2)]
    assert not s.has_pending() and s.in_flight() == 0


def test_a_result_that_arrives_after_its_item_was_requeued_still_counts_once() -> None:
    s = Scheduler(_items(n=1, runs="a"), max_attempts=3)
    a = s.take(0)[0]
    s.lose(0)  # the supervisor thought worker 0 was dead...
    assert s.complete(0, a.item.id) is True  # ...but its result arrives
    assert s.take(1) == [] and not s.has_pending()  # the requeued copy is skipped
