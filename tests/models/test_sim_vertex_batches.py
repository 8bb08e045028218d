"""Vertex AI batch prediction on the simulator (runner/models/sim/vertex_batches.py, gcs.py): the input put in
Cloud Storage through Google's own client (google-cloud-storage), a batch prediction job made on it over the
REST API, watched to its end, its predictions read back; and what the services refuse, in their own shapes."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import google.api_core.exceptions as google_errors
import pytest
from google.cloud import storage
from google.oauth2.credentials import Credentials

from runner.config import BatchTurnaround, SimSettings
from runner.models.sim.process import SimServer

MODEL = "publishers/anthropic/models/claude-sonnet-4-5@20250929"
JOBS = "/v1/projects/p/locations/us-east5/batchPredictionJobs"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with SimServer(SimSettings(batches=BatchTurnaround(median_seconds=0.2))) as s:
        yield s


def _gcs(sim: SimServer) -> storage.Client:
    return storage.Client(project="p", credentials=Credentials(token="t"), client_options={"api_endpoint": sim.url})


def _call(sim: SimServer, method: str, path: str, body: Any = None, token: str | None = "t") -> tuple[int, Any]:
    headers = {"content-type": "application/json", **({"authorization": f"Bearer {token}"} if token else {})}
    req = urllib.request.Request(sim.url + path, method=method, headers=headers,
                                 data=json.dumps(body).encode() if body is not None else None)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _lines(n: int, **extra: Any) -> str:
    return "".join(json.dumps({"custom_id": f"req-{i}", "request": {
        "anthropic_version": "vertex-2023-10-16", "max_tokens": 200,
        "messages": [{"role": "user", "content": f"Close case {i} as resolved."}], **extra}}) + "\n" for i in range(n))


def _job(sim: SimServer, name: str, uris: list[str], model: str = MODEL, project: str = "p") -> tuple[int, Any]:
    return _call(sim, "POST", JOBS.replace("/p/", f"/{project}/"), {
        "displayName": name, "model": model,
        "inputConfig": {"instancesFormat": "jsonl", "gcsSource": {"uris": uris}},
        "outputConfig": {"predictionsFormat": "jsonl", "gcsDestination": {"outputUriPrefix": "gs://out/results/"}}})


def _ended(sim: SimServer, name: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        _, job = _call(sim, "GET", "/v1/" + name)
        if job["state"] in ("JOB_STATE_SUCCEEDED", "JOB_STATE_PARTIALLY_SUCCEEDED", "JOB_STATE_FAILED",
                            "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED"):
            return dict(job)
        time.sleep(0.1)
    raise AssertionError(f"{name} did not end")


def test_a_job_is_answered_line_by_line_in_the_predictions_of_its_output_directory(sim: SimServer) -> None:
    gcs = _gcs(sim)
    gcs.bucket("in").blob("evals/a.jsonl").upload_from_string(
        _lines(3) + json.dumps({"custom_id": "bad", "request": {"max_tokens": 10, "messages": []}}) + "\n")
    status, made = _job(sim, "pgsr-one", ["gs://in/evals/a.jsonl"])
    assert status == 200 and made["state"] == "JOB_STATE_PENDING"
    assert made["name"].startswith("projects/p/locations/us-east5/batchPredictionJobs/")
    job = _ended(sim, made["name"])
    assert job["state"] == "JOB_STATE_PARTIALLY_SUCCEEDED"
    assert job["completionStats"] == {"successfulCount": "3", "failedCount": "1", "incompleteCount": "0"}
    directory = job["outputInfo"]["gcsOutputDirectory"]
    assert directory.startswith("gs://out/results/prediction-model-")
    names = [b.name for b in gcs.list_blobs("out", prefix="results/")]
    assert names == [directory.removeprefix("gs://out/") + "/predictions.jsonl"]
    lines = [json.loads(line) for line in gcs.bucket("out").blob(names[0]).download_as_bytes().splitlines()]
    assert [line["custom_id"] for line in lines] == ["req-0", "req-1", "req-2", "bad"]
    assert all(line["status"] == "" and line["response"]["type"] == "message" for line in lines[:3])
    assert all(line["processed_time"].endswith("Z") and "request" in line for line in lines)
    refused = lines[3]
    assert "response" not in refused and refused["status"].startswith("400: ")
    assert "anthropic_version" in json.loads(refused["status"][5:])["error"]["message"]


def test_what_the_job_service_refuses_and_what_fails_a_job_after_its_create(sim: SimServer) -> None:
    _gcs(sim).bucket("in").blob("two.jsonl").upload_from_string(_lines(2))
    status, body = _call(sim, "POST", JOBS, {"model": MODEL}, token=None)
    assert status == 401 and body["error"]["status"] == "UNAUTHENTICATED"
    status, body = _call(sim, "POST", JOBS, {"model": MODEL})
    assert status == 400 and body["error"]["status"] == "INVALID_ARGUMENT" and "displayName" in body["error"]["message"]
    status, body = _job(sim, "x", ["gs://in/two.jsonl"], model="publishers/anthropic/models/claude-nope")
    assert status == 404 and body["error"]["status"] == "NOT_FOUND"
    status, body = _job(sim, "x", ["in/two.jsonl"])
    assert status == 400 and "gs://" in body["error"]["message"]
    status, made = _job(sim, "missing", ["gs://in/none.jsonl"])  # the create takes it: the job fails
    assert status == 200
    failed = _ended(sim, made["name"])
    assert failed["state"] == "JOB_STATE_FAILED" and "gs://in/none.jsonl" in failed["error"]["message"]
    status, body = _call(sim, "GET", JOBS + "/123")
    assert status == 404 and body["error"]["status"] == "NOT_FOUND"
    status, body = _call(sim, "GET", JOBS + "?filter=" + urllib.parse.quote('model_display_name="m"'))
    assert status == 400


def test_four_jobs_run_at_once_in_a_project_and_a_cancelled_one_keeps_what_it_had_done() -> None:
    with SimServer(SimSettings(batches=BatchTurnaround(median_seconds=600))) as slow:
        _gcs(slow).bucket("in").blob("one.jsonl").upload_from_string(_lines(2))
        made = [_job(slow, f"pgsr-{n}", ["gs://in/one.jsonl"])[1] for n in range(4)]
        status, body = _job(slow, "pgsr-5", ["gs://in/one.jsonl"])
        assert status == 429 and body["error"]["status"] == "RESOURCE_EXHAUSTED"
        assert _job(slow, "elsewhere", ["gs://in/one.jsonl"], project="q")[0] == 200  # another project's quota
        status, _ = _call(slow, "POST", f"/v1/{made[0]['name']}:cancel", {})
        assert status == 200
        job = _ended(slow, made[0]["name"])
        assert job["state"] == "JOB_STATE_CANCELLED" and job["completionStats"]["incompleteCount"] == "2"
        assert _call(slow, "POST", f"/v1/{made[0]['name']}:cancel", {})[0] == 400  # it has ended
        assert _job(slow, "pgsr-6", ["gs://in/one.jsonl"])[0] == 200  # its place is free again
        status, page = _call(slow, "GET", JOBS + "?pageSize=2&filter=" + urllib.parse.quote('display_name="pgsr-2"'))
        assert status == 200 and [j["displayName"] for j in page["batchPredictionJobs"]] == ["pgsr-2"]
        status, page = _call(slow, "GET", JOBS + "?pageSize=3")
        assert len(page["batchPredictionJobs"]) == 3 and page["nextPageToken"]
        _, rest = _call(slow, "GET", JOBS + f"?pageSize=3&pageToken={page['nextPageToken']}")
        assert len(rest["batchPredictionJobs"]) == 2 and "nextPageToken" not in rest
        later = '"2999-01-01T00:00:00Z"'
        _, none = _call(slow, "GET", JOBS + "?filter=" + urllib.parse.quote(f"create_time>={later}"))
        assert none == {}


def test_cloud_storage_as_googles_client_uses_it(sim: SimServer) -> None:
    gcs = _gcs(sim)
    bucket = gcs.bucket("objects")
    bucket.blob("a/one file.jsonl").upload_from_string(b"1\n")  # multipart, as the client sends a small upload
    bucket.blob("a/b/two.jsonl").upload_from_string(b"22\n")
    bucket.blob("c.txt").upload_from_string(b"333")
    blob = bucket.get_blob("a/one file.jsonl")
    assert blob is not None and blob.size == 2 and blob.md5_hash and blob.download_as_bytes() == b"1\n"
    listed = gcs.list_blobs("objects", prefix="a/", delimiter="/")
    assert [b.name for b in listed] == ["a/one file.jsonl"] and listed.prefixes == {"a/b/"}
    assert [b.name for b in gcs.list_blobs("objects", max_results=2)] == ["a/b/two.jsonl", "a/one file.jsonl"]
    assert [b.name for b in gcs.list_blobs("objects", page_size=1)] == ["a/b/two.jsonl", "a/one file.jsonl", "c.txt"]
    bucket.blob("c.txt").delete()
    with pytest.raises(google_errors.NotFound):
        bucket.blob("c.txt").delete()
    with pytest.raises(google_errors.NotFound):
        gcs.bucket("never-made").blob("x").download_as_bytes()
    status, body = _call(sim, "GET", "/storage/v1/b/objects/o", token=None)
    assert status == 401 and body["error"]["errors"][0]["reason"] == "required"
