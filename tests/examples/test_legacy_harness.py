"""examples/legacy-harness, unmodified, under the runner: both kinds, exactly once, and the same
per-record outcomes as its own sequential CLI on one database, through a worker kill -9 and a
`docker kill` of a sandbox mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.config import load_config
from runner.harness import database_spec
from runner.models.capabilities import lookup
from runner.models.usage import Tokens, cost
from runner.sandbox.base import Sandbox
from tests.runs import ready_container, worker_pids

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "legacy-harness"
RUNS = {"oracle": "oracle", "sloppy": "sloppy", "forgetful": "forgetful"}
LATENCY_MS = "30"  # the process environment wins over the example's .env (python-dotenv's rule)
pytestmark = [pytest.mark.slow, pytest.mark.docker]


@pytest.fixture(scope="module")
def example_image(sandbox_image: str) -> str:
    from runner.sandbox.image import ensure_image

    return ensure_image(database_spec(load_config(EXAMPLE / "runner.yaml")))


@pytest.fixture(scope="module")
def reference(example_image: str) -> Iterator[dict[str, dict[str, Any]]]:
    """The team's own CLI, sequentially, on one database (what they ran before the runner)."""
    from runner.sandbox.docker import DockerSandbox

    sb: Sandbox
    with DockerSandbox(example_image, "crmbench", run_id="pytest-legacy", owner_pid=os.getpid()) as sb:
        assert sb.endpoint is not None
        env = {**os.environ, "DB_HOST": sb.endpoint.host, "DB_PORT": str(sb.endpoint.port), "DB_USER": "crmbench",
               "DB_PASSWORD": sb.endpoint.password, "DB_NAME": "crmbench", "STANDIN_LATENCY_MS": "0"}
        out: dict[str, dict[str, Any]] = {}
        for run, model in RUNS.items():
            dst = Path(f"/tmp/legacy-ref-{os.getpid()}-{run}.jsonl")
            subprocess.run([sys.executable, "-m", "crmbench.run_baseline", "--conversations", "conversations.jsonl",
                            "--output", str(dst), "--backend", "postgres", "--provider", "standin", "--model", model],
                           cwd=EXAMPLE, env=env, check=True, capture_output=True, timeout=300)
            out[run] = {r["conversation_id"]: r for r in map(json.loads, dst.read_text().splitlines())}
            dst.unlink()
        yield out


