"""The first call of each run goes alone; a refusal every request of the run repeats shuts its gate, in every
process of the run at once."""

from __future__ import annotations

import os
import threading
import time

import multiprocess as mp
import pytest

from runner.budget.gates import PROBE_REFUSALS, PROBES, REFUSALS_IN_A_ROW, Gates, Refused


def test_the_first_callers_probe_and_the_others_wait_for_an_answer() -> None:
    g = Gates(["a/agent"])
    assert PROBES == 2
    assert g.enter("a/agent") is True and g.enter("a/agent") is True  # two probes out at once
    entered: list[bool] = []
    t = threading.Thread(target=lambda: entered.append(g.enter("a/agent")))
    t.start()
    time.sleep(0.2)
    assert not entered  # waits while the probes are out
    g.answered("a/agent")  # the first answer of the two
    t.join(2)
    assert entered == [False]  # open: it goes, not as a probe
    assert g.enter("a/agent") is False
    # the other probe, refused after the gate opened: one record's refusal, counted as any once open
    assert not g.refused("a/agent", "prompt is too long", probing=True)
    assert g.enter("a/agent") is False and g.shut() == {}


def test_two_probes_out_at_once_refused_alike_shut_the_gate_in_one_round_trip() -> None:
    g = Gates(["a/agent"])
    assert g.enter("a/agent") and g.enter("a/agent")
    assert not g.refused("a/agent", "HTTP 400: thinking.type disabled", probing=True)
    assert g.refused("a/agent", "HTTP 400: thinking.type disabled", probing=True)
    with pytest.raises(Refused, match=r"thinking\.type disabled"):
        g.enter("a/agent")


def test_a_probe_refused_alone_frees_its_place_for_another_record_once_no_probe_is_out() -> None:
    g = Gates(["a/agent"])
    assert g.enter("a/agent") and g.enter("a/agent")
    assert g.try_enter("a/agent") is None  # both probes out: wait
    assert not g.refused("a/agent", "prompt is too long", probing=True)  # that record's own length?
    assert g.try_enter("a/agent") is None  # the other probe's verdict first: it may shut the gate
    assert not g.refused("a/agent", "other words", probing=True)  # not alike: no shut, both places free
    # ... but one refusal alike is still wanted: one probe decides, a second at once would be one too many
    assert g.try_enter("a/agent") is True and g.try_enter("a/agent") is None
    g.no_verdict("a/agent", probing=True)  # a 5xx: no verdict; its place free for another record
    assert g.try_enter("a/agent") is True
    assert g.shut() == {}


def test_after_a_lone_refusal_one_probe_decides_so_two_records_pay_for_the_verdict() -> None:
    """The second race behind `assert 3 == 2` (CI, 2026-12-02): a first probe refused while no other was out
    freed both places, two records probed at once, the first refusal shut the gate and the other had been
    sent: three refused records."""
    g = Gates(["a/agent"])
    assert g.enter("a/agent") is True
    assert not g.refused("a/agent", "HTTP 400: max_tokens", probing=True)  # alone: no other probe out
    assert g.try_enter("a/agent") is True  # one more record probes
    assert g.try_enter("a/agent") is None  # a second one waits for its verdict
    assert g.refused("a/agent", "HTTP 400: max_tokens", probing=True)
    with pytest.raises(Refused):
        g.try_enter("a/agent")


def test_a_request_every_record_repeats_costs_two_refused_records_however_the_answers_interleave() -> None:
    """The race behind `assert 3 == 2` (tests/test_real_api_job.py): the first probe's refusal let a third
    caller probe before the second probe's refusal shut the gate, so three records paid for one verdict."""
    g = Gates(["a/agent"])
    sent: list[bool] = []
    assert g.enter("a/agent") and g.enter("a/agent")
    assert not g.refused("a/agent", "HTTP 400: max_tokens", probing=True)
    sent.append(bool(g.try_enter("a/agent")))  # a caller arriving between the two refusals sends nothing
    assert g.refused("a/agent", "HTTP 400: max_tokens", probing=True)
    with pytest.raises(Refused):
        g.try_enter("a/agent")
    assert sent == [False]


