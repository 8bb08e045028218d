"""deploy/ray/rayjob.yaml, the KubeRay example. No cluster and no KubeRay schema offline, so: the
pods it describes are valid Kubernetes pods (strict, as deploy/k8s's), its RayJob fields are the ones
KubeRay's own ray.io/v1 sample uses, and its entrypoint is a `runner run` the CLI accepts with a
config that validates. Running it on KubeRay is not tested here (docs/scale-out.md)."""

from __future__ import annotations

import shlex
from typing import Any

import kubernetes_validate
import yaml

from runner.cli import run as run_command
from tests.deploy.test_k8s import KUBERNETES, ROOT

JOB = ROOT / "deploy" / "ray" / "rayjob.yaml"
# The fields of KubeRay's ray-operator/config/samples/ray-job.sample.yaml (ray.io/v1) this file may use.
RAYJOB_FIELDS = {"entrypoint", "shutdownAfterJobFinishes", "ttlSecondsAfterFinished", "activeDeadlineSeconds",
                 "runtimeEnvYAML", "suspend", "rayClusterSpec", "submitterPodTemplate", "submissionMode"}
CLUSTER_FIELDS = {"rayVersion", "headGroupSpec", "workerGroupSpecs"}
HEAD_FIELDS = {"rayStartParams", "template"}
GROUP_FIELDS = {"groupName", "replicas", "minReplicas", "maxReplicas", "rayStartParams", "template"}


def _job() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(JOB.read_text())
    return doc


def _pod(template: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", **template.get("metadata", {})},
            "spec": template["spec"]}


def test_the_rayjob_uses_kuberays_fields_and_its_pods_are_valid() -> None:
    job = _job()
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    spec = job["spec"]
    assert set(spec) <= RAYJOB_FIELDS and set(spec["rayClusterSpec"]) <= CLUSTER_FIELDS
    head, groups = spec["rayClusterSpec"]["headGroupSpec"], spec["rayClusterSpec"]["workerGroupSpecs"]
    assert set(head) <= HEAD_FIELDS and all(set(g) <= GROUP_FIELDS for g in groups)
    assert all(isinstance(v, str) for g in [head, *groups] for v in g["rayStartParams"].values())
    assert head["rayStartParams"]["num-cpus"] == "0"  # no worker actor beside the supervisor
    for template in [head["template"], *(g["template"] for g in groups)]:
        kubernetes_validate.validate(_pod(template), KUBERNETES, strict=True)
        mounts = {m["mountPath"] for m in template["spec"]["containers"][0]["volumeMounts"]}
        assert {"/config", "/data", "/results"} <= mounts


def test_the_entrypoint_is_a_run_the_cli_accepts_on_a_valid_config() -> None:
    from runner.config import load_config

    argv = shlex.split(_job()["spec"]["entrypoint"])
    assert argv[:2] == ["runner", "run"]
    ctx = run_command.make_context("run", argv[2:])  # raises on an unknown option or a bad value
    assert ctx.params["executor"] == "ray" and ctx.params["sandbox"] == "local"
    assert ctx.params["config"] == "/config/runner.yaml" and ctx.params["output_dir"].startswith("/results/")
    cfg = load_config(ROOT / "deploy" / "k8s" / "runner.yaml")  # the ConfigMap both examples mount
    assert cfg.runs and cfg.sandbox == "local"
