"""The clouds' official clients against the simulator (runner/models/sim/bedrock.py, vertex.py, azure.py):
AnthropicBedrock, AnthropicVertex and AzureOpenAI, streamed and not; and what each service refuses, in its
own shape (clouds.yaml), for requests the SDKs would not send."""

from __future__ import annotations

import datetime as dt
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any
from unittest import mock

import anthropic
import openai
import pytest

from runner.config import BatchTurnaround, Limits, SimSettings
from runner.models.sim.process import SimServer

KEYS = {"aws_access_key": "AKIATESTTESTTESTTEST", "aws_secret_key": "secret"}
PROFILE = "us.anthropic.claude-sonnet-5-5"
ASK = [{"role": "user", "content": "Move the Cedar Pilot opportunity to negotiation."}]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    settings = SimSettings(deployments={"my-gpt": "gpt-5.4-mini"},
                           aws_keys={KEYS["aws_access_key"]: KEYS["aws_secret_key"]},
                           batches=BatchTurnaround(median_seconds=0.2),
                           limits={"eu.anthropic.claude-sonnet-4-6": Limits(rpm=2)})
    with SimServer(settings) as s:
        yield s


def _bedrock(sim: SimServer, **kw: Any) -> anthropic.AnthropicBedrock:
    return anthropic.AnthropicBedrock(aws_region="us-east-1", base_url=sim.url, max_retries=0, **(kw or KEYS))


def _vertex(sim: SimServer) -> anthropic.AnthropicVertex:
    return anthropic.AnthropicVertex(region="us-east5", project_id="proj", access_token="tok",
                                     base_url=f"{sim.url}/v1", max_retries=0)


def _azure(sim: SimServer, version: str = "2024-10-21") -> openai.AzureOpenAI:
    return openai.AzureOpenAI(azure_endpoint=sim.url, api_version=version, api_key="k", max_retries=0)


def test_bedrock_through_anthropic_bedrock_signed_and_with_an_api_key(sim: SimServer) -> None:
    for client in (_bedrock(sim), _bedrock(sim, api_key="bedrock-api-key")):
        m = client.messages.create(model=PROFILE, max_tokens=300, messages=ASK,
                                   thinking={"type": "between_tools"})
        assert m.type == "message" and m.usage.input_tokens > 0 and m.stop_reason in ("end_turn", "tool_use")


def test_bedrock_streams_in_aws_event_stream_framing_that_the_sdk_decodes(sim: SimServer) -> None:
    client = _bedrock(sim)
    with client.messages.with_streaming_response.create(model=PROFILE, max_tokens=300, messages=ASK,
                                                        stream=True) as raw:
        assert raw.headers["content-type"] == "application/vnd.amazon.eventstream"
    with client.messages.stream(model=PROFILE, max_tokens=300, messages=ASK) as stream:
        streamed = stream.get_final_message()
    whole = client.messages.create(model=PROFILE, max_tokens=300, messages=ASK)
    assert [b.model_dump() for b in streamed.content] == [b.model_dump() for b in whole.content]
    assert streamed.usage.output_tokens == whole.usage.output_tokens


def test_vertex_through_anthropic_vertex_streamed_and_not(sim: SimServer) -> None:
    client = _vertex(sim)
    whole = client.messages.create(model="claude-sonnet-4-5@20250929", max_tokens=300, messages=ASK)
    with client.messages.stream(model="claude-sonnet-4-5@20250929", max_tokens=300, messages=ASK) as stream:
        streamed = stream.get_final_message()
    assert [b.model_dump(exclude={"parsed_output"}) for b in streamed.content] == \
        [b.model_dump() for b in whole.content]


