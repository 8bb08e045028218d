"""Google Vertex AI batch prediction of Claude, as the simulator serves it: batch prediction jobs over files
in Cloud Storage (gcs.py).

The operations and their shapes are the Vertex AI REST reference's `projects.locations.batchPredictionJobs`
(cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.batchPredictionJobs, read
2026-11-29): `POST /v1/projects/{project}/locations/{location}/batchPredictionJobs` (create: displayName,
model, inputConfig.instancesFormat and gcsSource.uris, outputConfig.predictionsFormat and
gcsDestination.outputUriPrefix; the job as it answers), `GET .../batchPredictionJobs/{id}`, `GET
.../batchPredictionJobs` (pageSize, pageToken; `filter` on display_name, state and create_time),
`POST .../batchPredictionJobs/{id}:cancel`; an OAuth access token as `Authorization: Bearer` (else the 401
of rawPredict, vertex.py); errors in Google's envelope (`{"error": {"code", "message", "status"}}`).

What the jobs do, from "Batch predictions with Anthropic Claude models"
(cloud.google.com/vertex-ai/generative-ai/docs/partner-models/claude/batch, read 2026-11-29), as an
independent checker recorded it (published/vertex_batch.yaml: its `values` are read here):
- the model is `publishers/anthropic/models/{model}` (or its full resource name); instances and predictions
  are JSONL in Cloud Storage;
- each input line is `{"custom_id", "request"}`, the request the Claude body rawPredict takes (with
  `anthropic_version`, without `model`); each is answered or refused on its own, as rawPredict would;
- a project runs at most 4 batch jobs at once (the page's default quota): a fifth create is refused 429
  RESOURCE_EXHAUSTED while four run;
- the states (JobState): JOB_STATE_PENDING, JOB_STATE_RUNNING, JOB_STATE_SUCCEEDED,
  JOB_STATE_PARTIALLY_SUCCEEDED, JOB_STATE_FAILED, JOB_STATE_CANCELLING, JOB_STATE_CANCELLED,
  JOB_STATE_EXPIRED.
- the output: `outputInfo.gcsOutputDirectory`, a directory made under the prefix
  (`prediction-model-{timestamp}`), holding `predictions.jsonl`: a line per instance, its input's fields,
  `response` (the Messages answer), `status` (empty when it was answered, else why not) and
  `processed_time`. The Claude page reserves `response` and `status` but neither names the directory's
  files nor spells a failed line: the layout is the Gemini batch tutorial's (GoogleCloudPlatform/
  generative-ai, intro_batch_prediction.ipynb), a failed line's `status` the simulator's own ("{HTTP
  status}: {rawPredict's error body}"). Readers go by custom_id and read every `.jsonl` file of the
  directory (the API reference's generic layout names them predictions_0001... and errors_0001...).

A job's records are answered as a batch of the Claude API is (batches.py: at its turnaround, drawing nothing
from the per-minute limits). Jobs live as long as the simulator (unlike its batches, not kept in
`state_dir`): one started again knows none, and a gateway polling one gets its 404 and sends the requests
again.
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from runner.models.sim import checks, cloud_ids, cloudbook, gcs, list_filter
from runner.models.sim.batches import Batches, SimBatch
from runner.models.sim.dialect import VERTEX, vertex_error
from runner.models.sim.instants import rfc3339
from runner.models.sim.objects import Objects
from runner.models.sim.translate import json_object, refused
from runner.models.sim.vertex import body_problem, unauthenticated

PATH = "/v1/projects/{project}/locations/{location}/batchPredictionJobs"
MODEL = re.compile(r"^(?:projects/[^/]+/locations/[^/]+/)?publishers/anthropic/models/(?P<model>[^/]+)$")
ENDED = (
    "JOB_STATE_SUCCEEDED",
    "JOB_STATE_PARTIALLY_SUCCEEDED",
    "JOB_STATE_FAILED",
    "JOB_STATE_CANCELLED",
    "JOB_STATE_EXPIRED",
)
_ids = itertools.count(int(time.time()) * 1000)


@dataclass
class PredictionJob:
    name: str  # projects/{project}/locations/{location}/batchPredictionJobs/{id}
    display_name: str
    model: str
    sources: list[str]
    prefix: str  # the output's gs:// prefix
    labels: dict[str, str]
    created: float  # epoch seconds
    lines: list[dict[str, Any]] = field(default_factory=list)  # the input's lines, in order
    batch: SimBatch | None = None
    message: str | None = None  # why it failed
    directory: str | None = None  # its output's directory, once written

    @property
    def id(self) -> str:
        return self.name.rsplit("/", 1)[-1]


def _jobs(request: web.Request) -> dict[str, PredictionJob]:
    jobs: dict[str, PredictionJob] = request.app["vertex_jobs"]
    return jobs


def _error(request: web.Request, status: int, message: str) -> web.Response:
    return refused(request, VERTEX.error(status, message))


def _signed_in(request: web.Request) -> web.Response | None:
    token = request.headers.get("authorization", "")
    return None if token.startswith("Bearer ") and token[7:].strip() else refused(request, unauthenticated())


def _create_problem(body: dict[str, Any]) -> str | None:
    """Why the create is refused at once (400 INVALID_ARGUMENT)."""
    for name in ("displayName", "model", "inputConfig", "outputConfig"):
        if not body.get(name):
            return f"{name} is required."
    source, target = body["inputConfig"], body["outputConfig"]
    if not isinstance(source, dict) or source.get("instancesFormat") != "jsonl":
        return "inputConfig.instancesFormat: the simulator serves jsonl (Cloud Storage) input"
    uris = _uris(source)
    if not uris or any(gcs.parse_uri(u) is None for u in uris):
        return "inputConfig.gcsSource.uris: one or more gs://bucket/object URIs"
    if not isinstance(target, dict) or target.get("predictionsFormat") != "jsonl":
        return "outputConfig.predictionsFormat: the simulator serves jsonl (Cloud Storage) output"
    if gcs.parse_uri(str((target.get("gcsDestination") or {}).get("outputUriPrefix", ""))) is None:
        return "outputConfig.gcsDestination.outputUriPrefix: a gs://bucket/prefix URI"
    return None


def _uris(source: dict[str, Any]) -> list[str]:
    """gcsSource.uris: a list, or one string of comma-separated URIs as the Claude page's REST body writes it
    ("INPUT_URIS: A comma-separated list")."""
    uris = (source.get("gcsSource") or {}).get("uris")
    if isinstance(uris, str):
        return [u.strip() for u in uris.split(",") if u.strip()]
    return [str(u) for u in uris] if isinstance(uris, list) else []


def _read_input(objects: Objects, uris: list[str]) -> tuple[list[dict[str, Any]], str | None]:
    """The input's lines, or why the job fails (a file that is not there, a line that is not a request)."""
    lines: list[dict[str, Any]] = []
    for uri in uris:
        parsed = gcs.parse_uri(uri)
        assert parsed is not None
        data = objects.get(*parsed)
        if data is None:
            return [], f"The input file {uri} was not found."
        for n, raw in enumerate(data.splitlines(), 1):
            if not raw.strip():
                continue
            try:
                line = orjson.loads(raw)
            except orjson.JSONDecodeError:
                return [], f"{uri}, line {n}: not a JSON object"
            if not isinstance(line, dict) or not isinstance(line.get("request"), dict):
                return [], f"{uri}, line {n}: each line is a JSON object with a request object"
            lines.append(line)
    if not lines:
        return [], "The input holds no instances."
    return lines, None


