"""The engine end to end: `runner run` as a user runs it, faults included."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.runs import (
    SAMPLE,
    containers,
    finish,
    line_count,
    ready_container,
    rows_of,
    run_config,
    start_run,
    wait_for_results,
    worker_pids,
)

pytestmark = pytest.mark.slow
VOLATILE = {"started_at", "finished_at", "wall_seconds", "timings", "worker", "sandbox_id", "model_calls",
            "item_id", "attempt",
            # usage: prompt-cache accounting depends on which requests came first (the provider's cache is shared)
            "usage"}


def _workers(pid: int) -> list[int]:
    return worker_pids(pid)


def _exactly_once_all_ok(out: Path, runs: list[str], n: int) -> None:
    for run in runs:
        rows = rows_of(out, run)
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
    code, log = finish(start_run(run_config(tmp_path), out, "--sandbox", backend, "--limit", "16"))
    assert code == 0, log[-3000:]
    _exactly_once_all_ok(out, ["strong", "atlas"], 16)
    rows = rows_of(out, "strong") + rows_of(out, "atlas")
    assert sum(r["success"] for r in rows_of(out, "strong")) >= 15
    assert len({r["worker"] for r in rows}) >= 2 and len({r["sandbox_id"] for r in rows}) >= 2
    assert [r["record_id"] for r in rows_of(out, "strong")] == sorted(
        [r["record_id"] for r in rows_of(out, "strong")])  # dataset order
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["sandbox"] == backend and manifest["counts"] == {"strong": 16, "atlas": 16}
    assert (out / "report.html").exists() and (out / "logs" / "supervisor.log").exists()
    if backend == "docker":
        assert manifest["run_id"] and not containers(run_id=manifest["run_id"])


@pytest.mark.docker
def test_worker_killed_mid_conversation_gives_exactly_once_results(tmp_path: Path, sandbox_image: str) -> None:
    # Docker only: the kill is the same for both backends, and a container is what a dead worker can leak.
    out = tmp_path / "out"
    p = start_run(run_config(tmp_path, p50_ms=120), out, "--sandbox", "docker", "--limit", "12")
    wait_for_results(out, 2, p)
    victim = _workers(p.pid)[0]
    os.kill(victim, signal.SIGKILL)
    code, log = finish(p)
    assert code == 0, log[-3000:]
    _exactly_once_all_ok(out, ["strong", "atlas"], 12)
    assert "died" in (out / "logs" / "supervisor.log").read_text()
    assert any(r["attempt"] == 2 for r in rows_of(out, "strong") + rows_of(out, "atlas"))


@pytest.mark.docker
def test_container_killed_is_replaced_and_the_conversation_retried(tmp_path: Path, sandbox_image: str) -> None:
    out = tmp_path / "out"
    p = start_run(run_config(tmp_path, p50_ms=120), out, "--sandbox", "docker", "--limit", "12")
    wait_for_results(out, 2, p)
    victim = ready_container(out, p)
    subprocess.run(["docker", "kill", victim], check=True, capture_output=True)
    code, log = finish(p)
    assert code == 0, log[-3000:]
    _exactly_once_all_ok(out, ["strong", "atlas"], 12)
    assert "replaced by" in (out / "logs" / "supervisor.log").read_text()
    assert not containers(owner_pid=p.pid)


@pytest.mark.docker
def test_sigint_removes_every_container_and_the_same_command_completes(tmp_path: Path, sandbox_image: str) -> None:
    out = tmp_path / "out"
    cfg = run_config(tmp_path, p50_ms=150)
    p = start_run(cfg, out, "--sandbox", "docker", "--limit", "12", "-w", "2")
    wait_for_results(out, 3, p)
    p.send_signal(signal.SIGINT)
    code, log = finish(p, timeout=120)
    assert code == 130, log[-3000:]
    assert not containers(owner_pid=p.pid)
    first = line_count(out)
    assert 0 < first < 24
    # an interrupted output says so wherever its numbers are read (it said "error": null and nothing else)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] is False and sum(manifest["missing"].values()) == 24 - first
    assert "INCOMPLETE (interrupted)" in log and 'id="incomplete"' in (out / "report.html").read_text()
    before = {(run, r["record_id"]): r["started_at"] for run in ("strong", "atlas") for r in rows_of(out, run)}
    code, log = finish(start_run(cfg, out, "--sandbox", "docker", "--limit", "12", "-w", "2"))
    assert code == 0, log[-3000:]
    _exactly_once_all_ok(out, ["strong", "atlas"], 12)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] is True and manifest["missing"] == {}
    assert 'id="incomplete"' not in (out / "report.html").read_text()
    after = {(run, r["record_id"]): r["started_at"] for run in ("strong", "atlas") for r in rows_of(out, run)}
    assert {k: after[k] for k in before} == before  # the rerun did only what was left


def test_ctrl_c_again_and_again_until_it_ends_exits_130_with_results_and_report_that_agree(
        tmp_path: Path, local_bindir: str) -> None:
    """Ctrl-C as a terminal sends it (to the whole process group), then again every 50 ms until the command
    ends: through the grace period, the workers' shutdown, the results' rewrite, the manifest and the report.
    Before: "Aborted!" and exit 1, a report.html missing, or one drawn from other results than results/ holds."""
    import re
    import time

    from runner.report.build import load_runs, results_digest

    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k != "CI"}
    p = subprocess.Popen([sys.executable, "-m", "runner", "run", str(run_config(tmp_path, p50_ms=150)), "--out",
                          str(out), "--sandbox", "local", "--limit", "12", "-w", "2"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
    wait_for_results(out, 3, p)
    while p.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGINT)
        time.sleep(0.05)
    code, log = finish(p)
    assert code == 130 and "Aborted" not in log and "Traceback" not in log, log[-3000:]
    for run in ("strong", "atlas"):
        index = [r["index"] for r in rows_of(out, run)]
        assert index == sorted(set(index))  # rewritten in dataset order, each record once
    digest = results_digest(load_runs(out))
    assert json.loads((out / "report.json").read_text())["results_digest"] == digest
    page = (out / "report.html").read_text()
    assert re.search(r'<meta name="results-digest" content="(\w+)"', page).group(1) == digest  # type: ignore[union-attr]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["interrupted"] is True and manifest["finished_at"]


def _comparable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def strip(d: dict[str, Any]) -> dict[str, Any]:
        return {k: strip(v) if isinstance(v, dict) else v for k, v in d.items() if k not in VOLATILE}

    return [strip(r) for r in rows]


def test_shards_merged_equal_the_unsharded_run_with_repeated_trials(tmp_path: Path, local_bindir: str) -> None:
    cfg = run_config(tmp_path)
    subset = tmp_path / "subset.jsonl"
    subset.write_text("".join(line + "\n" for line in SAMPLE.read_text().splitlines()[:9]))
    trials = ("--epochs", "2")  # each record twice: every (record, trial) exactly once, however it is split
    code, log = finish(start_run(cfg, tmp_path / "all", "--sandbox", "local", "--dataset", str(subset), "-w", "2",
                                 *trials))
    assert code == 0, log[-3000:]
    shards = [start_run(cfg, tmp_path / f"s{i}", "--sandbox", "local", "--dataset", str(subset), "--shard", f"{i}/3",
                        "-w", "1", *trials) for i in (1, 2, 3)]  # at once, as CI matrix jobs run them
    for p in shards:
        code, log = finish(p)
        assert code == 0, log[-3000:]
    merged = subprocess.run([sys.executable, "-m", "runner", "merge", *(str(tmp_path / f"s{i}") for i in (1, 2, 3)),
                             "--out", str(tmp_path / "merged")], capture_output=True, text=True)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    for run in ("strong", "atlas"):
        assert _comparable(rows_of(tmp_path / "merged", run)) == _comparable(rows_of(tmp_path / "all", run))
        rows = rows_of(tmp_path / "merged", run)
        assert sorted((r["record_id"], r["epoch"]) for r in rows) == sorted(
            {(r["record_id"], e) for r in rows for e in (1, 2)})
        assert len(rows) == 18
    # a third trial on the same output adds only the third: the first two stay as they were
    before = {(run, r["record_id"], r["epoch"]): r["started_at"] for run in ("strong", "atlas")
              for r in rows_of(tmp_path / "all", run)}
    code, log = finish(start_run(cfg, tmp_path / "all", "--sandbox", "local", "--dataset", str(subset), "-w", "2",
                                 "--epochs", "3"))
    assert code == 0, log[-3000:]
    after = {(run, r["record_id"], r["epoch"]): r["started_at"] for run in ("strong", "atlas")
             for r in rows_of(tmp_path / "all", run)}
    assert len(after) == 54 and {k: after[k] for k in before} == before
    report = json.loads((tmp_path / "all" / "report.json").read_text())
    assert report["runs"]["strong"]["trials"]["trials_per_record"] == 3


def test_a_boot_failure_stops_the_run_with_a_clear_message(tmp_path: Path) -> None:
    code, log = finish(start_run(run_config(tmp_path), tmp_path / "out", "--sandbox", "external", "--dsn",
                               "host=127.0.0.1 port=1 user=x password=y dbname=crm"), timeout=120)
    assert code == 2 and "could not boot" in log and "cannot reach the external database" in log
    assert sum("cannot reach the external database" in line for line in log.splitlines()) == 1  # said once
    assert "password=y" not in log


def test_a_fatal_provider_error_stops_the_run_at_the_first_call(tmp_path: Path, local_bindir: str) -> None:
    cfg = run_config(tmp_path, runs="one").read_text().replace("sim_model: sim-strong", "sim_model: no-such-model")
    (tmp_path / "bad.yaml").write_text(cfg)
    code, log = finish(start_run(tmp_path / "bad.yaml", tmp_path / "out", "--sandbox", "local", "-w", "2"),
                        timeout=120)
    assert code == 2 and "404" in log, log[-2000:]
    assert line_count(tmp_path / "out") < 5


def test_a_conversation_over_its_time_limit_is_an_error_result_and_the_worker_goes_on(
        tmp_path: Path, local_bindir: str) -> None:
    cfg = run_config(tmp_path, p50_ms=1500, runs="one")
    code, log = finish(start_run(cfg, tmp_path / "out", "--sandbox", "local", "--limit", "3", "-w", "1",
                               "--timeout", "1"), timeout=120)
    assert code == 1 and "nothing was measured" in log, log[-2000:]  # every result an error: no outcome to read
    rows = rows_of(tmp_path / "out", "strong")
    assert len(rows) == 3 and all(r["status"] == "error" and r["error_kind"] == "timeout" for r in rows)
    # a record cut short keeps its time and the call it was waiting on (before: 0 calls, 0 s)
    assert all(r["usage"]["llm_calls"] >= 1 and r["wall_seconds"] >= 0.9 for r in rows), rows


def test_a_conversation_whose_retries_run_out_still_counts_its_calls(tmp_path: Path, local_bindir: str) -> None:
    cfg = run_config(tmp_path, runs="one", extra="retry: {max_attempts: 3, base_seconds: 0.01}\n")
    cfg.write_text(cfg.read_text().replace("simulator: {", "simulator: {faults: {http_500: 1.0}, "))
    code, log = finish(start_run(cfg, tmp_path / "out", "--sandbox", "local", "--limit", "2", "-w", "1"),
                       timeout=120)
    assert code == 1 and "nothing was measured" in log, log[-2000:]
    rows = rows_of(tmp_path / "out", "strong")
    assert [r["error_kind"] for r in rows] == ["provider_gave_up"] * 2
    assert all(r["usage"]["llm_calls"] == 1 and r["usage"]["retries"] == 2 for r in rows), [r["usage"] for r in rows]


def test_skip_invalid_runs_the_good_lines_and_puts_the_bad_aside(tmp_path: Path, local_bindir: str) -> None:
    data = tmp_path / "d.jsonl"
    lines = SAMPLE.read_text().splitlines()[:3]
    data.write_text("\n".join([lines[0], "{broken", lines[1], lines[2]]) + "\n")
    cfg = run_config(tmp_path, runs="one")
    code, log = finish(start_run(cfg, tmp_path / "out1", "--sandbox", "local", "--dataset", str(data)), timeout=120)
    assert code == 2 and f"{data}:2: not valid JSON" in log
    code, log = finish(start_run(cfg, tmp_path / "out2", "--sandbox", "local", "--dataset", str(data),
                               "--skip-invalid", "-w", "2"), timeout=120)
    assert code == 0, log[-2000:]
    assert len(rows_of(tmp_path / "out2", "strong")) == 3
    assert '"line": 2' in data.with_suffix(".rejects.jsonl").read_text()
    # named, never silent: at start (file:line and why), in the manifest, above the report's numbers
    assert f"skipped (--skip-invalid): {data}:2: not valid JSON" in log and "1 bad line(s)" in log
    manifest = json.loads((tmp_path / "out2" / "manifest.json").read_text())
    assert manifest["rejected"] == {"count": 1, "lines": [2], "file": str(data.with_suffix(".rejects.jsonl"))}
    assert 'id="rejected"' in (tmp_path / "out2" / "report.html").read_text()


def test_atlas_telemetry_also_goes_to_a_long_lived_database(tmp_path: Path, shared_local_sandbox: Any) -> None:
    import psycopg

    dsn = shared_local_sandbox.dsn("atlas")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS atlas_steps, atlas_sessions")
    extra = f"telemetry_dsn: '{dsn}'\n"
    code, log = finish(start_run(run_config(tmp_path, extra=extra), tmp_path / "out", "--sandbox", "local",
                                 "--limit", "3", "-w", "2", "--runs", "atlas"), timeout=120)
    assert code == 0, log[-2000:]
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT conversation_id, reward FROM atlas_sessions ORDER BY conversation_id").fetchall()
    exported = sorted((r["record_id"], r["output"]["atlas"]["reward"]) for r in rows_of(tmp_path / "out", "atlas"))
    assert [tuple(r) for r in rows] == exported and len(rows) == 3
    assert dsn.split("password=")[1].split()[0] not in log  # the password never reaches the console