def test_azure_through_azure_openai_streamed_and_not_and_on_the_v1_path(sim: SimServer) -> None:
    client = _azure(sim)
    whole = client.chat.completions.create(model="gpt-5.4", messages=ASK)  # type: ignore[arg-type]
    chunks = client.chat.completions.create(model="gpt-5.4", messages=ASK,  # type: ignore[arg-type]
                                            stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert whole.choices[0].message.content == text
    made = client.chat.completions.create(model="my-gpt", messages=ASK)  # type: ignore[arg-type]
    assert made.choices[0].message.content  # a deployment the resource has, serving gpt-5.4-mini
    # Microsoft's v1 API: the plain OpenAI client, the deployment in `model`, no api-version
    v1 = openai.OpenAI(base_url=f"{sim.url}/openai/v1/", api_key="k", max_retries=0)
    assert v1.chat.completions.create(model="gpt-5.4", messages=ASK).choices  # type: ignore[arg-type]


def _post(url: str, body: Any, headers: dict[str, str]) -> tuple[int, dict[str, str], Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST", headers={"content-type": "application/json",
                                                                          **headers})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


def _signed(url: str, body: dict[str, Any], when: dt.datetime | None = None,
            keys: dict[str, str] = KEYS) -> tuple[bytes, dict[str, str]]:
    """A request signed as botocore signs one (SigV4, service bedrock), with any body."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    data = json.dumps(body).encode()
    req = AWSRequest(method="POST", url=url, data=data, headers={"content-type": "application/json"})
    signer = SigV4Auth(Credentials(keys["aws_access_key"], keys["aws_secret_key"]), "bedrock", "us-east-1")
    with mock.patch("botocore.auth.get_current_datetime", lambda: when or dt.datetime.now(dt.UTC)):
        signer.add_auth(req)
    return data, dict(req.headers.items())


GOOD = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 100, "messages": ASK}


@pytest.mark.parametrize(("authorization", "why"), [
    (None, "no Authorization header"),
    ("AWS4-HMAC-SHA256 Credential=AKIA/20260101/us-east-1/bedrock-runtime/aws4_request, SignedHeaders=host;"
     "x-amz-date, Signature=" + "0" * 64, "credential scope"),
    ("AWS4-HMAC-SHA256 Credential=AKIA/20260101/us-east-1/bedrock/aws4_request, Signature=abc",
     "SignedHeaders"),
    ("Basic dXNlcjpwYXNz", "algorithm")])
def test_bedrock_refuses_a_missing_or_malformed_signature(sim: SimServer, authorization: str | None,
                                                         why: str) -> None:
    headers = {"authorization": authorization} if authorization else {}
    status, got, body = _post(f"{sim.url}/model/{PROFILE}/invoke", GOOD, headers)
    assert (status, got["X-Amzn-Errortype"]) == (400, "IncompleteSignature") and why in body["message"]
    assert body["message"].startswith("The request signature does not conform to AWS standards.")


def test_bedrock_refuses_a_signature_from_more_than_15_minutes_ago(sim: SimServer) -> None:
    url = f"{sim.url}/model/{PROFILE}/invoke"
    data, headers = _signed(url, GOOD, when=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=20))
    status, got, _ = _post(url, data, headers)
    assert (status, got["X-Amzn-Errortype"]) == (400, "RequestExpired")
    assert _post(url, *_signed(url, GOOD))[0] == 200  # signed now: answered


def test_bedrock_checks_the_signature_s_value_with_its_account_s_key(sim: SimServer) -> None:
    """A signature of the right form made with another secret, or of a body changed after signing, is refused as
    the service refuses it, naming the canonical string it computed (each path segment encoded twice: an ARN's
    colon is %253A there); a key the account does not hold is unknown."""
    arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/" + PROFILE
    url = f"{sim.url}/model/{urllib.parse.quote(arn, safe='')}/invoke"
    assert _post(url, *_signed(url, GOOD))[0] == 200
    status, got, said = _post(url, *_signed(url, GOOD, keys={**KEYS, "aws_secret_key": "not-the-secret"}))
    assert (status, got["X-Amzn-Errortype"]) == (403, "InvalidSignatureException")
    assert said["message"].startswith("The request signature we calculated does not match the signature you provided.")
    assert "/model/arn%253Aaws%253Abedrock%253Aus-east-1" in said["message"] and "String-to-Sign" in said["message"]
    data, headers = _signed(url, GOOD)
    assert _post(url, data.replace(b"100", b"999"), headers)[1]["X-Amzn-Errortype"] == "InvalidSignatureException"
    status, got, said = _post(url, *_signed(url, GOOD, keys={**KEYS, "aws_access_key": "AKIANOTINTHEACCOUNT0"}))
    assert (status, got["X-Amzn-Errortype"], said["message"]) == (
        403, "UnrecognizedClientException", "The security token included in the request is invalid.")


@pytest.mark.parametrize(("change", "status", "kind", "words"), [
    ({"anthropic_version": None}, 400, "ValidationException", "anthropic_version: required"),
    ({"anthropic_version": "2023-06-01"}, 400, "ValidationException", "not a version Bedrock takes"),
    ({"model": PROFILE}, 400, "ValidationException", "model: not taken in an InvokeModel body"),
    ({"stream": True}, 400, "ValidationException", "stream: not taken"),
    ({"messages": []}, 400, "ValidationException", "at least one message"),  # the Claude API's own rule
])
def test_bedrock_refuses_what_its_body_may_not_carry(sim: SimServer, change: dict[str, Any], status: int,
                                                    kind: str, words: str) -> None:
    url = f"{sim.url}/model/{PROFILE}/invoke"
    body = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    got_status, got, said = _post(url, *_signed(url, body))
    assert (got_status, got["X-Amzn-Errortype"]) == (status, kind) and words in said["message"], said
    assert set(said) == {"message"}


def test_bedrock_model_ids_as_the_service_takes_them(sim: SimServer) -> None:
    client = _bedrock(sim)
    # newer models: an inference profile, not the bare id
    with pytest.raises(anthropic.BadRequestError) as bare:
        client.messages.create(model="anthropic.claude-sonnet-5-5", max_tokens=50, messages=ASK)
    assert "with on-demand throughput isn't supported" in str(bare.value)
    with pytest.raises(anthropic.NotFoundError) as unknown:
        client.messages.create(model="us.anthropic.claude-nonesuch-9", max_tokens=50, messages=ASK)
    assert unknown.value.response.headers["x-amzn-errortype"] == "ResourceNotFoundException"
    arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/" + "us.anthropic.claude-sonnet-4-6"
    assert client.messages.create(model=arn, max_tokens=50, messages=ASK).content  # encoded in one segment


def test_a_clouds_rate_limit_is_its_own_429_in_its_own_shape(sim: SimServer) -> None:
    client = _bedrock(sim)
    for _ in range(2):
        client.messages.create(model="eu.anthropic.claude-sonnet-4-6", max_tokens=50, messages=ASK)
    with pytest.raises(anthropic.RateLimitError) as info:
        client.messages.create(model="eu.anthropic.claude-sonnet-4-6", max_tokens=50, messages=ASK)
    assert info.value.response.headers["x-amzn-errortype"] == "ThrottlingException"
    client.messages.create(model=PROFILE, max_tokens=50, messages=ASK)  # another id: its own limits (none)


VERTEX_PATH = ("/v1/projects/p/locations/us-east5/publishers/anthropic/models/"
               "claude-sonnet-4-5@20250929:rawPredict")


@pytest.mark.parametrize(("headers", "change", "status", "google", "words"), [
    ({}, {}, 401, "UNAUTHENTICATED", "Request is missing required authentication credential."),
    ({"authorization": "Bearer t"}, {"model": "claude-sonnet-4-5@20250929"}, 400, "INVALID_ARGUMENT",
     "`model` is not passed in the request body"),
    ({"authorization": "Bearer t"}, {"anthropic_version": None}, 400, "INVALID_ARGUMENT",
     "anthropic_version must be set to vertex-2023-10-16"),
    ({"authorization": "Bearer t"}, {"max_tokens": "many"}, 400, "INVALID_ARGUMENT", "max_tokens"),
])
def test_vertex_refuses_in_googles_error_envelope(sim: SimServer, headers: dict[str, str],
                                                  change: dict[str, Any], status: int, google: str,
                                                  words: str) -> None:
    body = {k: v for k, v in {**GOOD, "anthropic_version": "vertex-2023-10-16", **change}.items()
            if v is not None}
    got_status, _, said = _post(sim.url + VERTEX_PATH, body, headers)
    assert got_status == status and said["error"]["status"] == google and said["error"]["code"] == status
    assert words in said["error"]["message"], said


def test_vertex_names_pre_4_6_models_with_their_date(sim: SimServer) -> None:
    with pytest.raises(anthropic.NotFoundError) as info:
        _vertex(sim).messages.create(model="claude-sonnet-4-5", max_tokens=50, messages=ASK)
    assert info.value.body["error"]["status"] == "NOT_FOUND"  # type: ignore[index]


def test_azure_refuses_an_unknown_api_version_an_unknown_deployment_and_no_key(sim: SimServer) -> None:
    with pytest.raises(openai.NotFoundError) as version:
        _azure(sim, "2031-01-01").chat.completions.create(model="gpt-5.4",
                                                          messages=ASK)  # type: ignore[arg-type]
    assert version.value.body == {"code": "404", "message": "Resource not found"}
    with pytest.raises(openai.NotFoundError) as deployment:
        _azure(sim).chat.completions.create(model="no-such-deployment",
                                            messages=ASK)  # type: ignore[arg-type]
    assert deployment.value.code == "DeploymentNotFound"
    status, _, body = _post(f"{sim.url}/openai/deployments/gpt-5.4/chat/completions?api-version=2024-10-21",
                            {"model": "gpt-5.4", "messages": ASK}, {})
    assert status == 401 and body["error"]["message"].startswith("Access denied due to invalid subscription")
    status, _, body = _post(f"{sim.url}/openai/v1/chat/completions?api-version=2024-10-21",
                            {"model": "gpt-5.4", "messages": ASK}, {"api-key": "k"})
    assert (status, body["code"]) == (400, "BadRequest")


def test_azure_holds_the_body_to_the_chat_completions_rules(sim: SimServer) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        _azure(sim).chat.completions.create(model="gpt-5.4", messages=[  # type: ignore[list-item]
            {"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "x", "content": "r"}])
    assert "must be a response to a preceeding message with 'tool_calls'" in str(info.value)


def test_azure_global_batch_is_openais_batch_api_on_the_v1_paths(sim: SimServer) -> None:
    """The v1 API's plain OpenAI client (Microsoft's docs use it for batches): the lines name a deployment,
    the create names /chat/completions; a deployment the resource lacks fails the batch whole."""
    import time

    client = openai.OpenAI(base_url=f"{sim.url}/openai/v1/", api_key="k", max_retries=0)

    def batch(deployment: str) -> Any:
        line = {"custom_id": "task-0", "method": "POST", "url": "/v1/chat/completions",
                "body": {"model": deployment, "messages": ASK}}
        upload = client.files.create(file=("batch.jsonl", json.dumps(line).encode()), purpose="batch")
        made = client.batches.create(input_file_id=upload.id, completion_window="24h",
                                     endpoint="/chat/completions")  # type: ignore[arg-type]
        for _ in range(100):
            b = client.batches.retrieve(made.id)
            if b.status in ("completed", "failed", "expired", "cancelled"):
                return b
            time.sleep(0.1)
        raise AssertionError(f"batch {made.id} did not end")

    done = batch("my-gpt")
    assert done.status == "completed" and done.output_file_id
    [answer] = [json.loads(x) for x in client.files.content(done.output_file_id).text.splitlines()]
    assert answer["custom_id"] == "task-0" and answer["response"]["status_code"] == 200
    assert answer["response"]["body"]["model"] == "gpt-5.4-mini"  # the model the deployment serves
    failed = batch("nobody-made-this")
    assert failed.status == "failed" and failed.errors is not None
    assert failed.errors.data is not None and failed.errors.data[0].code == "model_not_found"
    assert _post(f"{sim.url}/openai/v1/batches", {"input_file_id": "x"}, {})[0] == 401
