"""compose/ brings a sandbox up for --sandbox external; `runner debug` leaves a database behind."""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "crm-sample.jsonl"
pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}


def _connect_within(dsn: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            psycopg.connect(dsn, connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_compose_sandbox_serves_an_external_run(tmp_path: Path, sandbox_image: str) -> None:
    password, port = secrets.token_hex(12), _free_port()
    env = {**_env(), "SANDBOX_PASSWORD": password, "SANDBOX_PORT": str(port),
           "COMPOSE_PROJECT_NAME": f"pgsr-test-{os.getpid()}"}
    compose = [str(ROOT / "scripts" / "compose.sh")]
    up = subprocess.run([*compose, "up", "-d", "sandbox"], env=env, capture_output=True, text=True,
                        timeout=600)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        dsn = f"host=127.0.0.1 port={port} user=sandbox password={password} dbname=crm"
        _connect_within(dsn, 30)
        cfg = tmp_path / "c.yaml"
        cfg.write_text(f"dataset: {SAMPLE}\nproviders_mode: sim\ncache: false\nruns:\n"
                       "  - {name: strong, provider: anthropic, model: claude-sonnet-5-5, sim_model: sim-strong}\n")
        run = subprocess.run([sys.executable, "-m", "runner", "run", str(cfg), "--sandbox", "external", "--dsn", dsn,
                              "--limit", "1", "--out", str(tmp_path / "out")], env=env, capture_output=True,
                             text=True, timeout=300)
        assert run.returncode == 0, run.stdout + run.stderr
        assert password not in run.stdout + run.stderr
        line = (tmp_path / "out" / "results" / "strong.jsonl").read_text().splitlines()
        assert len(line) == 1 and json.loads(line[0])["status"] == "ok" and password not in line[0]
        project = f"label=com.docker.compose.project={env['COMPOSE_PROJECT_NAME']}"
        ports = subprocess.run(["docker", "ps", "--filter", project, "--format", "{{.Ports}}"],
                               capture_output=True, text=True).stdout
        assert ports.strip().startswith("127.0.0.1:"), ports
        cid = subprocess.run(["docker", "ps", "-q", "--filter", project], capture_output=True, text=True).stdout.strip()
        confined = subprocess.run(["docker", "inspect", "--format",
                                   "{{.HostConfig.ReadonlyRootfs}} {{.HostConfig.CapDrop}} {{.HostConfig.PidsLimit}}",
                                   cid], capture_output=True, text=True).stdout.split()
        assert confined == ["true", "[ALL]", "300"], confined  # as a run's sandboxes (docs/security.md)
    finally:  # from a fresh shell: no SANDBOX_PASSWORD (before, compose refused to interpolate the file)
        fresh = {k: v for k, v in env.items() if k != "SANDBOX_PASSWORD"}
        down = subprocess.run([*compose, "down", "-v"], env=fresh, capture_output=True, text=True, timeout=300)
    assert down.returncode == 0, down.stdout + down.stderr
    left = subprocess.run(["docker", "ps", "-aq", "--filter",
                           f"label=com.docker.compose.project={env['COMPOSE_PROJECT_NAME']}"],
                          capture_output=True, text=True).stdout
    assert not left.strip()


def test_debug_leaves_a_reachable_database_and_its_stop_command_removes_it(sandbox_image: str) -> None:
    out = subprocess.run([sys.executable, "-m", "runner", "debug", "crm-7-00002", "--run", "atlas", "--sandbox",
                          "docker", "--providers", "sim", "--no-cache"], env={**_env(), "COLUMNS": "400"},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "user" in text and "search_accounts" in text
    # it ends as `runner show` does: the outcome in the report's words, its scores, where the calls came from
    assert re.search(r"atlas: (solved|failed)  .*state match \d+\.\d%", text), text[-2000:]
    assert re.search(r"\d+ model call\(s\), each answered by the model", text)  # --no-cache: none replayed
    # every Atlas step: the student's proposal, the teacher's verdict, what ran (before: only revisions)
    steps = text.count("student step")
    assert steps >= 3 and text.count("teacher approves") + text.count("teacher revises") == steps
    assert text.count("runs -> ") == steps and "runs -> says: " in text  # the final reply of a turn
    dsn = shlex.split(re.search(r"connect:\s+psql (.+)", text).group(1))[0]  # type: ignore[union-attr]
    stop = re.search(r"stop:\s+(.+)", text).group(1).strip()  # type: ignore[union-attr]
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        row = conn.execute("SELECT count(*) FROM contacts WHERE id > 1000").fetchone()
        assert row is not None and row[0] >= 1  # the conversation's records are there to inspect
    name = stop.split()[-1]
    assert subprocess.run(shlex.split(stop), capture_output=True).returncode == 0
    assert not subprocess.run(["docker", "ps", "-aq", "--filter", f"name={name}"], capture_output=True,
                              text=True).stdout.strip()
