"""Batch mode through the gateway: callers' blocking SDK calls held, sent as one batch per provider and model,
each caller answered with what an interactive call would have got (streamed ones too), at half the price;
a gateway killed with batches out is replaced by one that collects them instead of sending them again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from runner.config import BatchTurnaround, SimSettings
from runner.models.capabilities import lookup
from runner.models.sim.process import SimServer
from runner.models.usage import Tokens, cost

ASKS = ["Move the Cedar Pilot opportunity to negotiation.", "Log a deal for Vertex Foods.",
        "Find the contact for Blue Harbor.", "Close the Atlas Freight opportunity as won."]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with SimServer(SimSettings(batches=BatchTurnaround(median_seconds=0.5, p95_seconds=1.5))) as s:
        yield s


TOKEN = "a-batch-gateway-token"


def _gateway(tmp: Path, sim_url: str, *, window: float = 0.5, more: str = "") -> tuple[subprocess.Popen[str], str]:
    tmp.mkdir(parents=True, exist_ok=True)
    cfg = tmp / "gw.yaml"
    cfg.write_text(f"cache: false\nout: {tmp / 'out'}\nbatch: {{enabled: true, window_seconds: {window}, "
                   f"poll_min_seconds: 0.2, poll_max_seconds: 1{more}}}\n")
    env = {**{k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}, "RUNNER_GATEWAY_TOKEN": TOKEN}
    p = subprocess.Popen([sys.executable, "-m", "runner", "gateway", str(cfg), "--port", "0", "--upstream-sim",
                          sim_url], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    said = []
    while p.stdout is not None and not (line := p.stdout.readline()).startswith("listening on "):
        said.append(line)
        assert line and len(said) < 50, "".join(said)
    return p, line.split()[-1]


def _stop(p: subprocess.Popen[str]) -> None:
    p.terminate()
    p.wait(10)


def _get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(urllib.request.Request(url, headers={"x-runner-token": TOKEN}), timeout=10) as r:
        return dict(json.loads(r.read()))


def _claude(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=TOKEN, base_url=f"{url}/run/r/worker/0", max_retries=0, timeout=120)


def _ask(client: anthropic.Anthropic, text: str, *, stream: bool = False) -> Any:
    kw: Any = {"model": "claude-sonnet-5-5", "max_tokens": 256, "messages": [{"role": "user", "content": text}]}
    if not stream:
        return client.messages.create(**kw)
    with client.messages.stream(**kw) as s:
        return s.get_final_message()


def test_concurrent_callers_share_one_batch_and_get_the_interactive_answers(sim: SimServer, tmp_path: Path) -> None:
    p, url = _gateway(tmp_path, sim.url)
    try:
        client = _claude(url)
        with ThreadPoolExecutor(len(ASKS) + 1) as pool:  # blocking callers, as a harness's threads are
            plain = list(pool.map(lambda t: _ask(client, t), ASKS))
        streamed = _ask(client, ASKS[0], stream=True)
        stats = _get(f"{url}/batches")
        direct = anthropic.Anthropic(api_key="sim-key", base_url=sim.url, max_retries=0)
        for text, got in zip(ASKS, plain, strict=True):
            alone = direct.messages.create(model="claude-sonnet-5-5", max_tokens=256,
                                           messages=[{"role": "user", "content": text}],
                                           extra_headers={"x-sim-plays": "claude-sonnet-5-5"})
            assert [b.type for b in got.content] == [b.type for b in alone.content]
            assert got.stop_reason == alone.stop_reason
        assert [b.type for b in streamed.content] == [b.type for b in plain[0].content]
        assert stats["batches_submitted"] == 2 and stats["requests_answered"] == 5  # 4 together, then 1
        assert (stats["held_now"], stats["out_now"], stats["batches_out"]) == (0, 0, 0)  # nothing left waiting
        run = _get(f"{url}/stats")["r"]
        assert run["llm_calls"] == 5 and run["cost_usd"] > 0
    finally:
        _stop(p)


def test_openai_callers_are_batched_too_and_a_refusal_comes_back_as_its_400(sim: SimServer, tmp_path: Path) -> None:
    p, url = _gateway(tmp_path, sim.url, window=0.3)
    try:
        client = openai.OpenAI(api_key=TOKEN, base_url=f"{url}/run/r/worker/0/v1", max_retries=0, timeout=120)
        reply = client.chat.completions.create(model="gpt-5.4-mini", max_completion_tokens=256,
                                               messages=[{"role": "user", "content": ASKS[1]}])
        assert reply.choices[0].message is not None and reply.usage is not None
        with pytest.raises(openai.BadRequestError):  # a reasoning model refuses max_tokens, batched or not
            client.chat.completions.create(model="gpt-5.4-mini", max_tokens=64,
                                           messages=[{"role": "user", "content": ASKS[1]}])
        assert _get(f"{url}/batches")["batches_submitted"] == 2
    finally:
        _stop(p)


def test_the_providers_batch_queue_limit_is_kept(sim: SimServer, tmp_path: Path) -> None:
    """With room for two requests in the provider's queue, four callers go out as two batches of two, the
    second once the first has ended."""
    p, url = _gateway(tmp_path, sim.url, window=0.2, more=", max_queued: {anthropic: 2}")
    try:
        client = _claude(url)
        with ThreadPoolExecutor(len(ASKS)) as pool:
            assert all(r.content for r in pool.map(lambda t: _ask(client, t), ASKS))
        stats = _get(f"{url}/batches")
        assert stats["batches_submitted"] == 2 and stats["requests_answered"] == 4
        assert stats["flushes_waiting_for_queue"] >= 1
    finally:
        _stop(p)


def test_past_its_retries_a_request_goes_interactive_or_fails_as_configured(tmp_path: Path) -> None:
    """A provider whose every batched request errors: with `then: interactive` the caller still gets its
    answer (at full price, counted as such); with `then: error`, the provider's error."""
    with SimServer(SimSettings(batches=BatchTurnaround(median_seconds=0.1, errored=1.0))) as failing:
        p, url = _gateway(tmp_path / "i", failing.url, window=0.1, more=", retries: 1, then: interactive")
        try:
            assert _ask(_claude(url), ASKS[3]).content
            stats = _get(f"{url}/batches")
            assert stats["batches_submitted"] == 2 and stats["requests_sent_interactive"] == 1
            assert _get(f"{url}/stats")["r"]["llm_calls"] == 1
        finally:
            _stop(p)
        p, url = _gateway(tmp_path / "e", failing.url, window=0.1, more=", retries: 0, then: error")
        try:
            with pytest.raises(anthropic.InternalServerError, match="gave up after 1 batch"):
                _ask(_claude(url), ASKS[3])
        finally:
            _stop(p)