def _parent(request: web.Request) -> str:
    """The jobs' collection the path names: projects/{project}/locations/{location}/batchPredictionJobs/."""
    where = request.match_info
    return f"projects/{where['project']}/locations/{where['location']}/batchPredictionJobs/"


def _running(jobs: dict[str, PredictionJob], project: str) -> int:
    """The project's jobs not ended, in every location (the quota is the project's)."""
    return sum(1 for j in jobs.values() if j.name.split("/")[1] == project and state(j) not in ENDED)


async def create(request: web.Request) -> web.Response:
    if (bad := _signed_in(request)) is not None:
        return bad
    body = await json_object(request, VERTEX)
    if isinstance(body, web.Response):
        return refused(request, body)
    if (problem := _create_problem(body)) is not None:
        return _error(request, 400, problem)
    m, where = MODEL.match(str(body["model"])), request.match_info
    named = cloud_ids.vertex(m["model"]) if m else None
    if m is None or named is None or named.model is None:
        return _error(request, 404, f"Publisher Model `{body['model']}` was not found.")
    jobs = _jobs(request)
    if _running(jobs, where["project"]) >= (most := cloudbook.vertex_batch()["concurrent_jobs"]):
        return _error(
            request,
            429,
            f"Quota exceeded: at most {most} concurrent batch prediction jobs of Anthropic models in a "
            "project.",
        )
    job = PredictionJob(
        f"projects/{where['project']}/locations/{where['location']}/batchPredictionJobs/{next(_ids)}",
        str(body["displayName"]),
        str(body["model"]),
        _uris(body["inputConfig"]),
        str(body["outputConfig"]["gcsDestination"]["outputUriPrefix"]),
        {str(k): str(v) for k, v in (body.get("labels") or {}).items()},
        time.time(),
    )
    job.lines, job.message = _read_input(request.app["gcs"], job.sources)
    if job.message is None:
        job.batch = _start(request.app["batches"], job, named.model)
    jobs[job.id] = job
    # as the page's example answers a create: pending (its input is read, and may fail it, once it starts)
    made = {k: v for k, v in described(job).items() if k not in ("error", "endTime", "startTime")}
    return web.json_response({**made, "state": cloudbook.vertex_batch()["create_state"]})


