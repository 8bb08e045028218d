"""Spending caps: a call's expected cost held before it goes, refused where it would pass a cap."""

from __future__ import annotations

import pickle

import multiprocess as mp
import pytest

from runner.budget.spend import JOB, Cap, Spend, Spent


def test_a_call_that_would_pass_the_cap_is_refused_and_the_cap_stays_reached() -> None:
    s = Spend(["a", "b"], {JOB: Cap(usd=1.0)})
    t = s.reserve("a", 0.6, 100)
    with pytest.raises(Spent) as e:
        s.reserve("b", 0.5, 100)  # 0.6 held + 0.5 > 1.0
    assert e.value.scope == JOB and str(e.value).startswith("stopped at budget: $0.0000 of $1.00")
    s.settle(t, 0.3, 90)  # it cost less than held: still, the cap was reached and stays so
    with pytest.raises(Spent):
        s.reserve("a", 0.01, 1)
    assert s.spent()[JOB] == (0.3, 90) and s.spent()["a"] == (0.3, 90) and set(s.reached()) == {JOB}


def test_a_runs_cap_stops_that_run_only() -> None:
    s = Spend(["a", "b"], {"a": Cap(tokens=1000)})
    s.settle(s.reserve("a", 0.0, 900), 0.0, 900)
    with pytest.raises(Spent) as e:
        s.reserve("a", 0.0, 200)
    assert e.value.scope == "a" and "900 of 1,000 tokens (run a's --budget-tokens)" in str(e.value)
    s.reserve("b", 0.0, 10_000)  # no cap of its own, and the job has none


def test_what_earlier_invocations_spent_counts_and_a_failed_call_costs_nothing() -> None:
    s = Spend(["a"], {JOB: Cap(usd=2.0)}, spent={JOB: (1.5, 0.0), "a": (1.5, 0.0)})
    with s.held(s.reserve("a", 0.4, 10)):
        pass  # no cost told: the call failed
    assert s.spent()[JOB] == (1.5, 0.0)
    with pytest.raises(Spent):
        s.reserve("a", 0.6, 10)
    assert Spend(["a"]).capped is False and s.capped and s.cap() == (2.0, None)


def test_an_uncapped_invocation_still_counts_what_it_spends_for_a_later_cap() -> None:
    s = Spend(["a", "b"])
    t = s.reserve("a", 5.0, 1000)  # no cap: nothing is held, nothing refused
    s.settle(t, 0.02, 600)
    with s.held(s.reserve("b", 9.0, 10)) as cost:
        cost.append((0.01, 300))
    assert s.spent() == {JOB: (0.03, 900), "a": (0.02, 600), "b": (0.01, 300)} and not s.reached()
    again = Spend(["a", "b"], {JOB: Cap(usd=0.035)}, spent=s.spent())  # the same output, resumed with a cap
    with pytest.raises(Spent):
        again.reserve("a", 0.01, 10)


def _spend_in_child(s: Spend) -> None:
    s.settle(s.reserve("a", 0.25, 5), 0.25, 5)


def test_every_process_of_the_run_shares_one_account() -> None:
    s = Spend(["a"], {JOB: Cap(usd=1.0)})
    copy = pickle.loads(pickle.dumps(s))
    assert copy.path == s.path and copy.scopes == s.scopes
    p = mp.get_context("spawn").Process(target=_spend_in_child, args=(s,))
    p.start()
    p.join(30)
    assert p.exitcode == 0 and s.spent()[JOB] == (0.25, 5)
