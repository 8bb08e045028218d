"""One counter type for the client and the gateway: priced, added, and made a record's Usage."""

from __future__ import annotations

from runner.models.capabilities import Prices
from runner.models.usage import Counts, Tokens, cost

PRICES = Prices(input=3.0, output=15.0, cache_write=3.75, cache_read=0.3)


def test_answered_counts_tokens_and_prices_them_as_cost_does() -> None:
    c = Counts()
    t = Tokens(input_tokens=1000, output_tokens=200, cache_write_tokens=100, cache_read_tokens=4000)
    assert c.answered(t, PRICES, latency=0.5) == cost(PRICES, t)
    total, inp, saved = cost(PRICES, t)
    assert (c.input_tokens, c.output_tokens, c.cache_write_tokens, c.cache_read_tokens) == (1000, 200, 100, 4000)
    assert (c.cost_usd, c.input_cost_usd, c.cache_saved_usd, c.latency_seconds) == (total, inp, saved, 0.5)
    assert total is not None and round(total, 6) == round((1000 * 3 + 100 * 3.75 + 4000 * 0.3 + 200 * 15) / 1e6, 6)


def test_one_call_at_an_unknown_price_makes_the_records_cost_unknown() -> None:
    c = Counts(llm_calls=2)
    c.answered(Tokens(10, 5), PRICES)
    c.answered(Tokens(10, 5), None)
    u = c.usage()
    assert u.cost_usd is None and u.input_cost_usd is None
    assert (u.llm_calls, u.input_tokens, u.output_tokens) == (2, 20, 10)


def test_split_shares_whole_counts_by_remainder_and_money_by_division() -> None:
    c = Counts(llm_calls=7, retries=1, input_tokens=10, cost_usd=0.09, latency_seconds=3.0)
    shares = c.split(3)
    assert [s.llm_calls for s in shares] == [3, 2, 2]
    assert [s.retries for s in shares] == [1, 0, 0]
    assert sum(s.input_tokens for s in shares) == 10
    assert [s.cost_usd for s in shares] == [0.03, 0.03, 0.03]
    assert [s.latency_seconds for s in shares] == [1.0, 1.0, 1.0]


def test_since_and_add_are_inverse_and_the_wire_form_round_trips() -> None:
    before = Counts(llm_calls=1, cost_usd=0.5)
    after = before.snapshot()
    after.answered(Tokens(3, 4), PRICES, 0.25)
    after.llm_calls += 1
    delta = after.since(before)
    assert (delta.llm_calls, delta.input_tokens, delta.latency_seconds) == (1, 3, 0.25)
    back = before.snapshot()
    back.add(delta)
    assert back == after
    assert Counts.from_dict({**after.as_dict(), "from_a_newer_gateway": 1}).llm_calls == 2
    assert before.llm_calls == 1  # a snapshot is a copy
