"""The clouds through the gateway (runner/gateway/routes.py, cloud_auth.py): each official cloud client,
pointed at the gateway as a user's harness is (the run's token as its credential), is answered through the
gateway's own credentials (Bedrock calls signed anew), counted, priced, cached and budgeted as a first-party
call is; a budget covering a cloud's key pays for both its calls and the first-party API's."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import boto3
import openai
import pytest
from aiohttp import web
from botocore.config import Config as BotoConfig
from google.cloud import storage as gcs
from google.oauth2.credentials import Credentials as OAuthToken

from runner.config import SIM_AWS_KEY, BatchTurnaround, Config, SimSettings
from runner.gateway import build_gateway, gateway_settings
from runner.gateway.server import Gateway
from runner.harness.base import gateway_env
from runner.models.sim.process import SimServer

TOKEN = "the-runs-token"
ASK = [{"role": "user", "content": "Move the Cedar Pilot opportunity to negotiation."}]
BEDROCK_MODEL = "us.anthropic.claude-sonnet-5-5"
VERTEX_MODEL = "claude-sonnet-4-5@20250929"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with SimServer(SimSettings()) as s:
        yield s


class Served:
    """A gateway in this process (its budget and counts inspectable), on a loop of its own thread."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway, self.loop, self.url = gateway, asyncio.new_event_loop(), ""
        self._runner = web.AppRunner(gateway.app(), access_log=None)
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> Served:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._runner.setup(), self.loop).result(10)
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        asyncio.run_coroutine_threadsafe(site.start(), self.loop).result(10)
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    def __exit__(self, *_: object) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    def stats(self) -> Any:
        req = urllib.request.Request(self.url + "/stats", headers={"x-runner-token": TOKEN})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())


def _cfg(tmp: Any, rate_limits: dict[str, Any], **extra: Any) -> Config:
    return Config.model_validate({
        "dataset": "x.jsonl", "harness": {"kind": "python", "entrypoint": "m:f"}, "runs": [{"name": "r"}],
        "cache_dir": str(tmp / "cache"), "bedrock": {"region": "us-east-1"},
        "vertex": {"project": "p", "region": "us-east5"}, "azure": {"api_version": "2024-10-21"},
        "retry": {"max_attempts": 3, "base_seconds": 0.05}, "rate_limits": rate_limits, **extra})


def _served(sim: SimServer, cfg: Config) -> Served:
    return Served(build_gateway(gateway_settings(cfg, sim_url=sim.url), token=TOKEN))


def _bedrock(env: dict[str, str]) -> anthropic.AnthropicBedrock:
    """A Bedrock client as a harness builds it from its environment (gateway_env): its base URL, and the run's
    token as its Bedrock API key (AWS_BEARER_TOKEN_BEDROCK, which the client reads itself)."""
    return anthropic.AnthropicBedrock(aws_region="us-east-1", api_key=env["AWS_BEARER_TOKEN_BEDROCK"],
                                      base_url=env["ANTHROPIC_BEDROCK_BASE_URL"], max_retries=0)


def _clients(env: dict[str, str]) -> dict[str, Any]:
    """Each cloud's client built from what a harness's environment holds: base URLs and the run's token."""
    return {"bedrock": _bedrock(env),
            "vertex": anthropic.AnthropicVertex(region="us-east5", project_id="p",
                                                access_token=env["GOOGLE_OAUTH_ACCESS_TOKEN"],
                                                base_url=env["ANTHROPIC_VERTEX_BASE_URL"], max_retries=0),
            "azure": openai.AzureOpenAI(azure_endpoint=env["AZURE_OPENAI_ENDPOINT"],
                                        api_key=env["AZURE_OPENAI_API_KEY"], api_version="2024-10-21",
                                        max_retries=0)}


