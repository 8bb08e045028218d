"""Independent black-box checks of the simulator's Bedrock batch inference + S3.

Written only from AWS documentation and botocore's service models, without reading
the simulator's implementation. Every test cites what it checks ("read 2026-11-28").

Sources (all read 2026-11-28):
  [DATA]    "Format and upload your batch inference data" (Amazon Bedrock User Guide,
            docs.aws.amazon.com/bedrock/latest/userguide/batch-inference-data)
  [RESULTS] "View the results of a batch inference job" (User Guide, batch-inference-results)
  [MONITOR] "Monitor batch inference jobs" + ModelInvocationJobSummary `status`
            (the status list is also in ListModelInvocationJobs `statusEquals`)
  [CREATE]  API reference "CreateModelInvocationJob"
  [GET]     API reference "GetModelInvocationJob"
  [LIST]    API reference "ListModelInvocationJobs"
  [STOP]    API reference "StopModelInvocationJob" + User Guide "Stop a batch inference job"
  [QUOTA]   "Minimum number of records per batch inference job" (Amazon Bedrock quotas;
            default 100; referenced from [DATA] and "Code example for batch inference")
  [BOTO]    botocore 1.44.8 service model "bedrock" (shapes named in each test)
  [S3ERR]   Amazon S3 API Reference "Error responses" - List of error codes
  [S3SIG]   Amazon S3 API Reference "Authenticating Requests (AWS Signature Version 4)"
            / "Signature Calculations for the Authorization Header" (x-amz-content-sha256)
  [S3API]   Amazon S3 API Reference PutObject / GetObject / DeleteObject / ListObjectsV2
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import time
import uuid

import boto3
import pytest
import urllib3
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from runner.config import BatchTurnaround, SimSettings
from runner.models.sim.process import SimServer

KEY, SECRET = "AKIATESTTESTTESTTEST", "secret"
MODEL = "us.anthropic.claude-sonnet-5-5"
ROLE = "arn:aws:iam::123456789012:role/BatchInferenceRole"
REGION = "us-east-1"

# [BOTO] ModelInvocationJobStatus enum == [MONITOR] ModelInvocationJobSummary status list.
ALL_STATUSES = {
    "Submitted", "InProgress", "Completed", "Failed", "Stopping", "Stopped",
    "PartiallyCompleted", "Expired", "Validating", "Scheduled",
}
END_STATUSES = {"Completed", "Failed", "Stopped", "PartiallyCompleted", "Expired"}
# [BOTO] shape ModelInvocationJobArn pattern
JOB_ARN_RE = re.compile(
    r"^arn:aws(-[^:]+)?:bedrock:[a-z0-9-]{1,20}:[0-9]{12}:model-invocation-job/[a-z0-9]{12}$"
)


# --------------------------------------------------------------------------- fixtures

def _clients(url, *, validate=True, secret=SECRET, key=KEY):
    br = boto3.client(
        "bedrock", region_name=REGION, endpoint_url=url,
        aws_access_key_id=key, aws_secret_access_key=secret,
        config=Config(parameter_validation=validate, retries={"max_attempts": 1}),
    )
    s3 = boto3.client(
        "s3", region_name=REGION, endpoint_url=url + "/s3",
        aws_access_key_id=key, aws_secret_access_key=secret,
        config=Config(s3={"addressing_style": "path"}, parameter_validation=validate,
                      retries={"max_attempts": 1}),
    )
    return br, s3


@pytest.fixture(scope="module")
def sim():
    with SimServer(SimSettings(aws_keys={KEY: SECRET},
                               batches=BatchTurnaround(median_seconds=0.2))) as s:
        yield s


@pytest.fixture(scope="module")
def br(sim):
    return _clients(sim.url)[0]


@pytest.fixture(scope="module")
def raw_br(sim):
    """Client with botocore's client-side validation off, so odd input reaches the server."""
    return _clients(sim.url, validate=False)[0]


@pytest.fixture(scope="module")
def s3(sim):
    return _clients(sim.url)[1]


# --------------------------------------------------------------------------- helpers

def _records(n, *, with_id=True, tag="r"):
    out = []
    for i in range(n):
        rec = {
            "modelInput": {
                "anthropic_version": "bedrock-2023-05-31",
                "max_tokens": 200,
                "messages": [{"role": "user", "content": f"Question {tag} number {i}?"}],
            }
        }
        if with_id:
            rec = {"recordId": f"REC{i:08d}", **rec}
        out.append(rec)
    return out


def _put_jsonl(s3, bucket, key, records):
    body = "".join(json.dumps(r) + "\n" for r in records).encode()
    s3.put_object(Bucket=bucket, Key=key, Body=body)


def _uniq(prefix="job"):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _create(client, *, name=None, in_uri, out_uri, **extra):
    params = dict(
        jobName=name or _uniq(),
        roleArn=ROLE,
        modelId=MODEL,
        inputDataConfig={"s3InputDataConfig": {"s3Uri": in_uri, "s3InputFormat": "JSONL"}},
        outputDataConfig={"s3OutputDataConfig": {"s3Uri": out_uri}},
    )
    params.update(extra)
    return client.create_model_invocation_job(**params)