def test_a_gateway_killed_with_a_batch_out_is_followed_by_one_that_collects_it(tmp_path: Path) -> None:
    """Batches that take 3 s: kill -9 the gateway once its batch is out, start another on the same output;
    the caller asking again is answered from that batch, and no new batch goes out."""
    with SimServer(SimSettings(batches=BatchTurnaround(median_seconds=3.0))) as slow:
        p, url = _gateway(tmp_path, slow.url, window=0.2)
        client = _claude(url)
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(_ask, client, ASKS[2])
            journal = tmp_path / "out" / "batches.jsonl"
            deadline = time.monotonic() + 30
            while '"submitted"' not in (journal.read_text() if journal.exists() else ""):
                assert time.monotonic() < deadline, "no batch went out"
                time.sleep(0.05)
            os.kill(p.pid, signal.SIGKILL)
            p.wait(10)
            with pytest.raises(anthropic.APIConnectionError):
                first.result(timeout=30)
        p, url = _gateway(tmp_path, slow.url, window=0.2)
        try:
            again = _ask(_claude(url), ASKS[2])
            assert again.content
            stats = _get(f"{url}/batches")
            assert stats.get("batches_submitted", 0) == 0 and stats["answered_from_resumed"] == 1
            submitted = [json.loads(x) for x in journal.read_text().splitlines() if '"submitted"' in x]
            assert len(submitted) == 1  # one batch paid for, in both lives
        finally:
            _stop(p)


