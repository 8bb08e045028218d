"""Amazon Bedrock batch inference, as the simulator serves it: the control plane's model invocation jobs over
files in S3 (s3.py).

The operations and their shapes are botocore's service model of `bedrock` (2023-04-20, read 2026-11-28):
`POST /model-invocation-job` (CreateModelInvocationJob: jobName, roleArn, modelId, inputDataConfig.
s3InputDataConfig.s3Uri, outputDataConfig.s3OutputDataConfig.s3Uri, optional clientRequestToken,
timeoutDurationInHours 24-168, modelInvocationType InvokeModel | Converse), `GET /model-invocation-job/
{jobIdentifier}` (the job's ARN or its 12-character id), `GET /model-invocation-jobs` (nameContains,
submitTimeAfter, statusEquals, maxResults), `POST /model-invocation-job/{jobIdentifier}/stop`; each signed
with SigV4 for `bedrock` as the runtime is (sigv4.py), errors as the runtime's (`{"message"}` with
X-Amzn-Errortype: ValidationException 400, ResourceNotFoundException 404, ConflictException 409).

What the jobs do, from the Bedrock User Guide (read 2026-11-28):
- the input (batch-inference-data): one or more `.jsonl` files at the s3Uri (a file or a prefix), each line
  `{"recordId": "<alphanumeric>", "modelInput": <the InvokeModel body>}` (a line without recordId gets one);
  the job checks them while Validating: a file that is not there, a line that is not such an object, or
  fewer records than the quota *Minimum number of records per batch inference job* (100 by default, the
  Bedrock quotas page) fail the job with a message, not the create call. Validation does not look inside
  modelInput; each record is answered or refused on its own, as InvokeModel would (bedrock.py's rules).
- the statuses (ModelInvocationJobSummary.status): Submitted, Validating, Scheduled, InProgress, Completed,
  PartiallyCompleted (not every record could be processed in time), Expired, Failed, Stopping, Stopped.
- the output (batch-inference-results): for each input file `{output s3Uri}/{job id}/{file name}.out`, a
  line per record, `{"recordId", "modelInput", "modelOutput"}` or with `"error": {"errorCode",
  "errorMessage"}` in place of modelOutput (written in the input's order, which older copies of the data
  page promise and the current one does not: readers go by recordId); and `manifest.json.out` with the
  record counts and the input and output tokens.

Only InvokeModel jobs of Claude models are served (a Converse job is refused with the simulator's words).
A job's records are answered as a batch of the Claude API is (batches.py: at its turnaround, drawing
nothing from the per-minute limits). The create's clientRequestToken makes it idempotent: the same token
answers the job it made. Jobs live as long as the simulator (unlike its batches, not kept in `state_dir`):
one started again knows none, and a gateway polling one gets its 404 and sends the requests again.
"""

from __future__ import annotations

import datetime as dt
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from runner.models.sim import cloud_ids, s3, sigv4
from runner.models.sim.batches import Batches, SimBatch
from runner.models.sim.bedrock import body_problem
from runner.models.sim.dialect import BEDROCK
from runner.models.sim.instants import rfc3339
from runner.models.sim.objects import Objects
from runner.models.sim.translate import json_object, refused

MIN_RECORDS = 100  # the quota's default (Minimum number of records per batch inference job)
MAX_RECORDS_PER_FILE = 50_000  # the quota's default (Records per input file per batch inference job)
ACCOUNT = "123456789012"
# botocore's patterns (matched whole)
JOB_NAME = re.compile(r"[a-zA-Z0-9]{1,63}(-*[a-zA-Z0-9\+\-\.]){0,63}")
ROLE_ARN = re.compile(r"arn:aws(-[^:]+)?:iam::([0-9]{12})?:role/.+")
TOKEN = re.compile(r"[a-zA-Z0-9]{1,256}(-*[a-zA-Z0-9]){0,256}")
JOB_ID = re.compile(
    r"((arn:aws(-[^:]+)?:bedrock:[a-z0-9-]{1,20}:[0-9]{12}:model-invocation-job/)?([a-z0-9]{12}))"
)
RECORD_ID = re.compile(r"[A-Za-z0-9]{1,64}")
ENDED = ("Completed", "PartiallyCompleted", "Failed", "Stopped", "Expired")


