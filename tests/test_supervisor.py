"""The engine end to end: `runner run` as a user runs it, faults included."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "crm-sample.jsonl"
VOLATILE = {"started_at", "finished_at", "wall_seconds", "timings", "worker", "sandbox_id", "model_calls",
            "item_id", "attempt",
            # usage: prompt-cache accounting depends on which requests came first (the provider's cache is shared)
            "usage"}

pytestmark = pytest.mark.slow


def _config(tmp_path: Path, *, p50_ms: float = 0, runs: str = "both", extra: str = "") -> Path:
    strong = ("  - {name: strong, provider: anthropic, model: claude-sonnet-5-5, sim_model: sim-strong}\n")
    atlas = ("  - {name: atlas, agent: atlas, provider: openai, model: gpt-5.4-mini, sim_model: sim-mini,\n"
             "     teacher: {provider: anthropic, model: claude-sonnet-5-5, sim_model: sim-teacher}}\n")
    text = (f"dataset: {SAMPLE}\nproviders_mode: sim\ncache: false\nworkers: 4\nheartbeat_timeout_seconds: 20\n"
            f"conversation_timeout_seconds: 60\nshutdown_grace_seconds: 20\n"
            f"simulator: {{latency: {{p50_ms: {p50_ms}}}}}\nruns:\n" + strong + (atlas if runs == "both" else "")
            + extra)
    p = tmp_path / "cfg.yaml"
    p.write_text(text)
    return p


def _start(cfg: Path, out: Path, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    return subprocess.Popen([sys.executable, "-m", "runner", "run", str(cfg), "--out", str(out), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def _finish(p: subprocess.Popen[str], timeout: float = 300) -> tuple[int, str]:
    out, _ = p.communicate(timeout=timeout)
    return p.returncode, out


def _rows(out: Path, run: str) -> list[dict[str, Any]]:
    path = out / "results" / f"{run}.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _lines(out: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in (out / "results").glob("*.jsonl")) \
        if (out / "results").exists() else 0


def _wait_for_results(out: Path, n: int, p: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while _lines(out) < n:
        assert p.poll() is None, p.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "no results in time"
        time.sleep(0.1)


def _children(pid: int) -> list[tuple[int, str]]:
    out = subprocess.run(["ps", "-ww", "-o", "pid=,args=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [(int(line.split(None, 1)[0]), line.split(None, 1)[1]) for line in out.strip().splitlines()]


def _workers(pid: int) -> list[int]:
    return [c for c, args in _children(pid) if "spawn_main" in args]


def _containers(**labels: str) -> list[str]:
    filters = [f"--filter=label={k}={v}" for k, v in labels.items()]
    return subprocess.run(["docker", "ps", "-aq", *filters], capture_output=True, text=True).stdout.split()


def _exactly_once_all_ok(out: Path, runs: list[str], n: int) -> None:
    for run in runs:
        rows = _rows(out, run)
        ids = [r["record_id"] for r in rows]
        assert len(ids) == len(set(ids)) == n, (run, len(ids), len(set(ids)))
        assert all(r["status"] == "ok" for r in rows), [r["error"] for r in rows if r["status"] != "ok"]


@pytest.mark.parametrize("backend", ["docker", "local"])
def test_four_workers_baseline_and_atlas_together(tmp_path: Path, backend: str, request: pytest.FixtureRequest
                                                  ) -> None:
    if backend == "docker":
        request.getfixturevalue("sandbox_image")
    else:
        request.getfixturevalue("local_bindir")
    out = tmp_path / "out"
    code, log = _finish(_start(_config(tmp_path), out, "--sandbox", backend, "--limit", "16"))
    assert code == 0, log[-3000:]
    _exactly_once_all_ok(out, ["strong", "atlas"], 16)
    rows = _rows(out, "strong") + _rows(out, "atlas")
    assert sum(r["success"] for r in _rows(out, "strong")) >= 15
    assert len({r["worker"] for r in rows}) >= 2 and len({r["sandbox_id"] for r in rows}) >= 2
    assert [r["record_id"] for r in _rows(out, "strong")] == sorted(
        [r["record_id"] for r in _rows(out, "strong")])  # dataset order
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["sandbox"] == backend and manifest["counts"] == {"strong": 16, "atlas": 16}
    assert (out / "report.html").exists() and (out / "logs" / "supervisor.log").exists()
    if backend == "docker":
        assert manifest["run_id"] and not _containers(**{"pgsandbox-runner.run": manifest["run_id"]})


@pytest.mark.docker
def test_worker_killed_mid_conversation_gives_exactly_once_results(tmp_path: Path, sandbox_image: str) -> None:
    # Docker only: the kill is the same for both backends, and a container is what a dead worker can leak.
    out = tmp_path / "out"
    p = _start(_config(tmp_path, p50_ms=120), out, "--sandbox", "docker", "--limit", "12")
    _wait_for_results(out, 2, p)
    victim = _workers(p.pid)[0]
    os.kill(victim, signal.SIGKILL)
    code, log = _finish(p)
    assert code == 0, log[-3000:]
    _exactly_once_all_ok(out, ["strong", "atlas"], 12)
    assert "died" in (out / "logs" / "supervisor.log").read_text()
    assert any(r["attempt"] == 2 for r in _rows(out, "strong") + _rows(out, "atlas"))


@pytest.mark.docker
def test_container_killed_is_replaced_and_the_conversation_retried(tmp_path: Path, sandbox_image: str) -> None:
    out = tmp_path / "out"
    p = _start(_config(tmp_path, p50_ms=120), out, "--sandbox", "docker", "--limit", "12")
    _wait_for_results(out, 2, p)
    victim = _containers(**{"pgsandbox-runner.owner-pid": str(p.pid)})[0]
    subprocess.run(["docker", "kill", victim], check=True, capture_output=True)
    code, log = _finish(p)
    assert code == 0, log[-3000:]
    _exactly_once_all_ok(out, ["strong", "atlas"], 12)
    assert "replaced by" in (out / "logs" / "supervisor.log").read_text()
    assert not _containers(**{"pgsandbox-runner.owner-pid": str(p.pid)})


@pytest.mark.docker
def test_sigint_removes_every_container_and_the_same_command_completes(tmp_path: Path, sandbox_image: str) -> None:
    out = tmp_path / "out"
    cfg = _config(tmp_path, p50_ms=150)
    p = _start(cfg, out, "--sandbox", "docker", "--limit", "12", "-w", "2")
    _wait_for_results(out, 3, p)
    p.send_signal(signal.SIGINT)
    code, log = _finish(p, timeout=120)
    assert code == 130, log[-3000:]
    assert not _containers(**{"pgsandbox-runner.owner-pid": str(p.pid)})
    first = _lines(out)
    assert 0 < first < 24
    code, log = _finish(_start(cfg, out, "--sandbox", "docker", "--limit", "12", "-w", "2"))
    assert code == 0, log[-3000:]
    _exactly_once_all_ok(out, ["strong", "atlas"], 12)
    assert "already done" in log


def _comparable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def strip(d: dict[str, Any]) -> dict[str, Any]:
        return {k: strip(v) if isinstance(v, dict) else v for k, v in d.items() if k not in VOLATILE}

    return [strip(r) for r in rows]


def test_shards_merged_equal_the_unsharded_run(tmp_path: Path, local_bindir: str) -> None:
    cfg = _config(tmp_path)
    subset = tmp_path / "subset.jsonl"
    subset.write_text("".join(line + "\n" for line in SAMPLE.read_text().splitlines()[:9]))
    code, log = _finish(_start(cfg, tmp_path / "all", "--sandbox", "local", "--dataset", str(subset), "-w", "2"))
    assert code == 0, log[-3000:]
    for i in (1, 2, 3):
        code, log = _finish(_start(cfg, tmp_path / f"s{i}", "--sandbox", "local", "--dataset", str(subset),
                                   "--shard", f"{i}/3", "-w", "2"))
        assert code == 0, log[-3000:]
    merged = subprocess.run([sys.executable, "-m", "runner", "merge", *(str(tmp_path / f"s{i}") for i in (1, 2, 3)),
                             "--out", str(tmp_path / "merged")], capture_output=True, text=True)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    for run in ("strong", "atlas"):
        assert _comparable(_rows(tmp_path / "merged", run)) == _comparable(_rows(tmp_path / "all", run))
        assert len(_rows(tmp_path / "merged", run)) == 9


def test_a_boot_failure_stops_the_run_with_a_clear_message(tmp_path: Path) -> None:
    code, log = _finish(_start(_config(tmp_path), tmp_path / "out", "--sandbox", "external", "--dsn",
                               "host=127.0.0.1 port=1 user=x password=y dbname=crm"), timeout=120)
    assert code == 2 and "could not boot" in log and "cannot reach the external database" in log
    assert "password=y" not in log


def test_a_fatal_provider_error_stops_the_run_at_the_first_call(tmp_path: Path, local_bindir: str) -> None:
    cfg = _config(tmp_path, runs="one").read_text().replace("sim_model: sim-strong", "sim_model: no-such-model")
    (tmp_path / "bad.yaml").write_text(cfg)
    code, log = _finish(_start(tmp_path / "bad.yaml", tmp_path / "out", "--sandbox", "local", "-w", "2"),
                        timeout=120)
    assert code == 2 and "404" in log, log[-2000:]
    assert _lines(tmp_path / "out") < 5


def test_a_conversation_over_its_time_limit_is_an_error_result_and_the_worker_goes_on(
        tmp_path: Path, local_bindir: str) -> None:
    cfg = _config(tmp_path, p50_ms=1500, runs="one")
    code, log = _finish(_start(cfg, tmp_path / "out", "--sandbox", "local", "--limit", "3", "-w", "1",
                               "--timeout", "1"), timeout=120)
    assert code == 0, log[-2000:]
    rows = _rows(tmp_path / "out", "strong")
    assert len(rows) == 3 and all(r["status"] == "error" and r["error_kind"] == "timeout" for r in rows)


def test_skip_invalid_runs_the_good_lines_and_puts_the_bad_aside(tmp_path: Path, local_bindir: str) -> None:
    data = tmp_path / "d.jsonl"
    lines = SAMPLE.read_text().splitlines()[:3]
    data.write_text("\n".join([lines[0], "{broken", lines[1], lines[2]]) + "\n")
    cfg = _config(tmp_path, runs="one")
    code, log = _finish(_start(cfg, tmp_path / "out1", "--sandbox", "local", "--dataset", str(data)), timeout=120)
    assert code == 2 and f"{data}:2: not valid JSON" in log
    code, log = _finish(_start(cfg, tmp_path / "out2", "--sandbox", "local", "--dataset", str(data),
                               "--skip-invalid", "-w", "2"), timeout=120)
    assert code == 0, log[-2000:]
    assert len(_rows(tmp_path / "out2", "strong")) == 3
    assert '"line": 2' in data.with_suffix(".rejects.jsonl").read_text()


def test_atlas_telemetry_also_goes_to_a_long_lived_database(tmp_path: Path, shared_local_sandbox: Any) -> None:
    import psycopg

    dsn = shared_local_sandbox.dsn("atlas")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS atlas_steps, atlas_sessions")
    extra = f"telemetry_dsn: '{dsn}'\n"
    code, log = _finish(_start(_config(tmp_path, extra=extra), tmp_path / "out", "--sandbox", "local", "--limit", "3",
                               "-w", "2", "--runs", "atlas"), timeout=120)
    assert code == 0, log[-2000:]
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT conversation_id, reward FROM atlas_sessions ORDER BY conversation_id").fetchall()
    exported = sorted((r["record_id"], r["output"]["atlas"]["reward"]) for r in _rows(tmp_path / "out", "atlas"))
    assert [tuple(r) for r in rows] == exported and len(rows) == 3
    assert dsn.split("password=")[1].split()[0] not in log  # the password never reaches the console