def test_the_default_job_in_batch_mode_ends_as_it_does_interactively_at_half_the_price(tmp_path: Path,
                                                                                       local_bindir: str) -> None:
    """The built-in agents (a baseline and Atlas with its teacher) through batches: every record's outcome as
    in the interactive run, exactly once, each call billed at half the price."""
    from tests.runs import finish, rows_of, run_config, start_run

    extra = ("simulator: {batches: {median_seconds: 0.05}}\n"
             "batch: {window_seconds: 0.05, poll_min_seconds: 0.05, poll_max_seconds: 0.1}\n")
    outcomes, usages = {}, {}
    for mode in ("interactive", "batch"):
        out = tmp_path / mode
        args = ["--sandbox", "local", "-w", "2", "--limit", "2"] + (["--batch"] if mode == "batch" else [])
        code, log = finish(start_run(run_config(tmp_path, extra=extra), out, *args), timeout=300)
        assert code == 0, log[-3000:]
        rows = [r for run in ("strong", "atlas") for r in rows_of(out, run)]
        assert len(rows) == len({(r["run"], r["record_id"]) for r in rows}) == 4
        outcomes[mode] = {(r["run"], r["record_id"]): (r["status"], r["success"], r["metrics"]) for r in rows}
        usages[mode] = {r["record_id"]: r["usage"] for r in rows if r["run"] == "strong"}
        if mode == "batch":
            journal = [json.loads(x) for x in (out / "batches.jsonl").read_text().splitlines()]
            assert any(e["event"] == "collected" for e in journal)
            assert "batch mode for atlas, strong" in log
            manifest = json.loads((out / "manifest.json").read_text())
            assert manifest["batch_runs"] == ["atlas", "strong"] and manifest["batches"]["batches_submitted"] > 0
            assert manifest["batches"]["requests_answered"] == sum(r["usage"]["llm_calls"] for r in rows)
            assert 'id="batched"' in (out / "report.html").read_text()  # the report says it above its numbers
            for run in ("strong", "atlas"):  # one source of truth: what each run's results say is what was billed
                reported = sum(r["usage"]["cost_usd"] for r in rows_of(out, run))
                assert manifest["gateway"][run]["cost_usd"] == pytest.approx(reported, rel=1e-6), run
    assert outcomes["batch"] == outcomes["interactive"]
    # the baseline calls one model: its cost is its tokens at that model's prices, halved (which tokens were
    # cache reads depends on what ran beside it, in either mode); in batches its prompt-cache writes are the
    # one-hour kind (Anthropic's batch docs advise it), billed at 2 x input, and what it saved is the other half
    prices = lookup("claude-sonnet-5-5", "anthropic").prices
    assert prices is not None
    for rid, u in usages["batch"].items():
        full, _, _ = cost(prices, Tokens(u["input_tokens"], u["output_tokens"], u["cache_write_tokens"],
                                         u["cache_read_tokens"], u["cache_write_1h_tokens"]))
        assert full and u["cost_usd"] == pytest.approx(full / 2, rel=1e-4), rid
        assert u["batch_saved_usd"] == pytest.approx(full / 2, rel=1e-3) and u["batched_calls"] == u["llm_calls"]
        assert u["cache_write_1h_tokens"] == u["cache_write_tokens"]
        assert u["llm_calls"] == usages["interactive"][rid]["llm_calls"]


def test_a_batched_job_killed_with_batches_out_resumes_without_sending_them_again(tmp_path: Path,
                                                                                 local_bindir: str) -> None:
    """kill -9 of the supervisor once a batch is out (batches take 1 s), then the same command: that batch
    is collected, no request goes out twice, every record once."""
    from tests.runs import finish, rows_of, run_config, start_run

    extra = ("simulator: {batches: {median_seconds: 1.0}}\n"
             "batch: {enabled: true, window_seconds: 0.2, poll_min_seconds: 0.1, poll_max_seconds: 0.3}\n")
    cfg, out = run_config(tmp_path, runs="strong", extra=extra), tmp_path / "out"
    args = ("--sandbox", "local", "-w", "2", "--limit", "2")
    p = start_run(cfg, out, *args)
    journal = out / "batches.jsonl"
    deadline = time.monotonic() + 60
    while '"submitted"' not in (journal.read_text() if journal.exists() else ""):
        assert p.poll() is None and time.monotonic() < deadline, "no batch went out"
        time.sleep(0.05)
    p.kill()
    p.wait()
    code, log = finish(start_run(cfg, out, *args), timeout=300)
    assert code == 0, log[-3000:]
    assert "left out by an earlier run: collecting them" in (out / "logs" / "gateway.log").read_text()
    rows = rows_of(out, "strong")
    assert sorted(r["record_id"] for r in rows) == sorted({r["record_id"] for r in rows}) and len(rows) == 2
    sent = [key for e in map(json.loads, journal.read_text().splitlines()) if e["event"] == "submitted"
            for key in e["keys"].values()]
    assert len(sent) == len(set(sent)), "a request went out in two batches"