@dataclass
class InvocationJob:
    arn: str
    name: str
    model_id: str
    role_arn: str
    token: str | None
    input_uri: str
    output_uri: str
    timeout_hours: int
    submitted: float  # epoch seconds
    files: list[tuple[str, list[tuple[str, dict[str, Any]]]]] = field(default_factory=list)  # name, records
    batch: SimBatch | None = None
    message: str | None = None  # why it failed
    written: bool = False  # its output is in S3

    @property
    def id(self) -> str:
        return self.arn.rsplit("/", 1)[-1]


def _jobs(request: web.Request) -> dict[str, InvocationJob]:
    jobs: dict[str, InvocationJob] = request.app["bedrock_jobs"]
    return jobs


def _region(request: web.Request) -> str:
    """The region the request was signed for (its credential scope): the region of the endpoint it went to."""
    scope = sigv4.fields(request.headers.get("authorization", "").partition(" ")[2]).get("Credential", "")
    parts = scope.split("/")
    return parts[2] if len(parts) == 5 else "us-east-1"


def _error(request: web.Request, status: int, message: str, code: str | None = None) -> web.Response:
    return refused(request, BEDROCK.error(status, message, code=code))


async def _unsigned(request: web.Request) -> web.Response | None:
    bad = await sigv4.refusal(request)
    return None if bad is None else _error(request, bad.status, bad.message, bad.type)


def _create_problem(body: dict[str, Any]) -> str | None:
    """Why CreateModelInvocationJob refuses the request at once (ValidationException), as its model says."""
    for name in ("jobName", "roleArn", "modelId", "inputDataConfig", "outputDataConfig"):
        if name not in body:
            return (
                f"1 validation error detected: Value null at '{name}' failed to satisfy constraint: Member "
                "must "
                "not be null"
            )
    checks = (("jobName", JOB_NAME, 63), ("roleArn", ROLE_ARN, 2048), ("clientRequestToken", TOKEN, 256))
    for name, pattern, longest in checks:
        if name in body and not (isinstance(body[name], str) and pattern.fullmatch(body[name])):
            return (
                f"1 validation error detected: Value at '{name}' failed to satisfy constraint: Member must "
                f"satisfy regular expression pattern: {pattern.pattern}"
            )
        if name in body and len(body[name]) > longest:
            return (
                f"1 validation error detected: Value at '{name}' failed to satisfy constraint: Member must "
                f"have length less than or equal to {longest}"
            )
    hours = body.get("timeoutDurationInHours", 24)
    if not isinstance(hours, int) or not 24 <= hours <= 168:
        return "timeoutDurationInHours: between 24 and 168"
    if body.get("modelInvocationType", "InvokeModel") != "InvokeModel":
        return "modelInvocationType: the simulator serves InvokeModel jobs only"
    source = (body["inputDataConfig"] or {}).get("s3InputDataConfig") or {}
    target = (body["outputDataConfig"] or {}).get("s3OutputDataConfig") or {}
    if s3.parse_uri(str(source.get("s3Uri", ""))) is None or source.get("s3InputFormat", "JSONL") != "JSONL":
        return "inputDataConfig.s3InputDataConfig: an s3Uri of the form s3://bucket/key, format JSONL"
    if s3.parse_uri(str(target.get("s3Uri", ""))) is None:
        return "outputDataConfig.s3OutputDataConfig: an s3Uri of the form s3://bucket/prefix"
    return None