def _wait_end(br, arn, timeout=30.0, seen=None):
    deadline = time.monotonic() + timeout
    while True:
        job = br.get_model_invocation_job(jobIdentifier=arn)
        if seen is not None:
            seen.append(job["status"])
        if job["status"] in END_STATUSES:
            return job
        if time.monotonic() > deadline:
            pytest.fail(f"job {arn} not finished after {timeout}s: {job['status']}")
        time.sleep(0.05)


def _job_id(arn):
    return arn.rsplit("/", 1)[1]


def _read_lines(s3, bucket, key):
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode()
    return [json.loads(line) for line in body.splitlines() if line.strip()]


def _err(exc_info):
    e = exc_info.value
    return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]


def _fails_validation_or_job_fails(br, s3, in_uri, out_uri):
    """[MONITOR]: 'Validating' checks S3 access, .jsonl format and record-count quotas;
    a job that fails it ends 'Failed'. A synchronous ValidationException at create is
    also accepted since the docs don't pin which of the two happens."""
    try:
        arn = _create(br, in_uri=in_uri, out_uri=out_uri)["jobArn"]
    except ClientError as e:
        assert e.response["Error"]["Code"] in {"ValidationException", "ResourceNotFoundException"}
        return None
    job = _wait_end(br, arn)
    assert job["status"] == "Failed", job
    assert job.get("message"), "a Failed job should carry a message (GetModelInvocationJob.message)"
    return job


# --------------------------------------------------------------------------- happy path

def test_happy_path_output_file_and_manifest(br, s3):
    """[DATA] JSONL of {recordId, modelInput}; [CREATE] returns jobArn ([BOTO]
    ModelInvocationJobArn pattern); [GET] status/fields; [RESULTS] one output JSONL per input
    file, each line {recordId, modelInput, modelOutput}, modelOutput = InvokeModel response
    body; manifest.json.out with totalRecordCount/processedRecordCount/successRecordCount/
    errorRecordCount/inputTokenCount/outputTokenCount. Output key
    {output s3Uri}/{job id}/{input file name}.out (layout given in the brief)."""
    n = 120
    recs = _records(n, tag="happy")
    _put_jsonl(s3, "batch-in", "happy/input.jsonl", recs)
    name = _uniq("happy")
    resp = _create(br, name=name, in_uri="s3://batch-in/happy/input.jsonl",
                   out_uri="s3://batch-out/happy/")
    arn = resp["jobArn"]
    assert JOB_ARN_RE.match(arn), arn

    seen = []
    job = _wait_end(br, arn, seen=seen)
    assert set(seen) <= ALL_STATUSES, seen
    assert job["status"] == "Completed", job
    # [BOTO] GetModelInvocationJobResponse required members + echo of the request
    assert job["jobArn"] == arn
    assert job["jobName"] == name
    assert job["roleArn"] == ROLE
    assert MODEL in job["modelId"]
    assert job["inputDataConfig"]["s3InputDataConfig"]["s3Uri"] == "s3://batch-in/happy/input.jsonl"
    assert job["outputDataConfig"]["s3OutputDataConfig"]["s3Uri"] == "s3://batch-out/happy/"
    assert job["submitTime"] is not None
    for fld in ("totalRecordCount", "processedRecordCount", "successRecordCount"):
        if fld in job:
            assert job[fld] == n, (fld, job[fld])
    if "errorRecordCount" in job:
        assert job["errorRecordCount"] == 0

    out_key = f"happy/{_job_id(arn)}/input.jsonl.out"
    lines = _read_lines(s3, "batch-out", out_key)
    assert len(lines) == n
    by_id = {}
    for line in lines:
        assert set(line) >= {"recordId", "modelInput", "modelOutput"}, line.keys()
        assert "error" not in line
        by_id[line["recordId"]] = line
    assert set(by_id) == {r["recordId"] for r in recs}
    for r in recs:
        line = by_id[r["recordId"]]
        assert line["modelInput"] == r["modelInput"]
        mo = line["modelOutput"]
        # InvokeModel response body for Anthropic Claude Messages API
        assert mo.get("role") == "assistant"
        assert mo.get("type") == "message"
        assert isinstance(mo.get("content"), list) and mo["content"]
        # Claude Sonnet 5.x runs adaptive thinking by default and max_tokens covers thinking +
        # text (Anthropic "Migrating to Claude Sonnet 5" / Bedrock "Adaptive thinking"), so at
        # max_tokens=200 a thinking-only reply with stop_reason max_tokens is legitimate.
        assert all(b.get("type") in {"text", "thinking", "redacted_thinking"} for b in mo["content"])
        assert "stop_reason" in mo and "usage" in mo

    manifest = json.loads(
        s3.get_object(Bucket="batch-out", Key=f"happy/{_job_id(arn)}/manifest.json.out")["Body"].read()
    )
    assert manifest["totalRecordCount"] == n
    assert manifest["processedRecordCount"] == n
    assert manifest["successRecordCount"] == n
    assert manifest["errorRecordCount"] == 0
    assert isinstance(manifest["inputTokenCount"], int) and manifest["inputTokenCount"] > 0
    assert isinstance(manifest["outputTokenCount"], int) and manifest["outputTokenCount"] > 0