def test_a_held_place_is_freed_when_the_other_probe_dies() -> None:
    g = Gates(["a/agent"])
    assert g.enter("a/agent")  # this process probes
    child = mp.get_context("spawn").Process(target=_probe_and_die, args=(g,))
    child.start()
    child.join(30)
    assert not g.refused("a/agent", "HTTP 400: x", probing=True)  # held while the dead child seems out
    assert g.try_enter("a/agent") is True  # freed: one probe decides now


def test_two_probes_refused_alike_shut_the_gate_with_the_providers_words_for_every_waiting_caller() -> None:
    g = Gates(["a/agent", "b/agent"])
    assert PROBE_REFUSALS == 2
    assert g.enter("a/agent") and g.enter("a/agent")
    assert not g.refused("a/agent", "HTTP 400 (thinking.type): use between_tools", probing=True)
    assert g.try_enter("a/agent") is None  # one record's refusal may be its own: the other probe decides
    errors: list[str] = []

    def wait() -> None:
        try:
            g.enter("a/agent")
        except Refused as e:
            errors.append(str(e))

    waiting = [threading.Thread(target=wait) for _ in range(3)]
    for t in waiting:
        t.start()
    assert g.refused("a/agent", "HTTP 400 (thinking.type): use between_tools", probing=True)
    for t in waiting:
        t.join(2)
    assert errors == ["HTTP 400 (thinking.type): use between_tools"] * 3
    assert g.shut() == {"a/agent": "HTTP 400 (thinking.type): use between_tools"}
    assert g.enter("b/agent") is True  # another run's gate is its own


def test_once_open_only_the_same_refusal_in_a_row_shuts_it_and_an_answer_resets_the_count() -> None:
    g = Gates(["a/agent"])
    g.enter("a/agent")
    g.answered("a/agent")
    for _ in range(REFUSALS_IN_A_ROW - 1):
        assert not g.refused("a/agent", "too long", probing=False)
    g.answered("a/agent")  # an answer between: the count starts again
    for _ in range(REFUSALS_IN_A_ROW - 1):
        assert not g.refused("a/agent", "too long", probing=False)
    assert not g.refused("a/agent", "other words", probing=False)  # not the same refusal: a new count
    for _ in range(REFUSALS_IN_A_ROW - 2):
        assert not g.refused("a/agent", "other words", probing=False)
    assert g.refused("a/agent", "other words", probing=False)
    with pytest.raises(Refused, match="other words"):
        g.enter("a/agent")


def test_a_probe_without_a_verdict_lets_the_next_caller_probe() -> None:
    g = Gates(["a/agent"])
    assert g.enter("a/agent")
    g.no_verdict("a/agent", probing=True)  # a timeout, a 5xx after retries
    assert g.enter("a/agent") is True


def _probe_and_die(gates: Gates) -> None:
    gates.enter("a/agent")
    os._exit(0)  # killed mid-call: no verdict, the kernel drops its lock


def test_a_probe_whose_process_died_is_replaced_and_a_key_without_a_gate_is_open() -> None:
    g = Gates(["a/agent"])
    p = mp.get_context("spawn").Process(target=_probe_and_die, args=(g,))
    p.start()
    p.join(30)
    assert g.enter("a/agent", deadline=time.monotonic() + 5) is True  # its probe is gone: this one probes
    assert g.enter("no-such-run/agent") is False


def _shut_from_another_process(gates: Gates) -> None:
    for _ in range(PROBE_REFUSALS):
        gates.enter("a/agent")
        gates.refused("a/agent", "refused over there", probing=True)


def test_a_gate_shut_in_one_process_is_shut_in_all() -> None:
    g = Gates(["a/agent"])
    p = mp.get_context("spawn").Process(target=_shut_from_another_process, args=(g,))
    p.start()
    p.join(30)
    with pytest.raises(Refused, match="refused over there"):
        g.enter("a/agent")


def test_a_refused_probe_then_an_answer_opens_the_gate() -> None:
    g = Gates(["a/agent"])
    g.enter("a/agent")
    assert not g.refused("a/agent", "prompt is too long", probing=True)  # that record's own length
    assert g.enter("a/agent") is True
    g.answered("a/agent")
    assert g.enter("a/agent") is False and g.shut() == {}
