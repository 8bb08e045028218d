"""The runner's own clients of the clouds (runner/models/bedrock.py, vertex.py, azure.py), built from a
config as a run builds them, against the simulator: a tool-using conversation, and errors classified."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from runner.clouds import target
from runner.config import Config, SimSettings
from runner.harness.crm.agents.base import NEUTRAL_TOOLS
from runner.models.base import Provider, ProviderError, Request
from runner.models.client import make_provider
from runner.models.settings import client_settings
from runner.models.sim.process import SimServer
from runner.models.vertex import VertexProvider

ASK = "Move the Cedar Pilot opportunity to negotiation."
RUNS = {"bedrock": "us.anthropic.claude-sonnet-5-5", "vertex": "claude-sonnet-4-5@20250929",
        "azure": "gpt-5.4"}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with SimServer(SimSettings()) as s:
        yield s


def _cfg(provider: str, model: str, **run: Any) -> Config:
    return Config.model_validate({
        "dataset": "x.jsonl", "providers_mode": "sim", "bedrock": {"region": "us-east-1"},
        "vertex": {"project": "p", "region": "us-east5"}, "azure": {"api_version": "2024-10-21"},
        "runs": [{"name": "r", "provider": provider, "model": model, **run}]})


def _provider(sim: SimServer, provider: str, model: str, **run: Any) -> tuple[Provider, str]:
    cfg = _cfg(provider, model, **run)
    return make_provider(cfg.runs[0].model_ref(), client_settings(cfg), sim.url)


def _req(model: str, msgs: list[dict[str, Any]] | None = None) -> Request:
    return Request(model, "You are a CRM agent.", msgs or [{"role": "user", "text": ASK}], NEUTRAL_TOOLS,
                   prompt_cache=True)


@pytest.mark.parametrize("provider", list(RUNS))
def test_a_tool_using_conversation_through_each_cloud(sim: SimServer, provider: str) -> None:
    p, wire_model = _provider(sim, provider, RUNS[provider])
    assert p.name == provider and wire_model == RUNS[provider]  # the cloud's own id, on the simulator too
    first = p.generate(_req(wire_model))
    assert [(c.name, c.args) for c in first.tool_calls] == [("search_opportunities",
                                                             {"query": "Cedar Pilot"})]
    call = first.tool_calls[0]
    row = {"id": 7, "name": "Cedar Pilot", "stage": "proposal"}
    found = {"ok": True, "result": {"count": 1, "results": [row]}}
    second = p.generate(_req(wire_model, [
        {"role": "user", "text": ASK}, {"role": "assistant", "text": first.text,
                                        "tool_calls": [{"id": call.id, "name": call.name, "args": call.args}],
                                        "received": first.received},
        {"role": "tool", "results": [{"id": call.id, "content": json.dumps(found), "is_error": False}]}]))
    assert [c.name for c in second.tool_calls] == ["update_opportunity_stage"]
    assert second.input_tokens + second.cache_read_tokens > first.input_tokens and second.output_tokens > 0
    p.close()


def test_errors_of_a_cloud_are_classified_as_the_first_party_apis_are(sim: SimServer) -> None:
    p, model = _provider(sim, "bedrock", "anthropic.claude-sonnet-5-5")  # bare id: the service refuses it
    with pytest.raises(ProviderError) as bare:
        p.generate(_req(model))
    assert (bare.value.kind, bare.value.status) == ("rejected", 400)
    p, model = _provider(sim, "azure", "gpt-5.4", azure={"deployment": "nobody-made-this"})
    with pytest.raises(ProviderError) as gone:
        p.generate(_req(model))
    assert (gone.value.kind, gone.value.status) == ("fatal", 404)
    cfg = _cfg("vertex", RUNS["vertex"])
    vertex = VertexProvider(target(cfg, cfg.runs[0].model_ref(), mode="sim"), base_url=f"{sim.url}/v1",
                            timeout=10, access_token="t", headers={"x-sim-fault": "429"})
    with pytest.raises(ProviderError) as busy:
        vertex.generate(_req(RUNS["vertex"]))
    assert (busy.value.kind, busy.value.status) == ("rate_limited", 429)


@pytest.mark.parametrize(("rate_limits", "key"), [
    ({"bedrock": {"rpm": 600}}, "bedrock"),  # a cloud is an account of its own
    ({"anthropic": {"rpm": 600, "covers": ["bedrock"]}}, "anthropic")])  # unless a budget covers it
def test_a_cloud_runs_calls_are_counted_priced_and_drawn_from_its_budget(sim: SimServer,
                                                                          rate_limits: dict[str, Any],
                                                                          key: str) -> None:
    from runner.budget.ratelimit import build_limiter
    from runner.models.client import make_client

    cfg = Config.model_validate({**_cfg("bedrock", RUNS["bedrock"]).model_dump(), "rate_limits": rate_limits})
    limiter = build_limiter(cfg)
    client = make_client(cfg.runs[0].model_ref(), client_settings(cfg), sim_url=sim.url, limiter=limiter, cache=None)
    done = client.complete(_req(RUNS["bedrock"]))
    assert done.tool_calls and done.cost_usd is not None and done.cost_usd > 0
    assert client.stats.llm_calls == 1 and client.stats.cost_usd == done.cost_usd
    tally = limiter.tally()
    assert list(tally) == [key] and tally[key].admitted == 1
    assert tally[key].used[0] == 1 and tally[key].used[2] > 0  # the request and its output tokens settled
    client.close()