def test_output_order_informational(br, s3):
    """[DATA] (current English page): 'The order of records in the output JSONL file is not
    guaranteed to match the order of records in the input JSONL file' (older copies said it
    is guaranteed). Docs disagree, so this only checks that each record appears exactly once."""
    recs = _records(100, tag="order")
    _put_jsonl(s3, "batch-in", "order/in.jsonl", recs)
    arn = _create(br, in_uri="s3://batch-in/order/in.jsonl", out_uri="s3://batch-out/order")["jobArn"]
    assert _wait_end(br, arn)["status"] == "Completed"
    lines = _read_lines(s3, "batch-out", f"order/{_job_id(arn)}/in.jsonl.out")
    ids = [line["recordId"] for line in lines]
    assert sorted(ids) == sorted(r["recordId"] for r in recs)
    assert len(set(ids)) == len(ids)


def test_statuses_are_documented_values(br, s3):
    """[MONITOR] / [BOTO] ModelInvocationJobStatus: every status reported by Get and List is
    one of the ten documented values."""
    recs = _records(100, tag="stat")
    _put_jsonl(s3, "batch-in", "stat/in.jsonl", recs)
    arn = _create(br, in_uri="s3://batch-in/stat/in.jsonl", out_uri="s3://batch-out/stat/")["jobArn"]
    seen = []
    while True:
        st = br.get_model_invocation_job(jobIdentifier=arn)["status"]
        seen.append(st)
        for s in br.list_model_invocation_jobs()["invocationJobSummaries"]:
            assert s["status"] in ALL_STATUSES, s
        if st in END_STATUSES:
            break
        time.sleep(0.01)
    assert set(seen) <= ALL_STATUSES, seen
    assert seen[-1] == "Completed"


def test_summary_has_required_members(br, s3):
    """[BOTO] ModelInvocationJobSummary required: jobArn, jobName, modelId, roleArn,
    submitTime, inputDataConfig, outputDataConfig."""
    _put_jsonl(s3, "batch-in", "summ/in.jsonl", _records(100))
    name = _uniq("summ")
    arn = _create(br, name=name, in_uri="s3://batch-in/summ/in.jsonl", out_uri="s3://batch-out/summ/")["jobArn"]
    sums = br.list_model_invocation_jobs(nameContains=name)["invocationJobSummaries"]
    assert [s["jobArn"] for s in sums] == [arn]
    for k in ("jobArn", "jobName", "modelId", "roleArn", "submitTime", "inputDataConfig", "outputDataConfig"):
        assert k in sums[0], k
    _wait_end(br, arn)


# --------------------------------------------------------------------------- quotas & input errors

def test_min_records_quota_99_fails(br, s3):
    """[QUOTA] Minimum number of records per batch inference job = 100 (default);
    [MONITOR] 'Validating' checks 'Your files fulfill the requirements for ... number of records'."""
    _put_jsonl(s3, "batch-in", "min/in99.jsonl", _records(99))
    _fails_validation_or_job_fails(br, s3, "s3://batch-in/min/in99.jsonl", "s3://batch-out/min99/")


def test_min_records_quota_100_ok(br, s3):
    """[QUOTA] exactly the minimum (100) is accepted."""
    _put_jsonl(s3, "batch-in", "min/in100.jsonl", _records(100))
    arn = _create(br, in_uri="s3://batch-in/min/in100.jsonl", out_uri="s3://batch-out/min100/")["jobArn"]
    assert _wait_end(br, arn)["status"] == "Completed"


def test_missing_input_file(br, s3):
    """[MONITOR] Validating: 'Your IAM service role has access to the Amazon S3 buckets
    containing your files' / files must be .jsonl -> a missing input cannot complete."""
    job = _fails_validation_or_job_fails(
        br, s3, f"s3://batch-in/nope/{uuid.uuid4().hex}.jsonl", "s3://batch-out/missing/")
    if job is not None:
        assert job["status"] != "Completed"


def test_records_without_record_id_get_one(br, s3):
    """[DATA] Note: 'If you omit the recordId field, Amazon Bedrock adds it in the output.'"""
    recs = _records(100, with_id=False, tag="noid")
    _put_jsonl(s3, "batch-in", "noid/in.jsonl", recs)
    arn = _create(br, in_uri="s3://batch-in/noid/in.jsonl", out_uri="s3://batch-out/noid/")["jobArn"]
    job = _wait_end(br, arn)
    assert job["status"] == "Completed", job
    lines = _read_lines(s3, "batch-out", f"noid/{_job_id(arn)}/in.jsonl.out")
    assert len(lines) == 100
    ids = [line.get("recordId") for line in lines]
    assert all(isinstance(i, str) and i for i in ids), ids[:5]
    assert len(set(ids)) == 100
    assert sorted(json.dumps(line["modelInput"], sort_keys=True) for line in lines) == sorted(
        json.dumps(r["modelInput"], sort_keys=True) for r in recs)
    assert all("modelOutput" in line for line in lines)