def _start(config: str, out: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "STANDIN_LATENCY_MS": LATENCY_MS}
    return subprocess.Popen([sys.executable, "-m", "runner", "run", str(EXAMPLE / config), "--out", str(out),
                             "--sandbox", "docker", "-w", "4"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)


def _wait_for(out: Path, n: int, p: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while sum(len(f.read_text().splitlines()) for f in (out / "results").glob("*.jsonl")) < n \
            if (out / "results").exists() else True:
        assert p.poll() is None and time.monotonic() < deadline, "no results in time"
        time.sleep(0.1)


def _same_as_reference(out: Path, reference: dict[str, dict[str, Any]]) -> None:
    for run in RUNS:
        rows = [json.loads(x) for x in (out / "results" / f"{run}.jsonl").read_text().splitlines()]
        ids = [r["record_id"] for r in rows]
        assert len(ids) == len(set(ids)) == 40, (run, len(ids))
        assert all(r["status"] == "ok" for r in rows), [r["error"] for r in rows if r["status"] != "ok"]
        assert {r["record_id"]: r["output"] for r in rows} == reference[run], run
        assert [r["success"] for r in rows] == [reference[run][i]["overall_success"] for i in ids]


def test_python_kind_survives_a_killed_worker(tmp_path: Path, reference: dict[str, dict[str, Any]]) -> None:
    out = tmp_path / "out"
    p = _start("runner.yaml", out)
    _wait_for(out, 6, p)
    os.kill(worker_pids(p.pid)[0], signal.SIGKILL)
    log, _ = p.communicate(timeout=300)
    assert p.returncode == 0, log[-3000:]
    _same_as_reference(out, reference)
    assert "died" in (out / "logs" / "supervisor.log").read_text()


def test_command_kind_survives_a_killed_sandbox(tmp_path: Path, reference: dict[str, dict[str, Any]]) -> None:
    out = tmp_path / "out"
    p = _start("runner-command.yaml", out)
    _wait_for(out, 6, p)
    victim = ready_container(out, p)
    subprocess.run(["docker", "kill", victim], check=True, capture_output=True)
    log, _ = p.communicate(timeout=300)
    assert p.returncode == 0, log[-3000:]
    _same_as_reference(out, reference)
    assert "replaced by" in (out / "logs" / "supervisor.log").read_text()


def test_sdk_calls_of_the_harness_go_through_the_gateway(tmp_path: Path, example_image: str) -> None:
    """Its agents on the official SDKs, base URLs from the environment: every call is the gateway's."""
    cfg = tmp_path / "sdk.yaml"
    text = (EXAMPLE / "runner.yaml").read_text().split("runs:")[0].replace("conversations.jsonl",
                                                                           str(EXAMPLE / "conversations.jsonl"))
    text = text.replace("pythonpath: [.]", f"pythonpath: [{EXAMPLE}]").replace("schema: [schema]",
                                                                               f"schema: [{EXAMPLE / 'schema'}]")
    cfg.write_text(text + "gateway: true\nruns:\n"
                   "  - {name: claude, params: {provider: anthropic, model: claude-sonnet-5-5}}\n"
                   "  - {name: gpt, params: {provider: openai, model: gpt-5.4}}\n")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    p = subprocess.run([sys.executable, "-m", "runner", "run", str(cfg), "--out", str(tmp_path / "out"), "--limit",
                        "6", "--no-cache"], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    for run in ("claude", "gpt"):
        rows = [json.loads(x) for x in (tmp_path / "out" / "results" / f"{run}.jsonl").read_text().splitlines()]
        assert len(rows) == 6 and all(r["status"] == "ok" for r in rows), [r["error"] for r in rows]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    report = json.loads((tmp_path / "out" / "report.json").read_text())["runs"]
    tokens = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
    for run, model in (("claude", "claude-sonnet-5-5"), ("gpt", "gpt-5.4")):
        through, served = report[run]["gateway"], manifest["simulator"][model]
        assert through["llm_calls"] >= 6 and through["errors"] == 0 and through["input_tokens"] > 0
        # The report's tokens and cost for the run are what the simulator served, at the model's prices.
        assert {k: through[k] for k in tokens} == {k: served.get(k, 0) for k in tokens}
        total, _, _ = cost(lookup(model, "anthropic" if run == "claude" else "openai").prices,
                           Tokens(served["input_tokens"], served["output_tokens"], served.get("cache_write_tokens", 0),
                                 served.get("cache_read_tokens", 0)))
        assert through["cost_usd"] == pytest.approx(total, abs=1e-6)
        # ... and each record carries its own share: they add up to the run's.
        rows = [json.loads(x) for x in (tmp_path / "out" / "results" / f"{run}.jsonl").read_text().splitlines()]
        assert sum(r["usage"]["llm_calls"] for r in rows) == through["llm_calls"]
        assert sum(r["usage"]["output_tokens"] for r in rows) == served["output_tokens"]
        assert sum(r["usage"]["cost_usd"] for r in rows) == pytest.approx(total, abs=1e-6)
    assert "model calls through the gateway" in p.stdout


def test_its_sdk_calls_in_batch_mode_end_as_they_do_interactively_at_half_the_price(tmp_path: Path,
                                                                                     example_image: str) -> None:
    """Batch mode for a user's harness, unmodified: its blocking SDK calls are held by the gateway, sent in
    batches across workers, each caller answered when its batch ends; the same outcomes as interactive."""
    text = (EXAMPLE / "runner.yaml").read_text().split("runs:")[0].replace("conversations.jsonl",
                                                                           str(EXAMPLE / "conversations.jsonl"))
    text = text.replace("pythonpath: [.]", f"pythonpath: [{EXAMPLE}]").replace("schema: [schema]",
                                                                               f"schema: [{EXAMPLE / 'schema'}]")
    cfg = tmp_path / "sdk.yaml"
    cfg.write_text(text + "gateway: true\nworkers: 2\n"
                   "simulator: {batches: {median_seconds: 0.05}}\n"
                   "batch: {window_seconds: 0.05, poll_min_seconds: 0.05, poll_max_seconds: 0.1}\n"
                   "runs:\n  - {name: claude, params: {provider: anthropic, model: claude-sonnet-5-5}}\n"
                   "  - {name: gpt, params: {provider: openai, model: gpt-5.4}}\n")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    rows: dict[str, list[dict[str, Any]]] = {}
    for mode in ("interactive", "batch"):
        out = tmp_path / mode
        p = subprocess.run([sys.executable, "-m", "runner", "run", str(cfg), "--out", str(out), "--limit", "3",
                            "--no-cache", *(["--batch"] if mode == "batch" else [])],
                           capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
        assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
        rows[mode] = sorted((json.loads(x) for run in ("claude", "gpt")
                             for x in (out / "results" / f"{run}.jsonl").read_text().splitlines()),
                            key=lambda r: (r["run"], r["record_id"]))
    assert len(rows["batch"]) == 6 and all(r["status"] == "ok" for r in rows["batch"])
    assert [(r["run"], r["record_id"], r["success"], r["metrics"]) for r in rows["batch"]] == \
        [(r["run"], r["record_id"], r["success"], r["metrics"]) for r in rows["interactive"]]
    manifest = json.loads((tmp_path / "batch" / "manifest.json").read_text())
    assert manifest["batch_runs"] == ["claude", "gpt"] and manifest["batches"]["batches_submitted"] >= 2
    calls = sum(r["usage"]["llm_calls"] for r in rows["batch"])
    assert calls == sum(r["usage"]["llm_calls"] for r in rows["interactive"]) > 0
    assert manifest["batches"]["requests_answered"] == calls  # every call of the harness went in a batch
    for run, model in (("claude", "claude-sonnet-5-5"), ("gpt", "gpt-5.4")):
        served = manifest["simulator"][model]
        full, _, _ = cost(lookup(model, "anthropic" if run == "claude" else "openai").prices,
                          Tokens(served["input_tokens"], served["output_tokens"], served.get("cache_write_tokens", 0),
                                 served.get("cache_read_tokens", 0), served.get("cache_write_1h_tokens", 0)))
        mine = [r for r in rows["batch"] if r["run"] == run]
        paid = sum(r["usage"]["cost_usd"] for r in mine)
        # each call at the batch price; each record's cost is rounded to the millionth of a dollar
        assert paid == pytest.approx(full / 2, abs=1e-6 * len(mine))
