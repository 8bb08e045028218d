"""Bedrock batch inference on the simulator (runner/models/sim/bedrock_batches.py, s3.py), through boto3's own
`s3` and `bedrock` clients: the input put in S3, a model invocation job made on it, watched to its end, its
output read back; and what the services refuse, in their own shapes."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import botocore.exceptions
import pytest
from botocore.config import Config as BotoConfig

from runner.config import BatchTurnaround, SimSettings
from runner.models.sim.process import SimServer

KEY, SECRET = "AKIATESTTESTTESTTEST", "secret"
MODEL = "us.anthropic.claude-sonnet-5-5"
ROLE = "arn:aws:iam::123456789012:role/BedrockBatch"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with SimServer(SimSettings(aws_keys={KEY: SECRET}, batches=BatchTurnaround(median_seconds=0.2))) as s:
        yield s


def _client(sim: SimServer, service: str, secret: str = SECRET) -> Any:
    url = f"{sim.url}/s3" if service == "s3" else sim.url
    return boto3.client(service, region_name="us-east-1", endpoint_url=url, aws_access_key_id=KEY,
                        aws_secret_access_key=secret,
                        config=BotoConfig(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))


def _records(n: int, **extra: Any) -> bytes:
    lines = [{"recordId": f"CALL{i:07d}", "modelInput": {
        "anthropic_version": "bedrock-2023-05-31", "max_tokens": 200,
        "messages": [{"role": "user", "content": f"Close case {i} as resolved."}], **extra}} for i in range(n)]
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def _job(bedrock: Any, name: str, uri: str, model: str = MODEL, **kw: Any) -> str:
    arn: str = bedrock.create_model_invocation_job(
        jobName=name, roleArn=ROLE, modelId=model,
        inputDataConfig={"s3InputDataConfig": {"s3Uri": uri, "s3InputFormat": "JSONL"}},
        outputDataConfig={"s3OutputDataConfig": {"s3Uri": "s3://out-bucket/results/"}}, **kw)["jobArn"]
    return arn


def _ended(bedrock: Any, arn: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        job: dict[str, Any] = bedrock.get_model_invocation_job(jobIdentifier=arn)
        if job["status"] in ("Completed", "PartiallyCompleted", "Failed", "Stopped", "Expired"):
            return job
        time.sleep(0.1)
    raise AssertionError(f"{arn} did not end")


def test_a_job_of_100_records_is_answered_record_by_record_in_its_output_file(sim: SimServer) -> None:
    s3, bedrock = _client(sim, "s3"), _client(sim, "bedrock")
    s3.put_object(Bucket="in-bucket", Key="batches/a.jsonl", Body=_records(99) + json.dumps(
        {"recordId": "CALLBAD", "modelInput": {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 200,
                                               "model": "x", "messages": [{"role": "user", "content": "hi"}]}}
    ).encode() + b"\n")
    arn = _job(bedrock, "runner-a", "s3://in-bucket/batches/a.jsonl", clientRequestToken="intent1")
    assert _job(bedrock, "runner-a2", "s3://in-bucket/batches/a.jsonl", clientRequestToken="intent1") == arn
    job = _ended(bedrock, arn)
    assert job["status"] == "Completed" and job["totalRecordCount"] == 100 and job["errorRecordCount"] == 1
    job_id = arn.rsplit("/", 1)[-1]
    assert arn.startswith("arn:aws:bedrock:us-east-1:") and len(job_id) == 12
    out = s3.get_object(Bucket="out-bucket", Key=f"results/{job_id}/a.jsonl.out")["Body"].read()
    lines = [json.loads(line) for line in out.splitlines()]
    assert [line["recordId"] for line in lines] == [f"CALL{i:07d}" for i in range(99)] + ["CALLBAD"]
    assert all(line["modelOutput"]["type"] == "message" for line in lines[:99])
    assert lines[99]["error"]["errorCode"] == 400 and "model" in lines[99]["error"]["errorMessage"]
    manifest = json.loads(s3.get_object(Bucket="out-bucket", Key=f"results/{job_id}/manifest.json.out")["Body"].read())
    assert manifest["successRecordCount"] == 99
    listed = bedrock.list_model_invocation_jobs(nameContains="runner-a")["invocationJobSummaries"]
    assert [j["jobArn"] for j in listed] == [arn]
    s3.delete_object(Bucket="out-bucket", Key=f"results/{job_id}/a.jsonl.out")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket="out-bucket", Key=f"results/{job_id}/a.jsonl.out")
    assert e.value.response["Error"]["Code"] == "NoSuchKey"


def test_too_few_records_or_a_missing_file_fail_the_job_at_validation_not_its_create(sim: SimServer) -> None:
    s3, bedrock = _client(sim, "s3"), _client(sim, "bedrock")
    s3.put_object(Bucket="in-bucket", Key="few.jsonl", Body=_records(99))
    few = _ended(bedrock, _job(bedrock, "runner-few", "s3://in-bucket/few.jsonl"))
    assert few["status"] == "Failed" and "minimum number of records" in few["message"]
    missing = _ended(bedrock, _job(bedrock, "runner-missing", "s3://in-bucket/none.jsonl"))
    assert missing["status"] == "Failed" and "No .jsonl file" in missing["message"]


def test_what_the_control_plane_and_s3_refuse(sim: SimServer) -> None:
    bedrock = _client(sim, "bedrock")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        _job(bedrock, "runner-x", "s3://in-bucket/few.jsonl", model="anthropic.not-a-model")
    assert e.value.response["Error"]["Code"] == "ValidationException"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        _job(bedrock, "runner-few", "s3://in-bucket/few.jsonl")  # the name is taken
    assert e.value.response["Error"]["Code"] == "ConflictException"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        bedrock.get_model_invocation_job(jobIdentifier="abcdefabcdef")
    assert e.value.response["Error"]["Code"] == "ResourceNotFoundException"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        _client(sim, "bedrock", secret="wrong").list_model_invocation_jobs()
    assert e.value.response["Error"]["Code"] == "InvalidSignatureException"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        _client(sim, "s3", secret="wrong").put_object(Bucket="in-bucket", Key="k.jsonl", Body=b"{}")
    assert e.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        _client(sim, "s3").get_object(Bucket="never-made", Key="k")
    assert e.value.response["Error"]["Code"] == "NoSuchBucket"


def test_a_stopped_job_ends_stopped_with_what_it_had_not_done_as_errors() -> None:
    with SimServer(SimSettings(aws_keys={KEY: SECRET}, batches=BatchTurnaround(median_seconds=600))) as slow:
        s3, bedrock = _client(slow, "s3"), _client(slow, "bedrock")
        s3.put_object(Bucket="in-bucket", Key="stop/b.jsonl", Body=_records(120))
        arn = _job(bedrock, "runner-stop", "s3://in-bucket/stop/")  # a prefix: every .jsonl under it
        assert bedrock.get_model_invocation_job(jobIdentifier=arn)["status"] == "InProgress"
        bedrock.stop_model_invocation_job(jobIdentifier=arn)
        job = _ended(bedrock, arn)
        assert job["status"] == "Stopped" and job["processedRecordCount"] == 0
        out = s3.get_object(Bucket="out-bucket", Key=f"results/{arn.rsplit('/', 1)[-1]}/b.jsonl.out")["Body"].read()
        assert all("error" in json.loads(line) for line in out.splitlines())