def test_each_clouds_client_is_answered_through_the_gateway_counted_priced_and_cached(
        sim: SimServer, tmp_path: Any) -> None:
    cfg = _cfg(tmp_path, {"bedrock": {"rpm": 1000}, "vertex": {"rpm": 1000}, "azure": {"rpm": 1000}})
    with _served(sim, cfg) as gw:
        env = gateway_env(gw.url, "r", 1, token=TOKEN, clouds={"bedrock", "vertex", "azure"})
        clients = _clients(env)
        for _ in range(2):  # one call upstream per cloud: the rest from its answer, streamed and plain alike
            m = clients["bedrock"].messages.create(model=BEDROCK_MODEL, max_tokens=300, messages=ASK)
            with clients["bedrock"].messages.stream(model=BEDROCK_MODEL, max_tokens=300, messages=ASK) as s:
                streamed = s.get_final_message().content
            assert [b.model_dump() for b in streamed] == [b.model_dump() for b in m.content]
            v = clients["vertex"].messages.create(model=VERTEX_MODEL, max_tokens=300, messages=ASK)
            with clients["vertex"].messages.stream(model=VERTEX_MODEL, max_tokens=300, messages=ASK) as s:
                assert s.get_final_message().content[0].type == v.content[0].type
            a = clients["azure"].chat.completions.create(model="gpt-5.4", messages=ASK)
            chunks = clients["azure"].chat.completions.create(model="gpt-5.4", messages=ASK, stream=True)
            assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == \
                a.choices[0].message.content
        counts = gw.stats()["r"]
        assert counts["llm_calls"] == 12 and counts["errors"] == 0 and counts["cache_hits"] == 9
        assert counts["cost_usd"] > 0 and counts["unpriced_calls"] == 0 and counts["input_tokens"] > 0
        tally = gw.gateway.limiter.tally()  # type: ignore[union-attr]
        assert {k: t.admitted for k, t in tally.items()} == {"azure": 1, "bedrock": 1, "vertex": 1}


def test_a_budget_that_covers_a_cloud_pays_for_its_calls_and_the_first_party_apis(sim: SimServer,
                                                                                   tmp_path: Any) -> None:
    cfg = _cfg(tmp_path, {"anthropic": {"rpm": 1000, "covers": ["bedrock"]}}, cache=False)
    with _served(sim, cfg) as gw:
        env = gateway_env(gw.url, "r", 1, token=TOKEN, clouds={"bedrock"})
        first = anthropic.Anthropic(api_key=env["ANTHROPIC_API_KEY"], base_url=env["ANTHROPIC_BASE_URL"],
                                    max_retries=0)
        first.messages.create(model="claude-sonnet-5-5", max_tokens=300, messages=ASK)
        _bedrock(env).messages.create(model=BEDROCK_MODEL, max_tokens=300, messages=ASK)
        tally = gw.gateway.limiter.tally()  # type: ignore[union-attr]
        assert list(tally) == ["anthropic"] and tally["anthropic"].admitted == 2
        assert tally["anthropic"].used[0] == 2  # both requests drew on the one budget


def test_a_caller_signing_for_itself_is_refused_and_a_cloud_the_gateway_was_not_given_is_named(
        sim: SimServer, tmp_path: Any) -> None:
    cfg = Config.model_validate({"dataset": "x.jsonl", "harness": {"kind": "python", "entrypoint": "m:f"},
                                 "runs": [{"name": "r"}], "cache": False})
    with Served(build_gateway(gateway_settings(cfg), token=TOKEN)) as gw:  # real clouds, none set up
        signed = anthropic.AnthropicBedrock(aws_region="us-east-1", aws_access_key="AKIA", aws_secret_key="s",
                                            base_url=f"{gw.url}/run/r/worker/1", max_retries=0)
        with pytest.raises(anthropic.AuthenticationError):  # its own signature is not the run's token
            signed.messages.create(model=BEDROCK_MODEL, max_tokens=50, messages=ASK)
        env = gateway_env(gw.url, "r", 1, token=TOKEN, clouds={"azure"})
        azure = openai.AzureOpenAI(azure_endpoint=env["AZURE_OPENAI_ENDPOINT"], api_key=TOKEN,
                                   api_version="2024-10-21", max_retries=0)
        with pytest.raises(openai.BadRequestError, match=r"the gateway has no azure endpoint: set azure"):
            azure.chat.completions.create(model="gpt-5.4", messages=ASK)


