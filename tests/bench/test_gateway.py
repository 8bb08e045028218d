"""The gateway bench's own callers (bench/gateway.py) as the gateway admits them: its raw http.client calls
present the run's token, so `make bench-smoke` measures streams instead of stopping on a 401 (it did, unseen,
after the gateway began to serve its run only). No timing is judged here."""

from __future__ import annotations

from bench import gateway


def test_the_first_byte_step_streams_through_the_gateway_it_measures() -> None:
    res = gateway.first_byte(2, 10)
    assert res["n"] == 2
    assert res["via_first_ms"] > 0 and res["via_last_ms"] >= res["via_first_ms"]