# --------------------------------------------------------------------------- idempotency

def test_client_request_token_idempotent(br, s3):
    """[CREATE] clientRequestToken: 'If this token matches a previous request, Amazon Bedrock
    ignores the request, but does not return an error.'"""
    _put_jsonl(s3, "batch-in", "idem/in.jsonl", _records(100))
    name = _uniq("idem")
    tok = "tok" + uuid.uuid4().hex
    a = _create(br, name=name, in_uri="s3://batch-in/idem/in.jsonl", out_uri="s3://batch-out/idem/",
                clientRequestToken=tok)["jobArn"]
    b = _create(br, name=name, in_uri="s3://batch-in/idem/in.jsonl", out_uri="s3://batch-out/idem/",
                clientRequestToken=tok)["jobArn"]
    assert a == b
    sums = br.list_model_invocation_jobs(nameContains=name)["invocationJobSummaries"]
    assert len(sums) == 1
    got = br.get_model_invocation_job(jobIdentifier=a)
    if "clientRequestToken" in got:
        assert got["clientRequestToken"] == tok
    _wait_end(br, a)


def test_different_tokens_make_different_jobs(br, s3):
    """[CREATE]: a distinct clientRequestToken is a distinct request."""
    _put_jsonl(s3, "batch-in", "idem2/in.jsonl", _records(100))
    a = _create(br, in_uri="s3://batch-in/idem2/in.jsonl", out_uri="s3://batch-out/idem2/",
                clientRequestToken="tokA" + uuid.uuid4().hex)["jobArn"]
    b = _create(br, in_uri="s3://batch-in/idem2/in.jsonl", out_uri="s3://batch-out/idem2/",
                clientRequestToken="tokB" + uuid.uuid4().hex)["jobArn"]
    assert a != b
    _wait_end(br, a)
    _wait_end(br, b)


# --------------------------------------------------------------------------- list / get / stop

def test_list_filters_name_and_status(br, s3):
    """[LIST] nameContains / statusEquals filter the invocationJobSummaries."""
    _put_jsonl(s3, "batch-in", "list/ok.jsonl", _records(100))
    _put_jsonl(s3, "batch-in", "list/few.jsonl", _records(5))
    marker = uuid.uuid4().hex[:8]
    ok = _create(br, name=f"lst{marker}-ok", in_uri="s3://batch-in/list/ok.jsonl",
                 out_uri="s3://batch-out/list/")["jobArn"]
    bad = None
    with contextlib.suppress(ClientError):  # a job refused at its create call is not listed at all
        bad = _create(br, name=f"lst{marker}-few", in_uri="s3://batch-in/list/few.jsonl",
                      out_uri="s3://batch-out/list/")["jobArn"]
    other = _create(br, name=f"zzz{uuid.uuid4().hex[:8]}", in_uri="s3://batch-in/list/ok.jsonl",
                    out_uri="s3://batch-out/list/")["jobArn"]
    for arn in filter(None, (ok, bad, other)):
        _wait_end(br, arn)

    named = br.list_model_invocation_jobs(nameContains=f"lst{marker}")["invocationJobSummaries"]
    assert {s["jobArn"] for s in named} == {a for a in (ok, bad) if a}
    assert all(f"lst{marker}" in s["jobName"] for s in named)

    done = br.list_model_invocation_jobs(statusEquals="Completed", maxResults=1000)["invocationJobSummaries"]
    assert done and all(s["status"] == "Completed" for s in done)
    assert ok in {s["jobArn"] for s in done} and other in {s["jobArn"] for s in done}

    both = br.list_model_invocation_jobs(nameContains=f"lst{marker}", statusEquals="Completed")
    assert [s["jobArn"] for s in both["invocationJobSummaries"]] == [ok]
    if bad:
        failed = br.list_model_invocation_jobs(statusEquals="Failed")["invocationJobSummaries"]
        assert bad in {s["jobArn"] for s in failed}
        assert all(s["status"] == "Failed" for s in failed)


def test_list_pagination(br, s3):
    """[LIST] maxResults / nextToken: 'If there are more results than the number you specified
    in maxResults, a nextToken value is returned'."""
    _put_jsonl(s3, "batch-in", "page/in.jsonl", _records(100))
    marker = "pg" + uuid.uuid4().hex[:8]
    arns = {_create(br, name=f"{marker}-{i}", in_uri="s3://batch-in/page/in.jsonl",
                    out_uri="s3://batch-out/page/")["jobArn"] for i in range(3)}
    got, token = [], None
    for _ in range(10):
        kw = {"nameContains": marker, "maxResults": 1}
        if token:
            kw["nextToken"] = token
        page = br.list_model_invocation_jobs(**kw)
        assert len(page["invocationJobSummaries"]) <= 1
        got += [s["jobArn"] for s in page["invocationJobSummaries"]]
        token = page.get("nextToken")
        if not token:
            break
    assert sorted(got) == sorted(arns)
    for a in arns:
        _wait_end(br, a)