def test_the_providers_queued_tokens_limit_is_kept(sim: SimServer, tmp_path: Path) -> None:
    """OpenAI's enqueued-token limit, per model: with room for about two of these requests' input tokens,
    four callers go out as batches of at most two, the next once one has ended."""
    body_tokens = len(json.dumps({"model": "gpt-5.4-mini", "max_completion_tokens": 256,
                                  "messages": [{"role": "user", "content": ASKS[0]}]})) // 4
    p, url = _gateway(tmp_path, sim.url, window=0.2,
                      more=f", max_queued_tokens: {{openai/gpt-5.4-mini: {2 * body_tokens + 10}}}")
    try:
        client = openai.OpenAI(api_key=TOKEN, base_url=f"{url}/run/r/worker/0/v1", max_retries=0, timeout=120)
        with ThreadPoolExecutor(len(ASKS)) as pool:
            replies = list(pool.map(lambda t: client.chat.completions.create(
                model="gpt-5.4-mini", max_completion_tokens=256, messages=[{"role": "user", "content": t}]), ASKS))
        assert all(r.choices[0].message is not None for r in replies)
        stats = _get(f"{url}/batches")
        assert stats["batches_submitted"] >= 2 and stats["requests_answered"] == 4
        assert stats["flushes_waiting_for_queue"] >= 1
    finally:
        _stop(p)


def test_two_conversations_asking_alike_each_get_their_own_request_and_a_retry_joins_its_own(sim: SimServer,
                                                                                             tmp_path: Path) -> None:
    """The same request from two callers both waiting is two requests, paid twice, as interactively; one
    asked again by an SDK that timed out waiting joins the request it left held, paid once."""
    p, url = _gateway(tmp_path, sim.url, window=0.3)
    try:
        client = _claude(url)
        with ThreadPoolExecutor(2) as pool:
            assert all(r.content for r in pool.map(lambda _: _ask(client, ASKS[2]), range(2)))
        stats = _get(f"{url}/batches")
        assert (stats["requests_answered"], stats.get("requests_joined", 0)) == (2, 0)
        # a caller that gives up after 0.2 s and tries again: its tries join the one request held
        impatient = anthropic.Anthropic(api_key=TOKEN, base_url=f"{url}/run/r/worker/0", max_retries=20,
                                        timeout=0.2)
        assert _ask(impatient, ASKS[3]).content
        after = _get(f"{url}/batches")
        assert after["requests_answered"] == 3  # one request in one batch, however many tries
        assert after.get("requests_joined", 0) + after.get("answers_kept_for_a_retry", 0) >= 1
    finally:
        _stop(p)


def _sim_stats(sim: SimServer) -> dict[str, Any]:
    return dict(sim.stats())


def test_a_batch_apis_429_is_waited_out_as_its_retry_after_says(tmp_path: Path) -> None:
    """The first two creates answered 429 with retry-after 1 s: the gateway asks again after what the API said
    (the try not spent: no call leaves batch mode), and the call is answered through a batch."""
    settings = BatchTurnaround(median_seconds=0.1, busy_first=2, retry_after_seconds=1.0)
    with SimServer(SimSettings(batches=settings)) as busy:
        p, url = _gateway(tmp_path, busy.url, window=0.1, more=", retries: 0, then: error")
        try:
            started = time.monotonic()
            assert _ask(_claude(url), ASKS[0]).content
            took = time.monotonic() - started
            stats = _get(f"{url}/batches")
        finally:
            _stop(p)
        assert stats["batch_create_waits"] == 2 and stats["batches_submitted"] == 1
        assert not any(k.startswith("interactive: ") for k in stats)
        assert took >= 2.0  # two waits of the retry-after's second, not the 2 s / 4 s of a guessed backoff
        assert _sim_stats(busy)["batch_create_429"] == 2


