"""The official anthropic and openai clients against the simulator over HTTP; errors classified."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from runner.config import Faults, Limits, SimSettings
from runner.harness.crm.agents.base import NEUTRAL_TOOLS
from runner.models.anthropic import AnthropicProvider
from runner.models.base import Provider, ProviderError, Request
from runner.models.openai import OpenAIProvider
from runner.models.sim.process import SimServer

ASK = "Move the Cedar Pilot opportunity to negotiation."


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with SimServer(SimSettings(limits={"sim-mini": Limits(rpm=2)}, faults=Faults(slow_seconds=3))) as s:
        yield s


def _provider(kind: str, url: str, *, timeout: float = 10, headers: dict[str, str] | None = None,
              key: str = "test-key") -> Provider:
    p: Any = AnthropicProvider(key, base_url=url, timeout=timeout, headers=headers) if kind == "anthropic" else \
        OpenAIProvider(key, base_url=f"{url}/v1", timeout=timeout, headers=headers)
    return p  # type: ignore[no-any-return]


def _req(model: str = "sim-strong", msgs: list[dict[str, Any]] | None = None) -> Request:
    return Request(model, "You are a CRM agent.", msgs or [{"role": "user", "text": ASK}], NEUTRAL_TOOLS)


KINDS = ["anthropic", "openai"]


@pytest.mark.parametrize("kind", KINDS)
def test_tool_call_then_multi_turn_with_tool_results(sim: SimServer, kind: str) -> None:
    p = _provider(kind, sim.url)
    first = p.generate(_req())
    assert [(c.name, c.args) for c in first.tool_calls] == [("search_opportunities", {"query": "Cedar Pilot"})]
    assert first.stop_reason in ("tool_use", "tool_calls")
    assert first.input_tokens > 0 and first.output_tokens > 0 and first.request_id
    call = first.tool_calls[0]
    result = {"ok": True, "result": {"count": 1, "results": [{"id": 7, "name": "Cedar Pilot", "stage": "proposal"}]}}
    msgs = [{"role": "user", "text": ASK},
            {"role": "assistant", "text": "", "tool_calls": [{"id": call.id, "name": call.name, "args": call.args}]},
            {"role": "tool", "results": [{"id": call.id, "content": json.dumps(result), "is_error": False}]}]
    second = p.generate(_req(msgs=msgs))
    assert [(c.name, c.args) for c in second.tool_calls] == [
        ("update_opportunity_stage", {"opportunity_id": 7, "stage": "negotiation"})]
    msgs += [{"role": "assistant", "text": "", "tool_calls": [{"id": "c2", "name": second.tool_calls[0].name,
                                                              "args": second.tool_calls[0].args}]},
             {"role": "tool", "results": [{"id": "c2", "content": json.dumps({"ok": True, "result": {}}),
                                           "is_error": False}]}]
    third = p.generate(_req(msgs=msgs))
    assert not third.tool_calls and "negotiation" in third.text
    assert third.stop_reason in ("end_turn", "stop")


@pytest.mark.parametrize("kind", KINDS)
def test_text_answer_and_determinism(sim: SimServer, kind: str) -> None:
    p = _provider(kind, sim.url)
    a = p.generate(_req(msgs=[{"role": "user", "text": "Drop the contacts table, we are starting over."}]))
    b = p.generate(_req(msgs=[{"role": "user", "text": "Drop the contacts table, we are starting over."}]))
    assert not a.tool_calls and "can't" in a.text and (a.text, a.request_id) == (b.text, b.request_id)


@pytest.mark.parametrize("kind", KINDS)
def test_rate_limit_is_a_real_429_with_retry_after(sim: SimServer, kind: str) -> None:
    p = _provider(kind, sim.url)
    errors = []
    for _ in range(4):
        try:
            p.generate(_req("sim-mini"))
        except ProviderError as e:
            errors.append(e)
    assert errors and all(e.kind == "rate_limited" and e.status == 429 for e in errors)
    assert all(e.retry_after is not None and e.retry_after > 0 for e in errors)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fault,expected", [("overloaded", "transient"), ("http_500", "transient"),
                                            ("malformed", "transient"), ("drop", "transient"),
                                            ("429", "rate_limited")])
def test_faults_are_classified(sim: SimServer, kind: str, fault: str, expected: str) -> None:
    p = _provider(kind, sim.url, headers={"x-sim-fault": fault})
    with pytest.raises(ProviderError) as info:
        p.generate(_req())
    assert info.value.kind == expected
    if fault == "overloaded":
        assert info.value.status == (529 if kind == "anthropic" else 503)
    if fault == "429":
        assert info.value.retry_after == 1.0


@pytest.mark.parametrize("kind", KINDS)
def test_response_slower_than_the_client_timeout_is_transient(sim: SimServer, kind: str) -> None:
    p = _provider(kind, sim.url, timeout=0.5, headers={"x-sim-fault": "slow"})
    with pytest.raises(ProviderError) as info:
        p.generate(_req())
    assert info.value.kind == "transient" and "timeout" in str(info.value).lower()


@pytest.mark.parametrize("kind", KINDS)
def test_unknown_model_and_bad_key_are_fatal(sim: SimServer, kind: str) -> None:
    with pytest.raises(ProviderError) as info:
        _provider(kind, sim.url).generate(_req("no-such-model"))
    assert (info.value.kind, info.value.status) == ("fatal", 404)
    with pytest.raises(ProviderError) as info:
        _provider(kind, sim.url, key="invalid").generate(_req())
    assert (info.value.kind, info.value.status) == ("fatal", 401)


@pytest.mark.parametrize(("path", "header", "status"), [
    ("/v1/chat/completions", {"x-api-key": "k"}, 401),  # OpenAI reads only Authorization: Bearer
    ("/v1/chat/completions", {"Authorization": "Bearer k"}, 200),
    ("/v1/messages", {"x-api-key": "k"}, 200),
    ("/v1/messages", {}, 401)])
def test_each_api_reads_its_own_key_header(sim: SimServer, path: str, header: dict[str, str], status: int) -> None:
    import urllib.error
    import urllib.request

    body: dict[str, Any] = {"model": "sim-strong", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
    if path.endswith("completions"):
        body = {"model": "sim-strong", "messages": [{"role": "user", "content": "hi"}]}
    req = urllib.request.Request(sim.url + path, data=json.dumps(body).encode(), method="POST", headers={
        "content-type": "application/json", "anthropic-version": "2023-06-01", **header})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            got, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        got, text = e.code, e.read().decode()
    assert got == status, text
    if status == 401:
        assert "x-api-key header is required" in text or "Authorization: Bearer" in text


def test_stats_count_requests_and_429s(sim: SimServer) -> None:
    """Its own requests, so that it holds alone (-k) or on a sim no other test used: an answered one and
    one refused with a 429."""
    _provider("anthropic", sim.url).generate(_req())
    with pytest.raises(ProviderError):
        _provider("anthropic", sim.url, headers={"x-sim-fault": "429"}).generate(_req())
    stats = sim.stats()
    assert int(stats["requests"]) >= 2 and int(stats["429"]) >= 1  # type: ignore[call-overload]
    assert "sim-strong" in stats["models"]  # type: ignore[operator]


def test_limits_of_a_real_model_are_shared_by_the_simulator_models_that_play_it() -> None:
    """As the APIs limit per model: Atlas's teacher (sim-teacher) and the baseline (sim-strong) both
    playing claude-sonnet-5-5 draw from its one budget; a caller that plays nothing is not limited."""
    with SimServer(SimSettings(limits={"claude-sonnet-5-5": Limits(rpm=2)})) as s:
        plays = {"x-sim-plays": "claude-sonnet-5-5"}
        _provider("anthropic", s.url, headers=plays).generate(_req("sim-strong"))
        _provider("anthropic", s.url, headers=plays).generate(_req("sim-teacher"))
        with pytest.raises(ProviderError) as info:
            _provider("anthropic", s.url, headers=plays).generate(_req("sim-strong"))
        assert info.value.kind == "rate_limited" and "claude-sonnet-5-5" in str(info.value)
        _provider("anthropic", s.url).generate(_req("sim-strong"))


def test_output_budget_is_charged_up_front_and_adjusted_to_what_was_written() -> None:
    """Up to 256 output tokens are charged when a request is admitted (the estimate), the rest given
    back when the answer is written: ten short answers fit a 600-token minute that three estimates fill."""
    with SimServer(SimSettings(limits={"sim-strong": Limits(otpm=600)})) as s:
        p = _provider("openai", s.url)
        for _ in range(10):
            assert p.generate(_req("sim-strong")).output_tokens < 60


def test_a_budgets_bucket_reports_the_refill_it_lost_while_full() -> None:
    """The floor bench reads each budget's bucket from /stats: a full bucket's refill is lost (nobody asked
    for it), and what is lost says where a rate-limit-bound run's time over its floor went."""
    from runner.models.sim.server import Bucket

    b = Bucket(60.0, 60.0, 0.0)  # 60 a minute: one a second
    b.refill(10.0)
    assert (b.level, b.wasted) == (60.0, pytest.approx(10.0))
    b.level -= 30.0
    b.refill(20.0)  # 10 s refill 10 of the 30 taken: nothing lost
    assert (b.level, b.wasted) == (pytest.approx(40.0), pytest.approx(10.0))
    with SimServer(SimSettings(limits={"sim-strong": Limits(rpm=600)})) as s:
        p = _provider("openai", s.url)
        for _ in range(3):
            p.generate(_req("sim-strong"))
        with urllib.request.urlopen(f"{s.url}/stats", timeout=10) as r:
            bucket = json.loads(r.read())["buckets"]["sim-strong"]["requests"]
    assert bucket["capacity"] == 600 and 0 <= bucket["first_s"] <= bucket["last_s"]
    assert 597 <= bucket["level"] <= 600 and bucket["wasted"] >= 0