def test_get_by_id_and_by_arn(br, s3):
    """[GET] jobIdentifier pattern ([BOTO] ModelInvocationJobIdentifier) accepts either the
    12-char id or the full ARN."""
    _put_jsonl(s3, "batch-in", "getid/in.jsonl", _records(100))
    arn = _create(br, in_uri="s3://batch-in/getid/in.jsonl", out_uri="s3://batch-out/getid/")["jobArn"]
    assert br.get_model_invocation_job(jobIdentifier=_job_id(arn))["jobArn"] == arn
    assert br.get_model_invocation_job(jobIdentifier=arn)["jobArn"] == arn
    _wait_end(br, arn)


def test_get_unknown_job_is_404(br):
    """[GET] Errors: ResourceNotFoundException, HTTP 404."""
    with pytest.raises(ClientError) as ei:
        br.get_model_invocation_job(jobIdentifier="zzzzzzzzzzzz")
    assert _err(ei) == ("ResourceNotFoundException", 404)


def test_stop_unknown_job_is_404(br):
    """[STOP] Errors: ResourceNotFoundException, HTTP 404."""
    with pytest.raises(ClientError) as ei:
        br.stop_model_invocation_job(jobIdentifier="zzzzzzzzzzzz")
    assert _err(ei) == ("ResourceNotFoundException", 404)


def test_stop_running_job():
    """[STOP] 'If the action is successful, the service sends back an HTTP 200 response with an
    empty HTTP body'; [MONITOR] statuses Stopping -> Stopped. Uses a slow turnaround so the job
    is still running when stopped."""
    with SimServer(SimSettings(aws_keys={KEY: SECRET},
                               batches=BatchTurnaround(median_seconds=60))) as slow:
        br, s3 = _clients(slow.url)
        _put_jsonl(s3, "batch-in", "stop/in.jsonl", _records(100))
        arn = _create(br, in_uri="s3://batch-in/stop/in.jsonl", out_uri="s3://batch-out/stop/")["jobArn"]
        before = br.get_model_invocation_job(jobIdentifier=arn)["status"]
        assert before not in END_STATUSES, before
        r = br.stop_model_invocation_job(jobIdentifier=arn)
        assert r["ResponseMetadata"]["HTTPStatusCode"] == 200
        seen = []
        job = _wait_end(br, arn, timeout=15, seen=seen)
        assert job["status"] == "Stopped", seen
        assert set(seen) <= {"Stopping", "Stopped"}, seen
        stopped = br.list_model_invocation_jobs(statusEquals="Stopped")["invocationJobSummaries"]
        assert arn in {s["jobArn"] for s in stopped}


# --------------------------------------------------------------------------- hostile input

BAD_CREATE_CASES = {
    # [BOTO]/[CREATE] jobName pattern [a-zA-Z0-9]{1,63}(-*[a-zA-Z0-9\+\-\.]){0,63}
    "jobName_space": {"jobName": "bad name"},
    "jobName_underscore_start": {"jobName": "_bad"},
    "jobName_slash": {"jobName": "a/b"},
    "jobName_64_chars": {"jobName": "a" * 64},  # max 63
    "jobName_empty": {"jobName": ""},
    # roleArn pattern arn:aws(-[^:]+)?:iam::([0-9]{12})?:role/.+
    "roleArn_user": {"roleArn": "arn:aws:iam::123456789012:user/bob"},
    "roleArn_not_arn": {"roleArn": "MyRole"},
    "roleArn_other_service": {"roleArn": "arn:aws:s3:::bucket/role/x"},
    # timeoutDurationInHours min 24 max 168
    "timeout_23": {"timeoutDurationInHours": 23},
    "timeout_169": {"timeoutDurationInHours": 169},
    "timeout_0": {"timeoutDurationInHours": 0},
    # clientRequestToken pattern [a-zA-Z0-9]{1,256}(-*[a-zA-Z0-9]){0,256}
    "token_bad_chars": {"clientRequestToken": "tok en!"},
    # S3Uri pattern s3://[a-z0-9][-.a-z0-9]{1,61}[a-z0-9](...)
    "input_not_s3": {"inputDataConfig": {"s3InputDataConfig": {"s3Uri": "https://example.com/x.jsonl"}}},
    "output_not_s3": {"outputDataConfig": {"s3OutputDataConfig": {"s3Uri": "file:///tmp/out"}}},
    # S3InputFormat enum [JSONL]
    "format_csv": {"inputDataConfig": {"s3InputDataConfig": {"s3Uri": "s3://batch-in/hostile/in.jsonl",
                                                              "s3InputFormat": "CSV"}}},
    # modelInvocationType enum [InvokeModel, Converse]
    "invocation_type_bogus": {"modelInvocationType": "Chat"},
    # required members
    "missing_inputDataConfig": {"inputDataConfig": None},
    "missing_roleArn": {"roleArn": None},
    "missing_jobName": {"jobName": None},
}