def test_in_batch_mode_azure_calls_go_through_its_global_batch_and_a_lone_bedrock_call_goes_interactive(
        tmp_path: Any) -> None:
    """A Bedrock batch inference job takes at least 100 records: a call held alone, once a window passes with no
    other, goes interactive, its reason counted."""
    turnaround = SimSettings(batches=BatchTurnaround(median_seconds=0.2),
                             deployments={"gpt-batch": "gpt-5.4"})
    cfg = _cfg(tmp_path, {}, cache=False, output_dir=str(tmp_path / "out"),
               batch={"enabled": True, "window_seconds": 0.2, "poll_min_seconds": 0.1,
                      "poll_max_seconds": 0.5},
               azure={"api_version": "2024-10-21", "batch_deployment": "gpt-batch"})
    with SimServer(turnaround) as sim, _served(sim, cfg) as gw:
        env = gateway_env(gw.url, "r", 1, token=TOKEN, clouds={"bedrock", "azure"})
        clients = _clients({**env, "GOOGLE_OAUTH_ACCESS_TOKEN": TOKEN, "ANTHROPIC_VERTEX_BASE_URL": gw.url})
        raw = clients["azure"].chat.completions.with_raw_response.create(model="gpt-5.4", messages=ASK)
        assert raw.headers.get("x-runner-batched") == "1" and raw.parse().choices[0].message.content
        raw = clients["bedrock"].messages.with_raw_response.create(model=BEDROCK_MODEL, max_tokens=200,
                                                                  messages=ASK)
        assert raw.headers.get("x-runner-batched") is None and raw.parse().content
        batches = gw.gateway.outbound.batcher.stats  # type: ignore[union-attr]
        assert batches["batches_ended"] == 1
        assert batches["interactive: fewer than the 100 requests a bedrock batch takes were held"] == 1
        counts = gw.stats()["r"]
        assert counts["batched_calls"] == 1 and counts["llm_calls"] == 2 and counts["batch_saved_usd"] > 0


