"""Vertex AI batch prediction as the gateway uses it (runner/gateway/batch_vertex.py), against the simulator's
job service and Cloud Storage: a batch submitted, watched, collected and its files deleted; an intent's job
found again by its label (a gateway killed while creating it); and how each kind of output line reads."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

import runner.gateway.batch_vertex as batch_vertex
from runner.config import BatchTurnaround, SimSettings
from runner.gateway.batch_wire import INTENT_KEY, BatchEndpoint, BatchGone, GcpBatch
from runner.models.sim.process import SimServer

MODEL = "claude-sonnet-4-5@20250929"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with SimServer(SimSettings(batches=BatchTurnaround(median_seconds=0.2))) as s:
        yield s


def _endpoint(sim: SimServer) -> BatchEndpoint:
    control = f"{sim.url}/v1/projects/p/locations/us-east5"
    gcp = GcpBatch(control, sim.url, "team", "evals/", lambda: {"authorization": "Bearer t"})
    return BatchEndpoint("vertex", control, {}, "/v1/messages", model=MODEL, gcp=gcp)


def _request(n: int) -> dict[str, Any]:
    return {"anthropic_version": "vertex-2023-10-16", "max_tokens": 100,
            "messages": [{"role": "user", "content": f"Close case {n}."}]}


def test_a_batch_is_submitted_collected_and_leaves_no_file_and_its_job_is_found_by_its_intent(
        sim: SimServer) -> None:
    ep = _endpoint(sim)

    async def scenario() -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
        async with aiohttp.ClientSession() as session:
            made_at = time.time()
            job_id, name = await batch_vertex.submit(session, ep, [("r1", _request(1)), ("r2", _request(2))], "i1")
            assert name == "evals/i1.jsonl"
            found = await batch_vertex.listed(session, ep, made_at - 60)
            for _ in range(100):
                ended, job = await batch_vertex.state(session, ep, job_id)
                if ended:
                    break
                await asyncio.sleep(0.1)
            outcomes = await batch_vertex.collect(session, ep, job)
            left = await batch_vertex._listed_names(session, ep, "")
            with pytest.raises(BatchGone):
                await batch_vertex.state(session, ep, "999")
            return outcomes, found, left

    outcomes, found, left = asyncio.run(scenario())
    assert set(outcomes) == {"r1", "r2"}
    assert all(o is not None and o[0] == 200 and o[1]["type"] == "message" for o in outcomes.values())
    assert [j["metadata"][INTENT_KEY] for j in found] == ["i1"]
    assert left == []  # the input, the predictions: deleted once read


@pytest.mark.parametrize(("line", "expected"), [
    ({"custom_id": "a", "status": "", "response": {"type": "message", "content": []}},
     (200, {"type": "message", "content": []})),
    ({"custom_id": "a", "status": "400: " + json.dumps({"error": {"code": 400, "message": "max_tokens: bad"}})},
     (400, {"error": {"code": 400, "message": "max_tokens: bad", "status": "INVALID_ARGUMENT"}})),
    ({"custom_id": "a", "status": "400: temperature out of range"},
     (400, {"error": {"code": 400, "message": "temperature out of range", "status": "INVALID_ARGUMENT"}})),
    ({"custom_id": "a", "error": {"code": 3, "message": "bad request"}},  # an errors_N file's line
     (400, {"error": {"code": 400, "message": "bad request", "status": "INVALID_ARGUMENT"}})),
    ({"custom_id": "a", "error": {"code": 13, "message": "internal"}}, None),
    ({"custom_id": "a", "status": "429: Resource exhausted"}, None),
    ({"custom_id": "a", "status": "500: Internal error"}, None),
    ({"custom_id": "a", "status": "DEADLINE_EXCEEDED"}, None),
    ({"custom_id": "a", "status": ""}, None),
])
def test_each_kind_of_output_line_is_an_answer_a_refusal_for_the_caller_or_worth_another_try(
        line: dict[str, Any], expected: Any) -> None:
    assert batch_vertex._outcome(line) == expected
