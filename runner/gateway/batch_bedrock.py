"""Amazon Bedrock batch inference as the gateway uses it
(the User Guide's batch-inference pages and botocore's `bedrock` service model, read 2026-11-28).

The requests as a JSONL file of `{"recordId", "modelInput"}` lines (the InvokeModel body) put in S3 (`PUT`
on the configured bucket and prefix), then `POST /model-invocation-job` on it for the calls' model, named
and made idempotent by the intent (`jobName` pgsr-{intent}, `clientRequestToken` {intent}), its output under
the prefix's `out/`; `GET /model-invocation-job/{id}` until it is Completed, PartiallyCompleted, Failed,
Stopped or Expired; its `{job id}/{file}.out` read back (a line per record, matched by its recordId:
modelOutput, or an error's code and message) and every object of the job deleted. Each request is signed
with SigV4, for `s3` or `bedrock`. A record id is alphanumeric (the guide's words): a custom id's other
characters are dropped. A job takes at least 100 records (the quota's default): the batcher sends fewer
interactively.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp

from runner.gateway.batch_wire import (
    BEDROCK_ENDED,
    INTENT_KEY,
    BatchEndpoint,
    BatchFailed,
    BatchGone,
    BatchRefused,
    Outcome,
    json_lines,
)
from runner.models.base import retry_after_from

JOB_PREFIX = "pgsr-"  # a job's name: this and the intent that made it


def record_id(custom_id: str) -> str:
    """A custom id as Bedrock's record ids must be: alphanumeric (the batcher's are)."""
    return "".join(c for c in custom_id if c.isascii() and c.isalnum())


async def _aws(
    session: aiohttp.ClientSession,
    ep: BatchEndpoint,
    method: str,
    url: str,
    service: str,
    body: bytes = b"",
    content_type: str | None = None,
) -> tuple[int, bytes, Any]:
    assert ep.aws is not None
    headers = {"content-type": content_type} if content_type else {}
    if service == "s3":
        headers["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
    signed = ep.aws.sign(method, url, body, headers, service)
    async with session.request(method, url, data=body or None, headers=signed) as r:
        return r.status, await r.read(), r.headers


async def _json(
    session: aiohttp.ClientSession,
    ep: BatchEndpoint,
    method: str,
    path: str,
    payload: dict[str, Any] | None = None,
    gone: str | None = None,
) -> dict[str, Any]:
    """The control plane's answer; BatchRefused for an error status (BatchGone for a 404 of job `gone`)."""
    assert ep.aws is not None
    body = json.dumps(payload).encode() if payload is not None else b""
    status, raw, headers = await _aws(
        session,
        ep,
        method,
        ep.aws.control + path,
        "bedrock",
        body,
        "application/json" if payload is not None else None,
    )
    if status == 404 and gone is not None:
        raise BatchGone(gone)
    if status != 200:
        words = raw[:500].decode(errors="replace")
        with contextlib.suppress(ValueError):
            words = str(json.loads(raw).get("message") or words)
        raise BatchRefused(
            status, f"{headers.get('x-amzn-errortype', '')}: {words}", retry_after_from(headers)
        )
    found: dict[str, Any] = json.loads(raw)
    return found


def _s3_url(ep: BatchEndpoint, key: str) -> str:
    assert ep.aws is not None
    return f"{ep.aws.s3}/{ep.aws.bucket}/{quote(key, safe='/~')}"


async def submit(
    session: aiohttp.ClientSession, ep: BatchEndpoint, items: list[tuple[str, dict[str, Any]]], intent: str
) -> tuple[str, str | None]:
    assert ep.aws is not None
    lines = "".join(
        json.dumps({"recordId": record_id(cid), "modelInput": body}) + "\n" for cid, body in items
    )
    key = f"{ep.aws.prefix}{intent}.jsonl"
    status, raw, headers = await _aws(
        session, ep, "PUT", _s3_url(ep, key), "s3", lines.encode(), "application/jsonl"
    )
    if status != 200:
        raise BatchRefused(
            status, f"S3 PutObject: {raw[:300].decode(errors='replace')}", retry_after_from(headers)
        )
    source = {"s3Uri": f"s3://{ep.aws.bucket}/{key}", "s3InputFormat": "JSONL"}
    target = {"s3Uri": f"s3://{ep.aws.bucket}/{ep.aws.prefix}out/"}
    try:
        made = await _json(
            session,
            ep,
            "POST",
            "/model-invocation-job",
            {
                "jobName": f"{JOB_PREFIX}{intent}",
                "clientRequestToken": intent,
                "roleArn": ep.aws.role_arn,
                "modelId": ep.model,
                "timeoutDurationInHours": 24,
                "inputDataConfig": {"s3InputDataConfig": source},
                "outputDataConfig": {"s3OutputDataConfig": target},
            },
        )
    except BatchRefused:
        # a job that was not made leaves no file behind
        await _aws(session, ep, "DELETE", _s3_url(ep, key), "s3")
        raise
    return str(made["jobArn"]).rsplit("/", 1)[-1], key