def test_in_batch_mode_vertex_calls_go_as_one_batch_prediction_job_over_cloud_storage(tmp_path: Any) -> None:
    """Through AnthropicVertex as a harness calls it, streamed and not: the requests put in the simulator's Cloud
    Storage, a batch prediction job made on them with the gateway's own token, each caller answered from its
    output at the batch price (a request rawPredict refuses, refused alike), every file of the job deleted."""
    cfg = _cfg(tmp_path, {}, cache=False, output_dir=str(tmp_path / "out"),
               batch={"enabled": True, "window_seconds": 0.5, "poll_min_seconds": 0.1, "poll_max_seconds": 0.5},
               vertex={"project": "p", "region": "us-east5", "batch_gcs_uri": "gs://team-batches/evals"})
    with SimServer(SimSettings(batches=BatchTurnaround(median_seconds=0.3))) as sim, _served(sim, cfg) as gw:
        env = gateway_env(gw.url, "r", 1, token=TOKEN, clouds={"vertex"})
        client = _clients({**env, "AWS_BEARER_TOKEN_BEDROCK": TOKEN, "ANTHROPIC_BEDROCK_BASE_URL": gw.url,
                           "AZURE_OPENAI_ENDPOINT": gw.url, "AZURE_OPENAI_API_KEY": TOKEN})["vertex"]

        def ask(n: int) -> Any:
            asked = {"model": VERTEX_MODEL, "max_tokens": 200,
                     "messages": [{"role": "user", "content": f"Close case {n}."}]}
            if n == 0:  # refused by rawPredict: so inside the job
                return client.messages.with_raw_response.create(**asked, extra_body={"temperature": 1.5})
            if n == 1:
                with client.messages.stream(**asked) as s:
                    return s.get_final_message()
            return client.messages.with_raw_response.create(**asked)

        with ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(ask, n) for n in range(6)]
        with pytest.raises(anthropic.BadRequestError, match="temperature"):
            futures[0].result()
        assert futures[1].result().content[0].type == "text"
        answers = [f.result() for f in futures[2:]]
        assert all(a.headers.get("x-runner-batched") == "1" and a.parse().content for a in answers)
        batches = gw.gateway.outbound.batcher.stats  # type: ignore[union-attr]
        assert batches["batches_submitted"] == 1 and batches["requests_answered"] == 6
        assert not any(k.startswith("interactive") for k in batches)
        counts = gw.stats()["r"]
        assert counts["batched_calls"] == 5 and counts["errors"] == 1 and counts["batch_saved_usd"] > 0
        with urllib.request.urlopen(f"{sim.url}/stats", timeout=10) as r:
            played = json.loads(r.read())
        assert played["batches"] == 1 and played["batch_requests"] == 6
        storage = gcs.Client(project="p", credentials=OAuthToken(token="t"),
                             client_options={"api_endpoint": sim.url})
        assert [b.name for b in storage.list_blobs("team-batches")] == []  # its input and output: deleted


def test_in_batch_mode_100_bedrock_calls_go_as_one_batch_inference_job_over_s3(tmp_path: Any) -> None:
    """Through AnthropicBedrock as a harness calls it: the records put in the simulator's S3, a model invocation
    job made on them (signed anew by the gateway, for s3 and bedrock), each caller answered from its output
    file at the batch price, and every object of the job deleted once read."""
    cfg = _cfg(tmp_path, {}, cache=False, output_dir=str(tmp_path / "out"),
               batch={"enabled": True, "window_seconds": 0.5, "poll_min_seconds": 0.1, "poll_max_seconds": 0.5},
               bedrock={"region": "us-east-1", "batch_s3_uri": "s3://team-batches/evals",
                        "batch_role_arn": "arn:aws:iam::123456789012:role/BedrockBatch"})
    with SimServer(SimSettings(batches=BatchTurnaround(median_seconds=0.3))) as sim, _served(sim, cfg) as gw:
        env = gateway_env(gw.url, "r", 1, token=TOKEN, clouds={"bedrock"})
        client = _bedrock(env)

        def ask(n: int) -> Any:
            return client.messages.with_raw_response.create(
                model=BEDROCK_MODEL, max_tokens=200, messages=[{"role": "user", "content": f"Close case {n}."}])

        with ThreadPoolExecutor(100) as pool:
            answers = list(pool.map(ask, range(100)))
        assert all(a.headers.get("x-runner-batched") == "1" and a.parse().content for a in answers)
        batches = gw.gateway.outbound.batcher.stats  # type: ignore[union-attr]
        assert batches["batches_submitted"] == 1 and batches["requests_answered"] == 100
        assert not any(k.startswith("interactive") for k in batches)
        assert gw.stats()["r"]["batched_calls"] == 100
        with urllib.request.urlopen(f"{sim.url}/stats", timeout=10) as r:
            played = json.loads(r.read())
        assert played["batches"] == 1 and played["batch_requests"] == 100
        s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=f"{sim.url}/s3", aws_access_key_id=SIM_AWS_KEY[0],
                          aws_secret_access_key=SIM_AWS_KEY[1], config=BotoConfig(s3={"addressing_style": "path"}))
        left = s3.list_objects_v2(Bucket="team-batches", Prefix="evals/")
        assert left["KeyCount"] == 0, left  # the input file, the output file and the manifest: all deleted