def _start(batches: Batches, job: PredictionJob, plays: str) -> SimBatch:
    """The job's lines as a batch of the Claude API; a request rawPredict would refuse is refused alike, and
    so is one a Message Batch refuses (the published rules of the `batches` endpoint: max_tokens of at least
    1, "max_tokens: 0 cache pre-warming is not supported inside a batch")."""
    entries, refusals = [], {}
    for n, line in enumerate(job.lines):
        request = line["request"]
        key = f"{n}"  # the line's place: custom ids are the caller's, and need not be unique
        body = {k: v for k, v in request.items() if k != "anthropic_version"}
        entries.append((key, {**body, "model": plays}))
        batched = checks.refusal("anthropic", "batches", {"params": body}, {}, plays)
        if (problem := body_problem(request) or (str(batched) if batched else None)) is not None:
            refusals[key] = problem
    b = batches.new("vertex", f"vertex_{job.id}", entries, {"x-sim-plays": plays})
    for item in b.items:
        if item.custom_id in refusals:
            item.outcome = (400, vertex_error(400, refusals[item.custom_id]))  # as rawPredict's
    return b


def state(job: PredictionJob) -> str:
    b = job.batch
    if b is None:
        return "JOB_STATE_FAILED"
    if b.ended is None:
        if b.cancelled is not None:
            return "JOB_STATE_CANCELLING"
        return "JOB_STATE_RUNNING" if any(i.outcome is not None for i in b.items) else "JOB_STATE_PENDING"
    if b.cancelled is not None:
        return "JOB_STATE_CANCELLED"
    done = sum(1 for i in b.items if i.outcome is not None and i.outcome[0] == 200)
    if done == len(b.items):
        return "JOB_STATE_SUCCEEDED"
    return "JOB_STATE_PARTIALLY_SUCCEEDED" if done else "JOB_STATE_EXPIRED"


def described(job: PredictionJob) -> dict[str, Any]:
    """The BatchPredictionJob resource."""
    b, now = job.batch, state(job)
    # a job failed at its input ended as it started
    ended = (b.wall(b.ended) if b.ended is not None else None) if b is not None else job.created
    items = b.items if b is not None else []
    ok = sum(1 for i in items if i.outcome is not None and i.outcome[0] == 200)
    failed = sum(1 for i in items if i.outcome is not None and i.outcome[0] != 200)
    return {
        "name": job.name,
        "displayName": job.display_name,
        "model": job.model,
        "inputConfig": {"instancesFormat": "jsonl", "gcsSource": {"uris": job.sources}},
        "outputConfig": {"predictionsFormat": "jsonl", "gcsDestination": {"outputUriPrefix": job.prefix}},
        "state": now,
        **({"error": {"code": 3, "message": job.message}} if job.message else {}),
        **({"outputInfo": {"gcsOutputDirectory": job.directory}} if job.directory else {}),
        "completionStats": {
            "successfulCount": str(ok),
            "failedCount": str(failed),
            "incompleteCount": str(len(items) - ok - failed),
        },
        "createTime": rfc3339(job.created),
        **({"startTime": rfc3339(job.created)} if b is not None else {}),
        **({"endTime": rfc3339(ended)} if ended is not None else {}),
        "updateTime": rfc3339(ended or time.time()),
        **({"labels": job.labels} if job.labels else {}),
    }


