"""deploy/k8s: the manifests are valid Kubernetes objects (strict schema validation offline with
kubernetes-validate: no cluster here), `kubectl kustomize` builds them, and the shard arithmetic of the
Indexed Job covers every record exactly once. What is and is not tested: docs/scale-out.md."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from runner.config import load_config
from runner.plan import in_shard, parse_shard
from runner.records import iter_records

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
SAMPLE = ROOT / "data" / "crm-sample.jsonl"
KUBERNETES = "1.33"  # backoffLimitPerIndex is GA from 1.33


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]


@pytest.mark.parametrize("name", ["shards-job.yaml", "merge-job.yaml", "results-pvc.yaml", "gateway.yaml"])
def test_manifests_are_valid_kubernetes_objects(name: str) -> None:
    for doc in _docs(name):
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)  # unknown fields fail too


def test_kustomize_builds_valid_objects() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl (the manifests themselves are validated above)")
    built = subprocess.run([kubectl, "kustomize", str(K8S)], capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    docs = [d for d in yaml.safe_load_all(built.stdout) if d]
    assert {d["kind"] for d in docs} == {"ConfigMap", "PersistentVolumeClaim", "Job", "Deployment", "Service"}
    for d in docs:
        kubernetes_validate.validate(d, KUBERNETES, strict=True)
    config = next(d for d in docs if d["kind"] == "ConfigMap")
    assert config["metadata"]["name"] == "pgsandbox-config" and "runner.yaml" in config["data"]


def _shard_of(job: dict[str, Any], index: int) -> tuple[int, int]:
    """The --shard the pod with this JOB_COMPLETION_INDEX passes, as its shell computes it."""
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    script = container["args"][0].replace("exec runner run", "printf '%s\\n'")
    out = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, check=True,
                         env={**os.environ, **env, "JOB_COMPLETION_INDEX": str(index)}).stdout.split()
    shard = parse_shard(out[out.index("--shard") + 1])
    assert shard is not None and out[out.index("--out") + 1] == f"/results/shard-{index}"
    return shard


def test_every_pod_runs_its_own_shard_and_together_they_cover_every_record_once() -> None:
    (job,) = _docs("shards-job.yaml")
    n = job["spec"]["completions"]
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["parallelism"] == n == int(env["SHARDS"])
    shards = [_shard_of(job, k) for k in range(n)]
    assert shards == [(k + 1, n) for k in range(n)]
    ids = [r.id for r in iter_records(SAMPLE, id_field="id")]
    owners = {rid: [s for s in shards if in_shard(rid, s)] for rid in ids}
    assert all(len(o) == 1 for o in owners.values())  # exactly one pod per record
    assert all(sum(in_shard(rid, s) for rid in ids) > 0 for s in shards)  # no idle pod on the sample


def test_the_pods_config_is_a_valid_runner_config() -> None:
    cfg = load_config(K8S / "runner.yaml")
    assert cfg.sandbox == "local" and str(cfg.dataset) == "/data/crm-sample.jsonl"
    assert {r.name for r in cfg.runs} == {"claude-sonnet", "gpt-large", "gpt-mini", "atlas"}
    (job,) = _docs("shards-job.yaml")
    mounts = {m["mountPath"] for m in job["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
    assert {"/config", "/data", "/results"} <= mounts