@pytest.mark.parametrize("case", sorted(BAD_CREATE_CASES))
def test_create_rejects_bad_params(raw_br, s3, case):
    """[CREATE] request constraints (pattern / min / max / enum / Required) -> ValidationException
    (HTTP 400). Sent with parameter_validation=False so the server sees them."""
    _put_jsonl(s3, "batch-in", "hostile/in.jsonl", _records(100))
    params = dict(
        jobName=_uniq("hostile"), roleArn=ROLE, modelId=MODEL,
        inputDataConfig={"s3InputDataConfig": {"s3Uri": "s3://batch-in/hostile/in.jsonl"}},
        outputDataConfig={"s3OutputDataConfig": {"s3Uri": "s3://batch-out/hostile/"}},
    )
    for k, v in BAD_CREATE_CASES[case].items():
        if v is None:
            params.pop(k)
        else:
            params[k] = v
    with pytest.raises(ClientError) as ei:
        raw_br.create_model_invocation_job(**params)
    assert _err(ei) == ("ValidationException", 400)


def test_create_accepts_boundary_timeouts(br, s3):
    """[CREATE] timeoutDurationInHours: min 24, max 168 are both valid."""
    _put_jsonl(s3, "batch-in", "tmo/in.jsonl", _records(100))
    for h in (24, 168):
        arn = _create(br, in_uri="s3://batch-in/tmo/in.jsonl", out_uri="s3://batch-out/tmo/",
                      timeoutDurationInHours=h)["jobArn"]
        job = _wait_end(br, arn)
        assert job["status"] == "Completed"
        if "timeoutDurationInHours" in job:
            assert job["timeoutDurationInHours"] == h


@pytest.mark.parametrize("ident", ["UPPERCASEID1", "short", "a" * 13, "arn:aws:s3:::x"])
def test_get_rejects_malformed_identifier(raw_br, ident):
    """[GET] jobIdentifier pattern ((arn:...:model-invocation-job/)?[a-z0-9]{12}) ->
    ValidationException 400 (anything else is not a job identifier)."""
    with pytest.raises(ClientError) as ei:
        raw_br.get_model_invocation_job(jobIdentifier=ident)
    code, status = _err(ei)
    assert status in (400, 404), (code, status)
    assert code in ("ValidationException", "ResourceNotFoundException")


@pytest.mark.parametrize("kw", [{"maxResults": 0}, {"maxResults": 1001},
                                {"statusEquals": "Running"}, {"sortOrder": "Up"},
                                {"sortBy": "Name"}])
def test_list_rejects_bad_params(raw_br, kw):
    """[LIST] maxResults 1..1000; statusEquals/sortOrder/sortBy enums -> ValidationException."""
    with pytest.raises(ClientError) as ei:
        raw_br.list_model_invocation_jobs(**kw)
    assert _err(ei) == ("ValidationException", 400)


def test_bedrock_wrong_secret_rejected(sim):
    """SigV4 with a wrong secret: AWS common errors - any non-2xx auth error
    (UnrecognizedClient/InvalidSignatureException, HTTP 403)."""
    br, _ = _clients(sim.url, secret="wrong")
    with pytest.raises(ClientError) as ei:
        br.list_model_invocation_jobs()
    assert _err(ei)[1] == 403


# --------------------------------------------------------------------------- S3

def test_s3_put_get_list_delete_roundtrip(s3):
    """[S3API] PutObject returns ETag; GetObject returns the bytes; ListObjectsV2 Prefix filter
    with Contents[Key, Size, ETag, LastModified]; DeleteObject then GetObject -> NoSuchKey."""
    pfx = "rt/" + uuid.uuid4().hex
    body = b'{"a": 1}\n'
    put = s3.put_object(Bucket="batch-in", Key=f"{pfx}/x.jsonl", Body=body)
    assert put.get("ETag")
    s3.put_object(Bucket="batch-in", Key=f"{pfx}/y.jsonl", Body=b"yy")
    s3.put_object(Bucket="batch-in", Key=f"other-{pfx}/z", Body=b"z")
    got = s3.get_object(Bucket="batch-in", Key=f"{pfx}/x.jsonl")
    assert got["Body"].read() == body
    assert got["ContentLength"] == len(body)
    lst = s3.list_objects_v2(Bucket="batch-in", Prefix=f"{pfx}/")
    assert sorted(o["Key"] for o in lst["Contents"]) == [f"{pfx}/x.jsonl", f"{pfx}/y.jsonl"]
    assert lst["KeyCount"] == 2
    obj = next(o for o in lst["Contents"] if o["Key"] == f"{pfx}/x.jsonl")
    assert obj["Size"] == len(body)
    assert "ETag" in obj and "LastModified" in obj, obj
    d = s3.delete_object(Bucket="batch-in", Key=f"{pfx}/x.jsonl")
    assert d["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket="batch-in", Key=f"{pfx}/x.jsonl")
    assert _err(ei) == ("NoSuchKey", 404)


def test_s3_delete_missing_key_is_204(s3):
    """[S3API] DeleteObject: deleting an object that does not exist returns success (204)."""
    d = s3.delete_object(Bucket="batch-in", Key="never/" + uuid.uuid4().hex)
    assert d["ResponseMetadata"]["HTTPStatusCode"] == 204


def test_s3_list_max_keys_pagination(s3):
    """[S3API] ListObjectsV2 MaxKeys / IsTruncated / NextContinuationToken."""
    pfx = "pg/" + uuid.uuid4().hex
    for i in range(3):
        s3.put_object(Bucket="batch-in", Key=f"{pfx}/{i}", Body=b"x")
    p1 = s3.list_objects_v2(Bucket="batch-in", Prefix=pfx, MaxKeys=2)
    assert p1["IsTruncated"] is True and len(p1["Contents"]) == 2
    p2 = s3.list_objects_v2(Bucket="batch-in", Prefix=pfx, MaxKeys=2,
                            ContinuationToken=p1["NextContinuationToken"])
    assert p2["IsTruncated"] is False
    keys = [o["Key"] for o in p1["Contents"] + p2["Contents"]]
    assert keys == [f"{pfx}/0", f"{pfx}/1", f"{pfx}/2"]  # ListObjectsV2 returns keys in UTF-8 order


def test_s3_no_such_key(s3):
    """[S3ERR] NoSuchKey - 'The specified key does not exist.' 404 Not Found."""
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket="batch-in", Key="does/not/exist.jsonl")
    assert _err(ei) == ("NoSuchKey", 404)


