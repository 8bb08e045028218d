"""The scheduler alone: chunks, exactly-once, requeue of a dead worker's items, the attempt limit."""

from __future__ import annotations

from runner.engine.scheduler import Scheduler
from runner.plan import WorkItem


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


def test_a_worker_with_slots_holds_several_and_its_death_requeues_each_to_run_alone() -> None:
    s = Scheduler(_items(n=4), max_attempts=3)
    held = [s.take(0, n)[0] for n in range(3)]  # three slots of worker 0
    assert s.in_flight() == 3 and len(s.held(0)) == 3
    s.take(1)  # worker 1 is busy too
    assert s.lose(0) == []
    # a busy worker gets what is behind the suspects, not the suspects
    behind = s.take(1)
    assert behind and not behind[0].alone and behind[0].item.id not in {a.item.id for a in held}
    # an idle worker gets one suspect, by itself, and nothing more until it is done
    solo = s.take(2)
    assert [a.item.id for a in solo] == [held[0].item.id] and solo[0].alone and solo[0].attempt == 2
    assert s.take(2) == []
    s.complete(2, held[0].item.id)
    assert [a.item.id for a in s.take(2)] == [held[1].item.id]


def test_the_culprit_among_slots_spends_its_own_attempts_and_its_neighbours_finish() -> None:
    s = Scheduler(_items(n=2, runs="a"), max_attempts=2)
    s.take(0, 0)
    s.take(0, 1)  # both records in flight on worker 0; record 0 is what kills it
    assert s.lose(0) == []
    assert [a.item.id for a in s.take(1)] == [0]  # alone: worker 1 holds nothing else
    assert [(a.item.id, a.attempt) for a in s.lose(1)] == [(0, 2)]  # died again, alone: exhausted
    second = s.take(2)
    assert [(a.item.id, a.attempt) for a in second] == [(1, 2)]  # its neighbour runs alone, and finishes
    assert s.complete(2, 1) and not s.has_pending() and s.in_flight() == 0


def test_a_preferred_run_goes_first_and_the_others_keep_their_order() -> None:
    s = Scheduler(_items("abc", 4), max_attempts=3)
    taken = [s.take(0, n, prefer="c")[0].item for n in range(3)]
    assert [(i.run, i.record_id) for i in taken] == [("c", "rec-0"), ("c", "rec-1"), ("c", "rec-2")]
    rest = [s.take(0, n)[0].item for n in range(3, 7)]  # plan order again for the others
    assert [(i.run, i.record_id) for i in rest] == [("a", "rec-0"), ("b", "rec-0"), ("a", "rec-1"), ("b", "rec-1")]
    s.take(0, 7, prefer="c")
    assert s.take(0, 8, prefer="c")[0].item.run == "a"  # none of c left: plan order
    assert len(s.completed) == 0 and s.in_flight() == 9
    for a in taken[:2]:
        s.complete(0, a.id)
    assert s.left == {"a": 4, "b": 4, "c": 2}  # records left to finish, per run


def test_preferring_never_hands_out_a_completed_or_alone_item() -> None:
    s = Scheduler(_items("ab", 2), max_attempts=3)
    held = [s.take(0)[0], s.take(0)[0]]  # a/rec-0 and b/rec-0 on worker 0's slots
    s.lose(0)  # both back first in line, each to run alone
    s.complete(9, held[1].item.id)  # b/rec-0 finished elsewhere meanwhile (a late result)
    got = s.take(1, prefer="b")  # b's next is rec-1, not the completed or the alone copy
    assert [(a.item.run, a.item.record_id, a.alone) for a in got] == [("b", "rec-1", False)]


def test_a_slot_is_free_once_its_whole_chunk_is_done() -> None:
    s = Scheduler(_items(runs="a", n=6), max_attempts=3, chunk_size=2)
    ready = {0, 1, 2}  # slots > 0 are free once they said they are ready (SlotReady)
    assert s.free_slots(0, {0}) == [0]
    s.take(0, 0)
    s.take(0, 2)
    assert s.free_slots(0, ready) == [1] and s.holds(0) == 4 and s.slots_held(0) == 2
    assert s.complete(0, 0) and s.free_slots(0, ready) == [1]  # half a chunk: the slot is still busy
    assert s.complete(0, 1) and s.free_slots(0, ready) == [0, 1]
    assert not s.complete(0, 1) and s.free_slots(0, ready) == [0, 1]  # a late duplicate changes nothing


def test_a_chunk_is_overdue_past_its_deadline_and_a_retry_restarts_its_clock() -> None:
    s = Scheduler(_items(runs="a", n=4), max_attempts=3, chunk_size=2)
    s.take(0, 0, now=100.0, limit_per_item=10.0, margin=5.0)  # two items: 25 s
    s.take(1, 0, now=100.0, limit_per_item=10.0, margin=5.0)
    assert s.overdue(124.0) == set() and s.overdue(126.0) == {0, 1}
    s.restart_clocks(0, now=120.0)  # a new sandbox: the retry gets its full time
    assert s.overdue(126.0) == {1}
    s.again(1, 2, now=130.0)  # a result thrown away: one more attempt, and the clock starts again
    assert s.overdue(150.0) == {0} and s.overdue(156.0) == {0, 1}
    assert [a.attempt for a in s.held(1) if a.item.id == 2] == [2]
    assert s.overdue(156.0, workers=[1]) == {1}