def _read_input(
    objects: Objects, uri: str
) -> tuple[list[tuple[str, list[tuple[str, dict[str, Any]]]]], str | None]:
    """The input's files and their records, or why validation fails the job."""
    parsed = s3.parse_uri(uri)
    assert parsed is not None
    bucket, key = parsed
    names = (
        [key] if key.endswith(".jsonl") else [k for k in objects.listed(bucket, key) if k.endswith(".jsonl")]
    )
    found = [(k, objects.get(bucket, k)) for k in names]
    if not found or any(data is None for _, data in found):
        return [], f"No .jsonl file was found at {uri}"
    files = []
    for name, data in found:
        assert data is not None
        records: list[tuple[str, dict[str, Any]]] = []
        for n, raw in enumerate(data.splitlines(), 1):
            if not raw.strip():
                continue
            try:
                line = orjson.loads(raw)
            except orjson.JSONDecodeError:
                return [], f"{name}, line {n}: not a JSON object"
            if not isinstance(line, dict) or not isinstance(line.get("modelInput"), dict):
                return [], f"{name}, line {n}: each record is a JSON object with a modelInput object"
            rid = line.get("recordId", f"{n:011d}")
            if not isinstance(rid, str) or not RECORD_ID.fullmatch(rid):
                return [], f"{name}, line {n}: recordId must be an alphanumeric string ({rid!r})"
            records.append((rid, line["modelInput"]))
        if len(records) > MAX_RECORDS_PER_FILE:
            return [], f"{name}: {len(records):,} records, over the {MAX_RECORDS_PER_FILE:,} a file may hold"
        files.append((name.rsplit("/", 1)[-1], records))
    total = sum(len(r) for _, r in files)
    if total < MIN_RECORDS:
        return (
            [],
            f"The job holds {total} records, fewer than the minimum number of records per batch "
            f"inference job ({MIN_RECORDS})",
        )
    return files, None


async def create(request: web.Request) -> web.Response:
    if (bad := await _unsigned(request)) is not None:
        return bad
    body = await json_object(request, BEDROCK)
    if isinstance(body, web.Response):
        return refused(request, body)
    if (problem := _create_problem(body)) is not None:
        return _error(request, 400, problem)
    jobs = _jobs(request)
    token = body.get("clientRequestToken")
    if token is not None and (same := next((j for j in jobs.values() if j.token == token), None)) is not None:
        return web.json_response({"jobArn": same.arn})
    named = cloud_ids.bedrock(body["modelId"])
    if named.model is None:
        return _error(request, 400, f"The provided model identifier is invalid: {body['modelId']}")
    if any(j.name == body["jobName"] for j in jobs.values()):
        return _error(request, 409, f"A job named {body['jobName']} already exists", "ConflictException")
    arn = f"arn:aws:bedrock:{_region(request)}:{ACCOUNT}:model-invocation-job/{uuid.uuid4().hex[:12]}"
    job = InvocationJob(
        arn,
        body["jobName"],
        body["modelId"],
        body["roleArn"],
        token,
        body["inputDataConfig"]["s3InputDataConfig"]["s3Uri"],
        body["outputDataConfig"]["s3OutputDataConfig"]["s3Uri"],
        body.get("timeoutDurationInHours", 24),
        time.time(),
    )
    job.files, job.message = _read_input(request.app["s3"], job.input_uri)
    if job.message is None:
        job.batch = _start(request.app["batches"], job, named.model)
    jobs[job.id] = job
    return web.json_response({"jobArn": job.arn})


def _start(batches: Batches, job: InvocationJob, plays: str) -> SimBatch:
    """The job's records as a batch of the Claude API; a record InvokeModel would refuse is refused alike."""
    entries, refusals = [], {}
    for _, records in job.files:
        for rid, model_input in records:
            problem = body_problem(model_input)
            body = {k: v for k, v in model_input.items() if k not in ("anthropic_version", "anthropic_beta")}
            entries.append((rid, {**body, "model": plays}))
            if problem is not None:
                refusals[rid] = problem
    b = batches.new("bedrock", f"bedrock_{job.id}", entries, {"x-sim-plays": plays})
    for item in b.items:
        if item.custom_id in refusals:
            item.outcome = (400, {"message": refusals[item.custom_id]})
    return b