def _status(outcome: tuple[int, dict[str, Any]] | None) -> str:
    """A failed line's `status`: the error as rawPredict would have answered it (code and body)."""
    if outcome is None:
        return "DEADLINE_EXCEEDED: the instance was not processed before the job ended"
    return f"{outcome[0]}: {orjson.dumps(outcome[1]).decode()}"


def _write_output(objects: Objects, job: PredictionJob) -> None:
    """The job's predictions, once it has ended: a line per input line, in its order."""
    parsed = gcs.parse_uri(job.prefix)
    assert parsed is not None and job.batch is not None
    bucket, prefix = parsed
    stamp = dt.datetime.fromtimestamp(job.created, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    directory = (
        f"{prefix.rstrip('/')}/prediction-model-{stamp}" if prefix.strip("/") else f"prediction-model-{stamp}"
    )
    lines = []
    for line, item in zip(job.lines, job.batch.items, strict=True):
        ok = item.outcome is not None and item.outcome[0] == 200
        done = job.batch.wall(item.due) if item.due is not None and item.outcome is not None else time.time()
        out = {**line, "status": "" if ok else _status(item.outcome), "processed_time": rfc3339(done)}
        if ok:
            assert item.outcome is not None
            out["response"] = item.outcome[1]
        lines.append(orjson.dumps(out))
    objects.put(bucket, f"{directory}/predictions.jsonl", b"\n".join(lines) + b"\n")
    job.directory = f"gs://{bucket}/{directory}"


async def _found(request: web.Request) -> PredictionJob | web.Response:
    if (bad := _signed_in(request)) is not None:
        return bad
    name = f"{_parent(request)}{request.match_info['job']}"
    job = _jobs(request).get(request.match_info["job"])
    if job is None or job.name != name:  # a job is its location's: another's path does not find it
        return _error(request, 404, f"The BatchPredictionJob does not exist: {name}")
    await _advance(request, job)
    return job


async def _advance(request: web.Request, job: PredictionJob) -> None:
    if job.batch is not None:
        await request.app["batches"].advance(job.batch)
        if job.batch.ended is not None and job.directory is None:  # a cancelled job's too (what it had done)
            _write_output(request.app["gcs"], job)


async def get(request: web.Request) -> web.Response:
    job = await _found(request)
    return job if isinstance(job, web.Response) else web.json_response(described(job))


async def cancel(request: web.Request) -> web.Response:
    job = await _found(request)
    if isinstance(job, web.Response):
        return job
    if state(job) in ENDED:
        return _error(request, 400, f"The BatchPredictionJob {job.name} has ended ({state(job)}).")
    assert job.batch is not None
    job.batch.cancelled = time.monotonic()
    return web.json_response({})


async def listed(request: web.Request) -> web.Response:
    """The location's jobs, newest first, `pageSize` a page (default 100) and the token of the rest."""
    if (bad := _signed_in(request)) is not None:
        return bad
    q, parent = request.query, _parent(request)
    test = list_filter.parse(q.get("filter", ""))
    if isinstance(test, str):
        return _error(request, 400, test)
    size = q.get("pageSize", "100")
    if not size.isdigit() or int(size) < 1:
        return _error(request, 400, f"Invalid pageSize: {size}")
    found = []
    for job in sorted(_jobs(request).values(), key=lambda j: j.created, reverse=True):
        await _advance(request, job)
        fields = {
            "display_name": job.display_name,
            "state": state(job),
            "create_time": rfc3339(job.created),
            "labels": job.labels,
        }
        if job.name.startswith(parent) and test(fields):
            found.append(described(job))
    start = int(q["pageToken"]) if q.get("pageToken", "").isdigit() else 0
    end = start + min(int(size), 1000)
    return web.json_response(
        {
            **({"batchPredictionJobs": found[start:end]} if found[start:end] else {}),
            **({"nextPageToken": str(end)} if end < len(found) else {}),
        }
    )


def add_routes(app: web.Application) -> None:
    app["vertex_jobs"] = {}
    app.add_routes(
        [
            web.post(PATH, create),
            web.get(PATH, listed),
            web.get(PATH + "/{job:[0-9]+}", get),
            web.post(PATH + "/{job:[0-9]+}:cancel", cancel),
        ]
    )
