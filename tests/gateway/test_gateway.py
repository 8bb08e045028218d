"""The gateway between the official SDKs and the simulator: retries hidden, streams relayed, answers
cached, fatal errors passed through, every call counted to its run."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import anthropic
import openai
import pytest

from tests.gateway.conftest import CACHE_DIRS, TOKEN

TOOLS = [{"name": "search_accounts", "description": "Find accounts.",
          "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}]


def _stats(url: str) -> Any:
    with urllib.request.urlopen(urllib.request.Request(url + "/stats", headers={"x-runner-token": TOKEN}),
                                timeout=10) as r:
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
    return anthropic.Anthropic(api_key=TOKEN, base_url=f"{gateway}/run/{run}/worker/0", max_retries=0)


def test_sdk_calls_through_the_gateway_see_no_upstream_500s(gateway: str, sim: str) -> None:
    client = _claude(gateway, "plain")
    for i in range(12):
        m = client.messages.create(model="claude-sonnet-5-5", max_tokens=200, tools=TOOLS,  # type: ignore[arg-type]
                                   messages=[{"role": "user", "content": f"Find the account Acme {i}"}])
        assert m.content
    gpt = openai.OpenAI(api_key=TOKEN, base_url=f"{gateway}/run/plain/worker/1/v1", max_retries=0)
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
    gpt = openai.OpenAI(api_key=TOKEN, base_url=f"{gateway}/run/streamed/worker/0/v1", max_retries=0)
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
    gpt = openai.OpenAI(api_key=TOKEN, base_url=f"{gateway}/run/both/worker/0/v1", max_retries=0)
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

    client = anthropic.Anthropic(api_key=TOKEN, base_url=f"{gateway}/run/costed/worker/7", max_retries=0)
    take_usage(gateway, TOKEN, 7)
    for i in range(3):
        client.messages.create(model="claude-sonnet-5-5", max_tokens=50,
                               messages=[{"role": "user", "content": f"cost {i}"}])
    u = take_usage(gateway, TOKEN, 7)[0]
    assert u.llm_calls == 3 and u.input_tokens > 0 and u.cost_usd is not None and u.cost_usd > 0
    halves = take_usage(gateway, TOKEN, 7, parts=2)
    assert [h.llm_calls for h in halves] == [0, 0]  # taken: nothing left
    # a model the provider serves and the runner has no price for (the simulator's own, by its name)
    client.messages.create(model="sim-strong", max_tokens=50, messages=[{"role": "user", "content": "unpriced"}])
    assert take_usage(gateway, TOKEN, 7)[0].cost_usd is None  # unknown, never a silent $0


def test_a_request_the_api_refuses_passes_through_unchanged(gateway: str) -> None:
    client = _claude(gateway, "refused")
    with pytest.raises(anthropic.BadRequestError, match="temperature"):
        client.messages.create(model="claude-sonnet-5-5", max_tokens=10, extra_body={"temperature": 0.5},
                               messages=[{"role": "user", "content": "hi"}])
    assert _stats(gateway)["refused"].get("retries", 0) == 0


def test_keys_never_reach_the_cache(gateway: str) -> None:
    client = anthropic.Anthropic(api_key=TOKEN, base_url=f"{gateway}/run/k/worker/0", max_retries=0)
    client.messages.create(model="claude-sonnet-5-5", max_tokens=50, messages=[{"role": "user", "content": "key?"}])
    files = [f for f in CACHE_DIRS[0].rglob("*") if f.is_file()]
    assert files and all(TOKEN.encode() not in f.read_bytes() for f in files)


def test_a_compressing_upstream_reaches_both_sdks_decoded_streamed_and_not() -> None:
    """The real APIs gzip their answers: the gateway decodes them, so callers, usage counts and the cache get
    the plain bytes (no Content-Encoding left pointing at a body that is not encoded)."""
    import gzip

    from runner.config import Config, SimSettings
    from runner.gateway import gateway_settings
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
        with GatewayServer(gateway_settings(cfg, sim_url=sim.url), TOKEN) as gw:
            claude = _claude(gw.url, "gz")
            kw: dict[str, Any] = {"model": "claude-sonnet-5-5", "max_tokens": 2000, "tools": TOOLS,
                                  "messages": [{"role": "user", "content": "Find the account Umbrella"}]}
            plain = claude.messages.create(**kw)
            with claude.messages.stream(**kw) as stream:
                streamed = stream.get_final_message()
            assert plain.content and [b.type for b in plain.content] == [b.type for b in streamed.content]
            gpt = openai.OpenAI(api_key=TOKEN, base_url=f"{gw.url}/run/gz/worker/0/v1", max_retries=0)
            q: dict[str, Any] = {"model": "gpt-5.4", "messages": [{"role": "user", "content": "Find Hooli"}]}
            assert gpt.chat.completions.create(**q).choices[0].message is not None
            assert [c for c in gpt.chat.completions.create(**q, stream=True) if c.choices]
            s = _settled(gw.url, "gz", 4)
            assert s["llm_calls"] == 4 and s["errors"] == 0 and s["input_tokens"] > 0 and s["output_tokens"] > 0


def test_each_trial_has_cache_keys_of_its_own_and_the_first_keys_as_a_single_trial(gateway: str) -> None:
    """Repeated trials (epochs) are independent samples, not replays of the first trial's cached answers."""
    from runner.gateway.process import set_trial, take_usage

    client = anthropic.Anthropic(api_key=TOKEN, base_url=f"{gateway}/run/trials/worker/9", max_retries=0)

    def ask() -> Any:
        client.messages.create(model="claude-sonnet-5-5", max_tokens=50,
                               messages=[{"role": "user", "content": "the same question each trial"}])
        return take_usage(gateway, TOKEN, 9)[0]

    take_usage(gateway, TOKEN, 9)
    assert ask().cache_hits == 0 and ask().cache_hits == 1  # one trial: asked again, answered from the cache
    set_trial(gateway, TOKEN, 9, 2)
    assert ask().cache_hits == 0 and ask().cache_hits == 1  # trial 2: its own entry, then its own hits
    set_trial(gateway, TOKEN, 9, 1)
    assert ask().cache_hits == 1  # back to trial 1: the single-trial entry