def test_a_batch_that_fails_validation_goes_interactive_with_its_reason_counted(tmp_path: Path) -> None:
    """An OpenAI batch refused for its model's enqueued-token limit with nothing of ours queued before it
    (waiting cannot help): past its retries the call goes interactive, and why is counted and kept."""
    settings = BatchTurnaround(median_seconds=0.1, enqueued_tokens={"sim-strong": 5})
    with SimServer(SimSettings(batches=settings)) as limited:
        p, url = _gateway(tmp_path, limited.url, window=0.1, more=", retries: 1, then: interactive")
        try:
            client = openai.OpenAI(api_key=TOKEN, base_url=f"{url}/run/r/worker/0/v1", max_retries=0, timeout=120)
            answer = client.chat.completions.create(model="gpt-5.4", messages=[{"role": "user", "content": ASKS[1]}])
            stats = _get(f"{url}/batches")
        finally:
            _stop(p)
        deleted = _sim_stats(limited).get("files_deleted", 0)
    assert answer.choices[0].message is not None
    reasons = {k: v for k, v in stats.items() if k.startswith("interactive: ")}
    assert list(reasons.values()) == [1] and "Enqueued token limit reached for sim-strong" in next(iter(reasons))
    assert stats["requests_sent_interactive"] == 1 and stats["batches_submitted"] == 2
    assert deleted >= 2  # each failed batch's upload removed


def test_the_responses_api_is_batched_and_every_uploaded_file_is_deleted_once_read(sim: SimServer,
                                                                                    tmp_path: Path) -> None:
    p, url = _gateway(tmp_path, sim.url, window=0.2)
    try:
        client = openai.OpenAI(api_key=TOKEN, base_url=f"{url}/run/r/worker/0/v1", max_retries=0, timeout=120)
        files_before = _sim_stats(sim).get("files_deleted", 0)
        answer = client.responses.create(model="gpt-5.4", input=ASKS[2], max_output_tokens=500)
        stats = _get(f"{url}/batches")
    finally:
        _stop(p)
    assert answer.status == "completed" and answer.output
    assert stats["batches_submitted"] == 1 and stats.get("interactive_unbatchable", 0) == 0
    assert _sim_stats(sim)["files_deleted"] - files_before == 2  # the input file and the output file


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_a_gateway_killed_while_it_creates_a_batch_is_followed_by_one_that_finds_it(tmp_path: Path,
                                                                                    provider: str) -> None:
    """kill -9 during the create call (the provider makes the batch and the answer never arrives), then the same
    gateway again and the same call: the batch is found (OpenAI's by the intent in its metadata, Anthropic's by
    its results holding the intent's custom ids) and answers it; no request goes into a second batch."""
    settings = BatchTurnaround(median_seconds=0.5, create_seconds=3.0)
    with SimServer(SimSettings(batches=settings)) as slow:
        p, url = _gateway(tmp_path, slow.url, window=0.1)

        def ask(base: str) -> Any:
            if provider == "anthropic":
                return _ask(_claude(base), ASKS[3]).content
            client = openai.OpenAI(api_key=TOKEN, base_url=f"{base}/run/r/worker/0/v1", max_retries=0, timeout=120)
            return client.chat.completions.create(model="gpt-5.4", messages=[{"role": "user", "content": ASKS[3]}])

        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(ask, url)
            deadline = time.monotonic() + 30
            while _sim_stats(slow).get("batches", 0) < 1:  # the provider has made it; its answer is 3 s away
                assert time.monotonic() < deadline, "no batch was created"
                time.sleep(0.05)
            os.kill(p.pid, signal.SIGKILL)
            p.wait(10)
            with pytest.raises((anthropic.APIConnectionError, openai.APIConnectionError)):
                first.result(timeout=30)
        journal = (tmp_path / "out" / "batches.jsonl").read_text()
        assert '"intend"' in journal and '"submitted"' not in journal  # killed between the two
        p, url = _gateway(tmp_path, slow.url, window=0.1)
        try:
            assert ask(url)
            stats = _get(f"{url}/batches")
        finally:
            _stop(p)
        served = _sim_stats(slow)
    assert served["batches"] == 1 and served["batch_requests"] == 1  # paid once, in both lives
    assert stats.get("batches_submitted", 0) == 0 and stats["intents_recovered"] == 1
    assert stats["answered_from_resumed"] == 1 and stats["batches_out"] == 0