def test_s3_wrong_secret_signature_does_not_match(sim):
    """[S3ERR] SignatureDoesNotMatch - 403 Forbidden."""
    _, bad = _clients(sim.url, secret="not-the-secret")
    with pytest.raises(ClientError) as ei:
        bad.put_object(Bucket="batch-in", Key="sig/x", Body=b"hello")
    assert _err(ei) == ("SignatureDoesNotMatch", 403)
    with pytest.raises(ClientError) as ei:
        bad.get_object(Bucket="batch-in", Key="sig/x")
    assert _err(ei)[1] == 403


def test_s3_unknown_access_key(sim):
    """[S3ERR] InvalidAccessKeyId - 'The AWS access key ID you provided does not exist in our
    records.' 403 Forbidden."""
    _, bad = _clients(sim.url, key="AKIANOSUCHKEY0000000")
    with pytest.raises(ClientError) as ei:
        bad.get_object(Bucket="batch-in", Key="x")
    assert _err(ei) == ("InvalidAccessKeyId", 403)


def _signed_put(url, key, signed_body, sent_body):
    """Sign a PUT whose x-amz-content-sha256 is the hash of `signed_body` (valid signature),
    then send `sent_body` instead."""
    req = AWSRequest(method="PUT", url=f"{url}/s3/batch-in/{key}", data=signed_body,
                     headers={"Content-Type": "application/octet-stream"})
    S3SigV4Auth(Credentials(KEY, SECRET), "s3", REGION).add_auth(req)
    headers = dict(req.headers.items())
    headers["Content-Length"] = str(len(sent_body))
    return urllib3.PoolManager().request("PUT", req.url, body=sent_body, headers=headers)


def test_s3_content_sha256_mismatch(sim, s3):
    """[S3SIG] the x-amz-content-sha256 value is the SHA-256 of the payload; [S3ERR]
    XAmzContentSHA256Mismatch - 'The provided x-amz-content-sha256 header does not match what
    was computed.' 400 Bad Request. The object must not be stored."""
    key = "sha/" + uuid.uuid4().hex
    # sanity: the hand-signed request itself is accepted when body matches
    ok = _signed_put(sim.url, key + "-ok", b"payload", b"payload")
    assert ok.status == 200, ok.data
    r = _signed_put(sim.url, key, b"payload", b"PAYLOAD")
    assert r.status == 400, (r.status, r.data)
    assert b"<Code>XAmzContentSHA256Mismatch</Code>" in r.data, r.data
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket="batch-in", Key=key)
    assert _err(ei)[0] == "NoSuchKey"


def test_s3_error_body_is_xml(sim):
    """[S3ERR] REST error responses: XML <Error><Code>..</Code><Message>..</Message>.."""
    req = AWSRequest(method="GET", url=f"{sim.url}/s3/batch-in/no-such-{uuid.uuid4().hex}")
    req.headers["x-amz-content-sha256"] = hashlib.sha256(b"").hexdigest()
    S3SigV4Auth(Credentials(KEY, SECRET), "s3", REGION).add_auth(req)
    r = urllib3.PoolManager().request("GET", req.url, headers=dict(req.headers.items()))
    assert r.status == 404
    assert r.headers.get("Content-Type", "").startswith("application/xml")
    assert b"<Error>" in r.data and b"<Code>NoSuchKey</Code>" in r.data and b"<Message>" in r.data


