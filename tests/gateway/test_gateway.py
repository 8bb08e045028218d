"""The gateway between the official SDKs and the simulator: retries hidden, streams relayed, answers
cached, fatal errors passed through, every call counted to its run."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import anthropic
import openai
import pytest

from tests.gateway.conftest import CACHE_DIRS

TOOLS = [{"name": "search_accounts", "description": "Find accounts.",
          "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}]


def _stats(url: str) -> Any:
    with urllib.request.urlopen(url + "/stats", timeout=10) as r:
        return json.loads(r.read())


def _settled(url: str, run: str, calls: int) -> Any:
    """A run's counts once its last call is counted: the gateway counts a relayed stream after its last
    byte went out, so a client can finish reading a moment before (the wait is for that, not a bound)."""
    import time

    for _ in range(100):
        s = _stats(url)[run]
        if s.get("llm_calls", 0) >= calls:
            return s
        time.sleep(0.05)
    return s


def _claude(gateway: str, run: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="k", base_url=f"{gateway}/run/{run}/worker/0", max_retries=0)


def test_sdk_calls_through_the_gateway_see_no_upstream_500s(gateway: str, sim: str) -> None:
    client = _claude(gateway, "plain")
    for i in range(12):
        m = client.messages.create(model="claude-sonnet-5-5", max_tokens=200, tools=TOOLS,  # type: ignore[arg-type]
                                   messages=[{"role": "user", "content": f"Find the account Acme {i}"}])
        assert m.content
    gpt = openai.OpenAI(api_key="k", base_url=f"{gateway}/run/plain/worker/1/v1", max_retries=0)
    r = gpt.chat.completions.create(model="gpt-5.4", messages=[{"role": "user", "content": "Find Acme"}])
    assert r.choices[0].message is not None
    s = _stats(gateway)["plain"]
    assert s["llm_calls"] == 13 and s["errors"] == 0 and s["retries"] > 0  # 30 % of upstream answers were 500s
    assert s["input_tokens"] > 0 and s["output_tokens"] > 0


def test_streams_are_relayed_and_a_repeat_is_served_from_the_cache(gateway: str, sim: str) -> None:
    client = _claude(gateway, "streamed")
    kw: dict[str, Any] = {"model": "claude-sonnet-5-5", "max_tokens": 200, "tools": TOOLS,
                          "messages": [{"role": "user", "content": "Find the account Globex, streamed"}]}
    with client.messages.stream(**kw) as stream:
        first = stream.get_final_message()
    with client.messages.stream(**kw) as stream:
        again = stream.get_final_message()  # replayed from the cache: still a valid stream
    assert again.model_dump(exclude={"id"}) == first.model_dump(exclude={"id"})
    gpt = openai.OpenAI(api_key="k", base_url=f"{gateway}/run/streamed/worker/0/v1", max_retries=0)
    chunks = list(gpt.chat.completions.create(model="gpt-5.4", stream=True, stream_options={"include_usage": True},
                                              messages=[{"role": "user", "content": "Find Initech"}]))
    assert chunks and chunks[-1].usage is not None
    s = _settled(gateway, "streamed", 3)
    assert s["cache_hits"] == 1 and s["llm_calls"] == 3 and s["output_tokens"] > 0


def test_one_cache_entry_serves_streaming_and_plain_callers(gateway: str) -> None:
    """A streamed answer is kept as its final message: a plain caller gets that message, and a
    streaming one a valid stream cut from a plain answer, each without an upstream call."""
    client = _claude(gateway, "both")
    kw: dict[str, Any] = {"model": "claude-sonnet-5-5", "max_tokens": 200, "tools": TOOLS,
                          "messages": [{"role": "user", "content": "Find the account Umbrella"}]}
    with client.messages.stream(**kw) as stream:
        streamed = stream.get_final_message()
    plain = client.messages.create(**kw)
    assert plain.model_dump() == streamed.model_dump()
    gpt = openai.OpenAI(api_key="k", base_url=f"{gateway}/run/both/worker/0/v1", max_retries=0)
    q: dict[str, Any] = {"model": "gpt-5.4", "tools": [{"type": "function", "function": {
        "name": "search_accounts", "parameters": TOOLS[0]["input_schema"]}}],
        "messages": [{"role": "user", "content": "Find the account Hooli"}]}
    first = gpt.chat.completions.create(**q)
    chunks = list(gpt.chat.completions.create(**q, stream=True))
    calls = [c for ch in chunks for c in (ch.choices[0].delta.tool_calls or []) if ch.choices]
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    want = first.choices[0].message
    assert text == (want.content or "")
    assert [c.function.name for c in calls if c.function and c.function.name] == \
        [c.function.name for c in want.tool_calls or []]
    s = _settled(gateway, "both", 4)
    assert s["llm_calls"] == 4 and s["cache_hits"] == 2 and s["cache_misses"] == 2


def test_a_worker_takes_its_own_calls_and_their_cost(gateway: str) -> None:
    from runner.gateway.process import take_usage

    client = anthropic.Anthropic(api_key="k", base_url=f"{gateway}/run/costed/worker/7", max_retries=0)
    take_usage(gateway, 7)
    for i in range(3):
        client.messages.create(model="claude-sonnet-5-5", max_tokens=50,
                               messages=[{"role": "user", "content": f"cost {i}"}])
    u = take_usage(gateway, 7)[0]
    assert u.llm_calls == 3 and u.input_tokens > 0 and u.cost_usd is not None and u.cost_usd > 0
    halves = take_usage(gateway, 7, parts=2)
    assert [h.llm_calls for h in halves] == [0, 0]  # taken: nothing left
    # a model the provider serves and the runner has no price for (the simulator's own, by its name)
    client.messages.create(model="sim-strong", max_tokens=50, messages=[{"role": "user", "content": "unpriced"}])
    assert take_usage(gateway, 7)[0].cost_usd is None  # unknown, never a silent $0


def test_a_request_the_api_refuses_passes_through_unchanged(gateway: str) -> None:
    client = _claude(gateway, "refused")
    with pytest.raises(anthropic.BadRequestError, match="temperature"):
        client.messages.create(model="claude-sonnet-5-5", max_tokens=10, extra_body={"temperature": 0.5},
                               messages=[{"role": "user", "content": "hi"}])
    assert _stats(gateway)["refused"].get("retries", 0) == 0


def test_keys_never_reach_the_cache(gateway: str) -> None:
    client = anthropic.Anthropic(api_key="sk-secret-do-not-store", base_url=f"{gateway}/run/k/worker/0",
                                 max_retries=0)
    client.messages.create(model="claude-sonnet-5-5", max_tokens=50, messages=[{"role": "user", "content": "key?"}])
    files = [f for f in CACHE_DIRS[0].rglob("*") if f.is_file()]
    assert files and all(b"sk-secret" not in f.read_bytes() for f in files)


def test_a_compressing_upstream_reaches_both_sdks_decoded_streamed_and_not() -> None:
    """The real APIs gzip their answers: the gateway decodes them, so callers, usage counts and the cache get
    the plain bytes (no Content-Encoding left pointing at a body that is not encoded)."""
    import gzip

    from runner.config import Config, SimSettings
    from runner.gateway.process import GatewayServer
    from runner.models.sim.process import SimServer

    with SimServer(SimSettings(compress=True)) as sim:
        ask = urllib.request.Request(f"{sim.url}/v1/messages", method="POST", headers={
            "x-api-key": "k", "content-type": "application/json", "accept-encoding": "gzip"},
            data=json.dumps({"model": "claude-sonnet-5-5", "max_tokens": 2000,
                             "messages": [{"role": "user", "content": "hi"}]}).encode())
        with urllib.request.urlopen(ask, timeout=10) as r:  # urllib does not decode: the bytes as sent
            assert r.headers["content-encoding"] == "gzip" and json.loads(gzip.decompress(r.read()))["content"]
        cfg = Config(dataset="x.jsonl", harness={"kind": "python", "entrypoint": "m:f"}, runs=[{"name": "r"}],
                     cache=False)
        with GatewayServer(cfg, sim_url=sim.url) as gw:
            claude = _claude(gw.url, "gz")
            kw: dict[str, Any] = {"model": "claude-sonnet-5-5", "max_tokens": 2000, "tools": TOOLS,
                                  "messages": [{"role": "user", "content": "Find the account Umbrella"}]}
            plain = claude.messages.create(**kw)
            with claude.messages.stream(**kw) as stream:
                streamed = stream.get_final_message()
            assert plain.content and [b.type for b in plain.content] == [b.type for b in streamed.content]
            gpt = openai.OpenAI(api_key="k", base_url=f"{gw.url}/run/gz/worker/0/v1", max_retries=0)
            q: dict[str, Any] = {"model": "gpt-5.4", "messages": [{"role": "user", "content": "Find Hooli"}]}
            assert gpt.chat.completions.create(**q).choices[0].message is not None
            assert [c for c in gpt.chat.completions.create(**q, stream=True) if c.choices]
            s = _settled(gw.url, "gz", 4)
            assert s["llm_calls"] == 4 and s["errors"] == 0 and s["input_tokens"] > 0 and s["output_tokens"] > 0


def test_each_trial_has_cache_keys_of_its_own_and_the_first_keys_as_a_single_trial(gateway: str) -> None:
    """Repeated trials (epochs) are independent samples, not replays of the first trial's cached answers."""
    from runner.gateway.process import set_trial, take_usage

    client = anthropic.Anthropic(api_key="k", base_url=f"{gateway}/run/trials/worker/9", max_retries=0)

    def ask() -> Any:
        client.messages.create(model="claude-sonnet-5-5", max_tokens=50,
                               messages=[{"role": "user", "content": "the same question each trial"}])
        return take_usage(gateway, 9)[0]

    take_usage(gateway, 9)
    assert ask().cache_hits == 0 and ask().cache_hits == 1  # one trial: asked again, answered from the cache
    set_trial(gateway, 9, 2)
    assert ask().cache_hits == 0 and ask().cache_hits == 1  # trial 2: its own entry, then its own hits
    set_trial(gateway, 9, 1)
    assert ask().cache_hits == 1  # back to trial 1: the single-trial entry