def test_a_call_without_the_runs_token_is_refused_and_spends_nothing(gateway: str, sim: str) -> None:
    """Any local process reaches the gateway's port: without the run's token it gets a 401 in the API's own
    shape, no upstream call is made, nothing is counted, and the control endpoints refuse it too."""
    def served() -> int:
        with urllib.request.urlopen(f"{sim}/stats", timeout=10) as r:
            return int(json.loads(r.read()).get("requests", 0))

    before, counted = served(), _stats(gateway)
    for key in ("sk-anything", "sim-key", ""):
        with pytest.raises((anthropic.AuthenticationError, anthropic.APIStatusError)) as e:
            anthropic.Anthropic(api_key=key or "x", base_url=f"{gateway}/run/thief/worker/0", max_retries=0,
                                default_headers={} if key else {"x-api-key": ""}).messages.create(
                model="claude-sonnet-5-5", max_tokens=10, messages=[{"role": "user", "content": "free?"}])
        assert e.value.status_code == 401
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(api_key="sk-anything", base_url=f"{gateway}/run/thief/worker/0/v1", max_retries=0
                      ).chat.completions.create(model="gpt-5.4", messages=[{"role": "user", "content": "free?"}])
    for path, method in (("/workers/0/take", "POST"), ("/workers/0/trial/5", "POST"), ("/stats", "GET"),
                         ("/batches", "GET")):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(gateway + path, method=method,
                                                          data=b"" if method == "POST" else None), timeout=10)
        assert refused.value.code == 401
    with urllib.request.urlopen(gateway + "/health", timeout=10) as r:  # whether it serves, and nothing more
        assert json.loads(r.read()) == {"ok": True}
    assert served() == before and _stats(gateway) == counted and "thief" not in counted


def test_upstream_calls_go_through_the_proxy_and_trust_store_the_environment_names(tmp_path: Any) -> None:
    """As the SDKs do: HTTPS_PROXY (a CONNECT tunnel), NO_PROXY, and a CA bundle in SSL_CERT_FILE; the upstream
    an HTTPS simulator whose certificate only that bundle trusts."""
    import os
    import select
    import socket
    import subprocess
    import sys
    import threading
    from pathlib import Path

    from runner.config import SimSettings
    from runner.models.sim.process import SimServer

    data = Path(__file__).parents[1] / "models" / "data"
    seen: list[str] = []

    def tunnel(client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            head += client.recv(4096)
        line = head.split(b"\r\n", 1)[0].decode()
        seen.append(line)
        host, port = line.split()[1].rsplit(":", 1)
        upstream = socket.create_connection((host, int(port)))
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        pair = {client: upstream, upstream: client}
        while True:
            ready, _, _ = select.select(list(pair), [], [], 10)
            if not ready:
                break
            for s in ready:
                chunk = s.recv(65536)
                if not chunk:
                    return
                pair[s].sendall(chunk)

    proxy = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=lambda: [threading.Thread(target=tunnel, args=(proxy.accept()[0],), daemon=True).start()
                                     for _ in range(8)], daemon=True).start()
    with SimServer(SimSettings(tls_cert=str(data / "localhost-test-cert.pem"),
                               tls_key=str(data / "localhost-test-key.pem"))) as sim:
        upstream = sim.url.replace("http://", "https://")  # the test certificate names 127.0.0.1
        cfg = tmp_path / "gw.yaml"
        cfg.write_text("cache: false\n")
        env = {**{k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}, "RUNNER_GATEWAY_TOKEN": TOKEN,
               "HTTPS_PROXY": f"http://127.0.0.1:{proxy.getsockname()[1]}", "NO_PROXY": "",
               "SSL_CERT_FILE": str(data / "localhost-test-cert.pem"), "ANTHROPIC_API_KEY": "sk-real",
               "ANTHROPIC_BASE_URL": upstream}
        p = subprocess.Popen([sys.executable, "-m", "runner", "gateway", str(cfg), "--port", "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        try:
            url = (p.stdout.readline() if p.stdout else "").split()[-1]
            client = anthropic.Anthropic(api_key=TOKEN, base_url=f"{url}/run/p/worker/0", max_retries=0)
            answer = client.messages.create(model="claude-sonnet-5-5", max_tokens=50,
                                            messages=[{"role": "user", "content": "through the proxy"}])
        finally:
            p.terminate()
            p.wait(10)
    assert answer.content and seen and seen[0].startswith("CONNECT 127.0.0.1:")