async def collect(
    session: aiohttp.ClientSession, ep: BatchEndpoint, job: dict[str, Any]
) -> dict[str, Outcome]:
    """A record's outcome by its record id (what `record_id` made of its custom id), every object of the job
    deleted once read."""
    assert ep.aws is not None
    source = str(job["inputDataConfig"]["s3InputDataConfig"]["s3Uri"])
    key = source.removeprefix(f"s3://{ep.aws.bucket}/")
    job_id = str(job["jobArn"]).rsplit("/", 1)[-1]
    out_prefix = str(job["outputDataConfig"]["s3OutputDataConfig"]["s3Uri"]).removeprefix(
        f"s3://{ep.aws.bucket}/"
    )
    out_keys = [
        f"{out_prefix.rstrip('/')}/{job_id}/{name}"
        for name in (f"{key.rsplit('/', 1)[-1]}.out", "manifest.json.out")
    ]
    outcomes: dict[str, Outcome] = {}
    try:
        if job.get("status") == "Failed":
            raise BatchFailed(str(job.get("message") or "failed"))
        status, raw, headers = await _aws(session, ep, "GET", _s3_url(ep, out_keys[0]), "s3")
        if status == 404:
            raise BatchGone(out_keys[0])
        if status != 200:
            raise BatchRefused(
                status, f"S3 GetObject: {raw[:300].decode(errors='replace')}", retry_after_from(headers)
            )
        outcomes = {str(r.get("recordId")): _outcome(r) for r in json_lines(raw)}
    finally:
        for k in (key, *out_keys):
            await _aws(session, ep, "DELETE", _s3_url(ep, k), "s3")
    return outcomes


def _outcome(line: dict[str, Any]) -> Outcome:
    if isinstance(line.get("modelOutput"), dict):
        return 200, line["modelOutput"]
    error = line.get("error") or {}
    code = int(error.get("errorCode") or 0) if str(error.get("errorCode") or "").isdigit() else 0
    # the API's own refusal, as InvokeModel words it; a server's error, a throttle or a timeout: again
    return (
        (code, {"message": str(error.get("errorMessage") or "")})
        if 400 <= code < 500 and code not in (408, 429)
        else None
    )


async def state(
    session: aiohttp.ClientSession, ep: BatchEndpoint, job_id: str
) -> tuple[bool, dict[str, Any]]:
    job = await _json(session, ep, "GET", f"/model-invocation-job/{job_id}", gone=job_id)
    return job.get("status") in BEDROCK_ENDED, job


async def listed(session: aiohttp.ClientSession, ep: BatchEndpoint, since: float) -> list[dict[str, Any]]:
    """The jobs of ours made since `since`, as the other providers' batches read: an id, when made, and the
    intent that made it (in its name)."""
    after = dt.datetime.fromtimestamp(since, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    found: list[dict[str, Any]] = []
    token: str | None = None
    while True:  # page by page (nextToken)
        asked = {
            "submitTimeAfter": after,
            "nameContains": JOB_PREFIX,
            **({"nextToken": token} if token else {}),
        }
        page = await _json(session, ep, "GET", "/model-invocation-jobs?" + urlencode(asked))
        found += page.get("invocationJobSummaries") or []
        if not (token := page.get("nextToken")):
            break
    return [
        {
            "id": str(j["jobArn"]).rsplit("/", 1)[-1],
            "created_at": j.get("submitTime"),
            "metadata": {INTENT_KEY: str(j.get("jobName", "")).removeprefix(JOB_PREFIX)},
        }
        for j in found
    ]