def status(job: InvocationJob) -> str:
    b = job.batch
    if b is None:
        return "Failed"
    if b.ended is None:
        return "Stopping" if b.cancelled is not None else "InProgress"
    if b.cancelled is not None:
        return "Stopped"
    done = sum(1 for i in b.items if i.outcome is not None)
    return "Completed" if done == len(b.items) else "PartiallyCompleted" if done else "Expired"


def _counts(job: InvocationJob) -> dict[str, int]:
    items = job.batch.items if job.batch is not None else []
    done = [i for i in items if i.outcome is not None]
    ok = sum(1 for i in done if i.outcome is not None and i.outcome[0] == 200)
    return {
        "totalRecordCount": len(items),
        "processedRecordCount": len(done),
        "successRecordCount": ok,
        "errorRecordCount": len(done) - ok,
    }


def _tokens(job: InvocationJob) -> dict[str, int]:
    """What manifest.json.out adds to the counts: the tokens of the records answered."""
    used = [
        i.outcome[1].get("usage") or {}
        for i in (job.batch.items if job.batch else [])
        if i.outcome is not None and i.outcome[0] == 200
    ]
    return {
        "inputTokenCount": sum(
            u.get("input_tokens", 0)
            + u.get("cache_read_input_tokens", 0)
            + u.get("cache_creation_input_tokens", 0)
            for u in used
        ),
        "outputTokenCount": sum(u.get("output_tokens", 0) for u in used),
    }


def described(job: InvocationJob) -> dict[str, Any]:
    state = status(job)
    b = job.batch
    ended = (
        b.wall(b.ended) if b is not None and b.ended is not None else (job.submitted if b is None else None)
    )
    return {
        "jobArn": job.arn,
        "jobName": job.name,
        "modelId": job.model_id,
        "roleArn": job.role_arn,
        **({"clientRequestToken": job.token} if job.token else {}),
        "status": state,
        **({"message": job.message} if job.message else {}),
        "submitTime": rfc3339(job.submitted),
        "lastModifiedTime": rfc3339(ended or time.time()),
        **({"endTime": rfc3339(ended)} if ended else {}),
        "inputDataConfig": {"s3InputDataConfig": {"s3InputFormat": "JSONL", "s3Uri": job.input_uri}},
        "outputDataConfig": {"s3OutputDataConfig": {"s3Uri": job.output_uri}},
        "timeoutDurationInHours": job.timeout_hours,
        "jobExpirationTime": rfc3339(job.submitted + job.timeout_hours * 3600),
        "modelInvocationType": "InvokeModel",
        **_counts(job),
    }


def _write_output(objects: Objects, job: InvocationJob) -> None:
    """The job's output files and manifest, once it has ended: a line per record, in its file's order."""
    parsed = s3.parse_uri(job.output_uri)
    assert parsed is not None and job.batch is not None
    bucket, prefix = parsed
    base = f"{prefix.rstrip('/')}/{job.id}" if prefix.strip("/") else job.id
    items = iter(job.batch.items)
    for name, records in job.files:
        lines = []
        for rid, model_input in records:
            item = next(items)
            line: dict[str, Any] = {"recordId": rid, "modelInput": model_input}
            if item.outcome is None:
                line["error"] = {
                    "errorCode": 408,
                    "errorMessage": "The record was not processed before the job ended",
                }
            elif item.outcome[0] == 200:
                line["modelOutput"] = item.outcome[1]
            else:
                message = item.outcome[1].get("message") or (item.outcome[1].get("error") or {}).get(
                    "message"
                )
                line["error"] = {"errorCode": item.outcome[0], "errorMessage": str(message)}
            lines.append(orjson.dumps(line))
        objects.put(bucket, f"{base}/{name}.out", b"\n".join(lines) + b"\n")
    objects.put(bucket, f"{base}/manifest.json.out", orjson.dumps({**_counts(job), **_tokens(job)}))
    job.written = True