def test_input_prefix_with_two_files(br, s3):
    """[DATA] the input S3 location holds 'at least one JSONL file'; [QUOTA] the minimum counts
    records 'across all JSONL files in the job'; [RESULTS] 'Amazon Bedrock generates an output
    JSONL file for each input JSONL file.' Two files of 60 records under one prefix."""
    pfx = "multi-" + uuid.uuid4().hex[:8]
    a, b = _records(60, tag="a"), _records(60, tag="b")
    b = [{**r, "recordId": "B" + r["recordId"]} for r in b]
    _put_jsonl(s3, "batch-in", f"{pfx}/a.jsonl", a)
    _put_jsonl(s3, "batch-in", f"{pfx}/b.jsonl", b)
    try:
        arn = _create(br, in_uri=f"s3://batch-in/{pfx}/", out_uri="s3://batch-out/multi/")["jobArn"]
    except ClientError as e:
        pytest.fail(f"folder input rejected: {e}")
    job = _wait_end(br, arn)
    assert job["status"] == "Completed", job
    jid = _job_id(arn)
    la = _read_lines(s3, "batch-out", f"multi/{jid}/a.jsonl.out")
    lb = _read_lines(s3, "batch-out", f"multi/{jid}/b.jsonl.out")
    assert sorted(line["recordId"] for line in la) == sorted(r["recordId"] for r in a)
    assert sorted(line["recordId"] for line in lb) == sorted(r["recordId"] for r in b)
    manifest = json.loads(s3.get_object(Bucket="batch-out", Key=f"multi/{jid}/manifest.json.out")["Body"].read())
    assert manifest["totalRecordCount"] == 120


def test_s3_get_object_headers(s3):
    """[S3API] GetObject response elements include ETag and Last-Modified (HeadObject too)."""
    put = s3.put_object(Bucket="batch-in", Key="hdr/x", Body=b"abc")
    got = s3.get_object(Bucket="batch-in", Key="hdr/x")
    assert got.get("ETag") == put["ETag"]
    assert got.get("LastModified") is not None


def test_s3_list_delimiter_common_prefixes(s3):
    """[S3API] ListObjectsV2 Delimiter: keys sharing a prefix up to the delimiter are rolled up
    into CommonPrefixes and not returned in Contents."""
    pfx = "dl-" + uuid.uuid4().hex[:8]
    for k in ("top.jsonl", "sub1/a", "sub1/b", "sub2/c"):
        s3.put_object(Bucket="batch-in", Key=f"{pfx}/{k}", Body=b"x")
    r = s3.list_objects_v2(Bucket="batch-in", Prefix=f"{pfx}/", Delimiter="/")
    assert [o["Key"] for o in r.get("Contents", [])] == [f"{pfx}/top.jsonl"]
    assert sorted(p["Prefix"] for p in r.get("CommonPrefixes", [])) == [f"{pfx}/sub1/", f"{pfx}/sub2/"]


def test_input_not_jsonl_extension(br, s3):
    """[DATA] 'Your JSONL file must end in the extension .jsonl'; [MONITOR] Validating checks
    'Your files are .jsonl files'."""
    recs = _records(100)
    s3.put_object(Bucket="batch-in", Key="ext/in.txt",
                  Body="".join(json.dumps(r) + "\n" for r in recs).encode())
    _fails_validation_or_job_fails(br, s3, "s3://batch-in/ext/in.txt", "s3://batch-out/ext/")


def _job_or_refusal(br, name):
    """A job on s3://batch-in/{name}/in.jsonl, to its end: (its ARN, the job); (None, None) when the service
    refused the input, at once (ValidationException) or as a Failed job (either is a fair answer to bad input)."""
    try:
        arn = _create(br, in_uri=f"s3://batch-in/{name}/in.jsonl", out_uri=f"s3://batch-out/{name}/")["jobArn"]
    except ClientError as e:
        assert e.response["Error"]["Code"] == "ValidationException"
        return None, None
    job = _wait_end(br, arn)
    return (None, None) if job["status"] == "Failed" else (arn, job)


def test_input_with_malformed_line(br, s3):
    """[MONITOR] Validating checks 'each individual record is a JSON object in the correct
    format'. 100 good records + one line that is not JSON must not end 'Completed' silently
    with the bad line dropped: either the job fails, or (PartiallyCompleted/Completed) the bad
    record is accounted for as an error."""
    recs = _records(100)
    body = "".join(json.dumps(r) + "\n" for r in recs) + "{not json\n"
    s3.put_object(Bucket="batch-in", Key="bad/in.jsonl", Body=body.encode())
    arn, job = _job_or_refusal(br, "bad")
    if job is None:
        return
    m = json.loads(s3.get_object(Bucket="batch-out", Key=f"bad/{_job_id(arn)}/manifest.json.out")["Body"].read())
    assert m["totalRecordCount"] == 101 and m["errorRecordCount"] >= 1, (job["status"], m)


def test_record_missing_model_input(br, s3):
    """[DATA] each line has a modelInput; [RESULTS] 'An error object replaces the modelOutput
    field in any line where there was an error in inference'. A record without modelInput must
    not produce a modelOutput."""
    recs = [*_records(100), {"recordId": "NOINPUT0001"}]
    _put_jsonl(s3, "batch-in", "noinput/in.jsonl", recs)
    arn, job = _job_or_refusal(br, "noinput")
    if job is None:
        return
    lines = _read_lines(s3, "batch-out", f"noinput/{_job_id(arn)}/in.jsonl.out")
    bad = [line for line in lines if line.get("recordId") == "NOINPUT0001"]
    assert bad and "modelOutput" not in bad[0] and "error" in bad[0], bad
