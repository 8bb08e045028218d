"""The simulator's batch APIs, spoken to by the official SDKs: Anthropic's Message Batches and OpenAI's Files +
Batches. Inside a batch a request is refused as strictly as an interactive one and answered alike."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from runner.config import BatchTurnaround, SimSettings
from runner.models.sim.batches import Batches, anthropic_create_error, openai_lines
from runner.models.sim.process import SimServer

ASK = [{"role": "user", "content": "Move the Cedar Pilot opportunity to negotiation."}]
TOOLS = [{"name": "search_opportunities", "description": "Find opportunities by name.",
          "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with SimServer(SimSettings(batches=BatchTurnaround(median_seconds=0.2))) as s:
        yield s


@pytest.fixture(scope="module")
def slow() -> Iterator[SimServer]:
    """Batches that take a minute a request and expire after two seconds."""
    with SimServer(SimSettings(batches=BatchTurnaround(median_seconds=60, window_seconds=2))) as s:
        yield s


def _claude(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="k", base_url=url, max_retries=0)


def _gpt(url: str) -> openai.OpenAI:
    return openai.OpenAI(api_key="k", base_url=f"{url}/v1", max_retries=0)


def _until(fetch: Any, done: Any, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while not done(got := fetch()):
        assert time.monotonic() < deadline, got
        time.sleep(0.1)
    return got


def test_an_anthropic_batch_answers_as_the_api_does_and_refuses_what_it_refuses(sim: SimServer) -> None:
    c = _claude(sim.url)
    params = {"model": "claude-sonnet-5-5", "max_tokens": 512, "messages": ASK, "tools": TOOLS}
    batch = c.messages.batches.create(requests=[
        {"custom_id": "good", "params": params},  # type: ignore[typeddict-item]
        {"custom_id": "no-such-model", "params": {**params, "model": "claude-nobody"}},  # type: ignore[typeddict-item]
        {"custom_id": "no-limit", "params": {"model": "claude-sonnet-5-5", "messages": ASK}},  # type: ignore[typeddict-item]
    ])
    assert batch.processing_status == "in_progress" and batch.request_counts.processing == 3
    assert batch.id.startswith("msgbatch_") and batch.results_url is None
    ended = _until(lambda: c.messages.batches.retrieve(batch.id), lambda b: b.processing_status == "ended")
    counts = ended.request_counts
    assert (counts.succeeded, counts.errored, counts.processing) == (1, 2, 0) and ended.results_url
    results = {r.custom_id: r.result for r in c.messages.batches.results(batch.id)}
    assert results["good"].type == "succeeded"
    interactive = c.messages.create(**params)  # type: ignore[call-overload]
    def moves(blocks: Any) -> list[dict[str, Any]]:  # ids and thinking signatures are per answer, as the API's are
        return [{k: v for k, v in b.model_dump().items() if k not in ("id", "signature")} for b in blocks]

    assert moves(results["good"].message.content) == moves(interactive.content)
    assert results["no-such-model"].type == "errored"
    assert results["no-such-model"].error.error.type == "not_found_error"
    assert results["no-limit"].type == "errored" and "max_tokens" in results["no-limit"].error.error.message


def test_an_anthropic_batch_is_refused_whole_for_a_bad_or_repeated_custom_id(sim: SimServer) -> None:
    c = _claude(sim.url)
    params = {"model": "claude-sonnet-5-5", "max_tokens": 16, "messages": ASK}
    for requests in ([{"custom_id": "a b", "params": params}],
                     [{"custom_id": "a", "params": params}, {"custom_id": "a", "params": params}], []):
        with pytest.raises(anthropic.BadRequestError):
            c.messages.batches.create(requests=requests)  # type: ignore[arg-type]


def test_cancel_and_expiry_end_what_was_not_done(slow: SimServer) -> None:
    c = _claude(slow.url)
    params = {"model": "claude-sonnet-5-5", "max_tokens": 16, "messages": ASK}
    first = c.messages.batches.create(requests=[{"custom_id": f"r{i}", "params": params} for i in range(3)])  # type: ignore[misc]
    assert c.messages.batches.cancel(first.id).processing_status == "canceling"
    ended = c.messages.batches.retrieve(first.id)
    assert ended.processing_status == "ended" and ended.request_counts.canceled == 3
    assert {r.result.type for r in c.messages.batches.results(first.id)} == {"canceled"}
    second = c.messages.batches.create(requests=[{"custom_id": "late", "params": params}])  # type: ignore[list-item]
    assert c.messages.batches.retrieve(second.id).processing_status == "in_progress"
    late = _until(lambda: c.messages.batches.retrieve(second.id), lambda b: b.processing_status == "ended")
    assert late.request_counts.expired == 1
    with pytest.raises(anthropic.NotFoundError):
        c.messages.batches.retrieve("msgbatch_nothing")


def test_an_openai_batch_writes_answers_and_refusals_to_their_files(sim: SimServer) -> None:
    c = _gpt(sim.url)
    body = {"model": "gpt-5.4-mini", "messages": ASK, "max_completion_tokens": 512}
    lines = [{"custom_id": "good", "method": "POST", "url": "/v1/chat/completions", "body": body},
             {"custom_id": "bad", "method": "POST", "url": "/v1/chat/completions",
              "body": {**body, "max_tokens": 64}}]  # a reasoning model refuses max_tokens
    upload = c.files.create(file=("in.jsonl", "".join(json.dumps(x) + "\n" for x in lines).encode()), purpose="batch")
    assert upload.purpose == "batch" and upload.bytes > 0
    batch = c.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert batch.status == "validating"
    done = _until(lambda: c.batches.retrieve(batch.id), lambda b: b.status == "completed")
    assert done.request_counts is not None and (done.request_counts.completed, done.request_counts.failed) == (1, 1)
    assert done.output_file_id and done.error_file_id
    out = [json.loads(x) for x in c.files.content(done.output_file_id).content.splitlines()]
    errors = [json.loads(x) for x in c.files.content(done.error_file_id).content.splitlines()]
    assert [o["custom_id"] for o in out] == ["good"] and out[0]["response"]["status_code"] == 200
    interactive = c.chat.completions.create(**body)  # type: ignore[call-overload]
    assert out[0]["response"]["body"]["choices"][0]["message"]["content"] == interactive.choices[0].message.content
    assert [e["custom_id"] for e in errors] == ["bad"] and errors[0]["response"]["status_code"] == 400
    assert errors[0]["response"]["body"]["error"]["type"] == "invalid_request_error"


def test_an_openai_batch_fails_on_a_bad_file_and_names_the_line(sim: SimServer) -> None:
    c = _gpt(sim.url)
    body = {"model": "gpt-5.4-mini", "messages": ASK, "max_completion_tokens": 16}
    text = (json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": body}) + "\n"
            + json.dumps({"custom_id": "b", "method": "POST", "url": "/v1/chat/completions",
                          "body": {**body, "model": "gpt-5.4"}}) + "\n")
    upload = c.files.create(file=("in.jsonl", text.encode()), purpose="batch")
    batch = c.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h")
    failed = c.batches.retrieve(batch.id)
    assert failed.status == "failed" and failed.errors is not None and failed.errors.data
    assert (failed.errors.data[0].code, failed.errors.data[0].line) == ("mismatched_model", 2)
    with pytest.raises(openai.BadRequestError):
        c.batches.create(input_file_id=upload.id, endpoint="/v1/embeddings", completion_window="24h")
    with pytest.raises(openai.NotFoundError):
        c.batches.create(input_file_id="file-nothing", endpoint="/v1/chat/completions", completion_window="24h")


def test_an_openai_batch_expires_or_is_cancelled_with_the_rest_in_its_error_file(slow: SimServer) -> None:
    c = _gpt(slow.url)
    body = {"model": "gpt-5.4-mini", "messages": ASK, "max_completion_tokens": 16}
    text = json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": body}) + "\n"
    upload = c.files.create(file=("in.jsonl", text.encode()), purpose="batch")
    cancelled = c.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert c.batches.cancel(cancelled.id).status == "cancelling"
    gone = c.batches.retrieve(cancelled.id)
    assert gone.status == "cancelled" and gone.error_file_id and gone.output_file_id is None
    assert json.loads(c.files.content(gone.error_file_id).content)["error"]["code"] == "batch_cancelled"
    expiring = c.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h")
    expired = _until(lambda: c.batches.retrieve(expiring.id), lambda b: b.status == "expired")
    assert expired.error_file_id
    assert json.loads(c.files.content(expired.error_file_id).content)["error"]["code"] == "batch_expired"


def test_errored_and_expired_shares_are_drawn_per_request_and_alike_when_submitted_again() -> None:
    answered: list[str] = []

    async def answer(headers: Any, api: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        answered.append(body["n"])
        return 200, {"n": body["n"]}

    async def run(settings: BatchTurnaround) -> list[tuple[str, int | None]]:
        bs = Batches(settings, answer, Counter())
        b = bs.new("anthropic", "b", [(f"r{i}", {"n": i}) for i in range(200)], {})
        while b.ended is None:
            await bs.advance(b)
            await asyncio.sleep(0.01)
        return [(i.custom_id, i.outcome[0] if i.outcome else None) for i in b.items]

    settings = BatchTurnaround(median_seconds=0.01, window_seconds=1.0, errored=0.2, expired=0.1, seed=3)
    first = asyncio.run(run(settings))
    fates = Counter(status for _, status in first)
    assert 20 <= fates[500] <= 60 and 5 <= fates[None] <= 40 and fates[200] == len(answered)
    assert asyncio.run(run(settings)) == first  # the same batch again: the same fates


def test_create_checks_name_what_is_wrong() -> None:
    assert anthropic_create_error({"requests": [{"custom_id": "x" * 65, "params": {}}]}) is not None
    assert anthropic_create_error({"requests": [{"custom_id": "ok", "params": {}}]}) is None
    entries, problems = openai_lines(b'{"custom_id": "a", "method": "GET", "url": "/v1/chat/completions", '
                                     b'"body": {}}\n', "/v1/chat/completions")
    assert entries == [] and problems[0]["code"] == "invalid_method" and problems[0]["line"] == 1
    entries, problems = openai_lines(b"not json\n", "/v1/chat/completions")
    assert problems[0]["code"] == "invalid_json_line"


def test_a_batch_outlives_the_simulators_process_as_a_providers_does(tmp_path: Any) -> None:
    async def answer(headers: Any, api: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return 200, {"echo": body["n"]}

    settings = BatchTurnaround(median_seconds=0.3)
    first = Batches(settings, answer, Counter(), str(tmp_path))
    b = first.new("openai", "batch_abc", [("a", {"n": 1}), ("b", {"n": 2})], {"x-sim-plays": "gpt-5.4"},
                  endpoint="/v1/chat/completions")
    again = Batches(settings, answer, Counter(), str(tmp_path))  # another process, the same disk
    kept = again.get("batch_abc")
    assert kept is not None and kept.headers == {"x-sim-plays": "gpt-5.4"} and kept.endpoint == b.endpoint
    assert [i.custom_id for i in kept.items] == ["a", "b"]

    async def until_ended() -> None:
        while kept.ended is None:
            await again.advance(kept)
            await asyncio.sleep(0.02)

    asyncio.run(until_ended())
    assert [i.outcome for i in kept.items] == [(200, {"echo": 1}), (200, {"echo": 2})]
    assert again.get("../etc/passwd") is None and again.get("batch_nothing") is None
