"""Helpers for tests that run `runner run` as a user does: a config on the sample CRM data with the
simulator, the command started and finished, its results read back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import children, descendants, servers, worker_pids

__all__ = ["children", "descendants", "servers", "worker_pids"]  # the process tree of a run: shared with the benchmarks

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "crm-sample.jsonl"


def proc_stat(pid: int) -> list[str] | None:
    """A process's /proc/PID/stat fields after its name (state first, then ppid, pgrp...); None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (dead, its exit status not yet collected)."""
    fields = proc_stat(pid)
    return fields is not None and fields[0] != "Z"


def run_config(tmp_path: Path, *, p50_ms: float = 0, runs: str = "both", extra: str = "") -> Path:
    strong = ("  - {name: strong, provider: anthropic, model: claude-sonnet-5-5, sim_model: sim-strong}\n")
    atlas = ("  - {name: atlas, agent: atlas, provider: openai, model: gpt-5.4-mini, sim_model: sim-mini,\n"
             "     teacher: {provider: anthropic, model: claude-sonnet-5-5, sim_model: sim-teacher}}\n")
    text = (f"dataset: {SAMPLE}\nproviders: sim\ncache: false\nworkers: 4\nheartbeat_timeout_seconds: 20\n"
            f"conversation_timeout_seconds: 60\nshutdown_grace_seconds: 20\n"
            f"simulator: {{latency: {{p50_ms: {p50_ms}}}}}\nruns:\n" + strong + (atlas if runs == "both" else "")
            + extra)
    p = tmp_path / "cfg.yaml"
    p.write_text(text)
    return p


TOY = Path(__file__).resolve().parent / "harness" / "toy"
TOY_PYTHON = f"  kind: python\n  entrypoint: toy.toyharness:play\n  pythonpath: [{TOY.parent}]\n"


def toy_config(tmp_path: Path, harness: str, records: list[dict[str, Any]], *, extra: str = "") -> Path:
    """A user's harness (tests/harness/toy) on its own schema, one record per failure mode."""
    data = tmp_path / "records.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    cfg = tmp_path / "runner.yaml"
    settings = {"workers": "2", "max_attempts": "2", "conversation_timeout_seconds": "4"}
    for line in extra.splitlines():  # extra settings override the defaults above
        key, _, value = line.partition(":")
        settings[key.strip()] = value.strip()
    cfg.write_text("dataset: records.jsonl\n" + "".join(f"{k}: {v}\n" for k, v in settings.items())
                   + f"success_field: ok\nharness:\n{harness}\n"
                   f"database: {{schema: [{TOY / 'schema'}], name: toy, user: toy}}\n"
                   "runs:\n  - {name: a, params: {greeting: hello}}\n")
    return cfg


def results_by_id(out: Path, run: str = "a") -> dict[str, dict[str, Any]]:
    """One run's results by record id, checked to hold each record once."""
    rows = rows_of(out, run)
    ids = [r["record_id"] for r in rows]
    assert len(ids) == len(set(ids)), ids
    return {r["record_id"]: r for r in rows}


def start_run(cfg: Path, out: Path, *args: str) -> subprocess.Popen[str]:
    # no CI: fail_on_error's default would then depend on where the tests run
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k != "CI"}
    return subprocess.Popen([sys.executable, "-m", "runner", "run", str(cfg), "--out", str(out), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def finish(p: subprocess.Popen[str], timeout: float = 300) -> tuple[int, str]:
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # where it is stuck, not just that it is: its threads' stacks (SIGUSR1, runner/cli.py)
        p.send_signal(signal.SIGUSR1)
        time.sleep(1)
        p.kill()
        out, _ = p.communicate()
        raise AssertionError(f"runner did not finish in {timeout:.0f}s; its output, then its threads:\n"
                             f"{out[-12000:]}") from None
    return p.returncode, out


def rows_of(out: Path, run: str) -> list[dict[str, Any]]:
    path = out / "results" / f"{run}.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def line_count(out: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in (out / "results").glob("*.jsonl")) \
        if (out / "results").exists() else 0


def wait_for_results(out: Path, n: int, p: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while line_count(out) < n:
        assert p.poll() is None, p.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "no results in time"
        time.sleep(0.1)


def assert_exactly_once(out: Path, runs: list[str], n: int) -> None:
    """Every (run, record) once, no torn line, the manifest's counts equal to the files' lines."""
    manifest = json.loads((out / "manifest.json").read_text())
    for run in runs:
        rows = [json.loads(x) for x in (out / "results" / f"{run}.jsonl").read_text().splitlines()]
        ids = [r["record_id"] for r in rows]
        assert len(ids) == len(set(ids)) == n, (run, len(ids), len(set(ids)))
        assert manifest["counts"][run] == n, (run, manifest["counts"])


def ready_containers(out: Path, p: subprocess.Popen[str]) -> list[str]:
    """The containers of the workers that are ready now (each sandbox named in the supervisor's "ready"
    line): a container killed while its worker still boots is a boot failure, which stops the run by design."""
    import re

    log = (out / "logs" / "supervisor.log").read_text() if (out / "logs" / "supervisor.log").exists() else ""
    ready = set(re.findall(r"ready: docker sandbox (\S+)", log))
    names = subprocess.run(["docker", "ps", "--format", "{{.ID}} {{.Names}}",
                            f"--filter=label=pgsandbox-runner.owner-pid={p.pid}"],
                           capture_output=True, text=True).stdout.split("\n")
    return [line.split()[0] for line in names if line and line.split()[1].removeprefix("pgsr-") in ready]


def ready_container(out: Path, p: subprocess.Popen[str], timeout: float = 60) -> str:
    """The container of a worker that is ready, waited for."""
    deadline = time.monotonic() + timeout
    while not (ready := ready_containers(out, p)):
        assert p.poll() is None and time.monotonic() < deadline, "no ready worker's container"
        time.sleep(0.2)
    return ready[0]


def containers(*, owner_pid: int | None = None, run_id: str | None = None, stopped_too: bool = True) -> list[str]:
    """Ids of this project's containers: those the run of `owner_pid` (the supervisor's pid) or of
    `run_id` started (docker ps; stopped ones too unless told otherwise)."""
    filters = [f"--filter=label=pgsandbox-runner.{k}={v}" for k, v in (("owner-pid", owner_pid), ("run", run_id))
               if v is not None]
    return subprocess.run(["docker", "ps", "-q", *(["-a"] if stopped_too else []), *filters],
                          capture_output=True, text=True).stdout.split()