async def _found(request: web.Request) -> InvocationJob | web.Response:
    if (bad := await _unsigned(request)) is not None:
        return bad
    m = JOB_ID.fullmatch(request.match_info["job"])
    job = _jobs(request).get(m.group(4)) if m else None
    if job is None:
        return _error(request, 404, f"The job {request.match_info['job']} could not be found")
    if job.batch is not None:
        await request.app["batches"].advance(job.batch)
        if job.batch.ended is not None and not job.written:
            _write_output(request.app["s3"], job)
    return job


async def get(request: web.Request) -> web.Response:
    job = await _found(request)
    return job if isinstance(job, web.Response) else web.json_response(described(job))


async def stop(request: web.Request) -> web.Response:
    job = await _found(request)
    if isinstance(job, web.Response):
        return job
    if status(job) in ENDED:
        return _error(request, 400, f"The job {job.arn} has ended ({status(job)}): it cannot be stopped")
    assert job.batch is not None
    job.batch.cancelled = time.monotonic()
    return web.json_response({})


# ModelInvocationJobStatus
STATUSES = (
    "Submitted",
    "InProgress",
    "Completed",
    "Failed",
    "Stopping",
    "Stopped",
    "PartiallyCompleted",
    "Expired",
    "Validating",
    "Scheduled",
)


def _list_problem(q: Any) -> str | None:
    """Why ListModelInvocationJobs refuses its parameters (its model: maxResults 1-1000, the enums)."""
    if "maxResults" in q and not (q["maxResults"].isdigit() and 1 <= int(q["maxResults"]) <= 1000):
        return "maxResults: between 1 and 1000"
    for name, allowed in (
        ("statusEquals", STATUSES),
        ("sortBy", ("CreationTime",)),
        ("sortOrder", ("Ascending", "Descending")),
    ):
        if name in q and q[name] not in allowed:
            return f"{name}: one of {', '.join(allowed)} ({q[name]!r})"
    for name in ("submitTimeAfter", "submitTimeBefore"):
        if name in q:
            try:
                dt.datetime.fromisoformat(q[name].replace("Z", "+00:00"))
            except ValueError:
                return f"{name}: an ISO 8601 timestamp ({q[name]!r})"
    return None


def _when(q: Any, name: str, default: float) -> float:
    return dt.datetime.fromisoformat(q[name].replace("Z", "+00:00")).timestamp() if name in q else default


async def listed(request: web.Request) -> web.Response:
    """Newest first unless sortOrder says Ascending; a page of maxResults (default 1000) and the nextToken of
    the rest."""
    if (bad := await _unsigned(request)) is not None:
        return bad
    q = request.query
    if (problem := _list_problem(q)) is not None:
        return _error(request, 400, problem)
    after, before = _when(q, "submitTimeAfter", 0.0), _when(q, "submitTimeBefore", float("inf"))
    found = []
    for job in sorted(
        _jobs(request).values(), key=lambda j: j.submitted, reverse=q.get("sortOrder") != "Ascending"
    ):
        if job.batch is not None:
            await request.app["batches"].advance(job.batch)
        if (
            after <= job.submitted <= before
            and q.get("nameContains", "") in job.name
            and q.get("statusEquals", status(job)) == status(job)
        ):
            found.append(described(job))
    start = int(q["nextToken"]) if q.get("nextToken", "").isdigit() else 0
    end = start + int(q.get("maxResults", 1000))
    return web.json_response(
        {"invocationJobSummaries": found[start:end], **({"nextToken": str(end)} if end < len(found) else {})}
    )


def add_routes(app: web.Application) -> None:
    app["bedrock_jobs"] = {}
    app.add_routes(
        [
            web.post("/model-invocation-job", create),
            web.get("/model-invocation-jobs", listed),
            web.get("/model-invocation-job/{job}", get),
            web.post("/model-invocation-job/{job}/stop", stop),
        ]
    )
