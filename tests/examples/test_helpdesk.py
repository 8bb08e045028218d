"""examples/helpdesk, unmodified, in its own virtualenv: a harness that swallows every error, so only
the runner's own check of the sandbox keeps a dead, frozen or restarted database from becoming wrong
"failed" results. Every fault below ends with each record once and the same outcomes as a clean run,
and the thrown-away results counted."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runner.sandbox.docker import SOCKET_MOUNT
from tests.runs import finish, line_count, ready_containers, rows_of, start_run

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "helpdesk"
VENV_PYTHON = Path(__file__).resolve().parents[2] / ".venv-helpdesk" / "bin" / "python"
RUNS = ("replay", "careless")
LIMIT = "30"  # records per run: enough for a fault to land mid-run with work on both sides of it
pytestmark = [pytest.mark.slow, pytest.mark.docker]
os.environ.setdefault("HELPDESK_LATENCY_MS", "30")  # its default think time (100 ms) only makes the runs longer


@pytest.fixture(scope="module")
def venv() -> Path:
    if not VENV_PYTHON.exists():
        pytest.fail(f"{VENV_PYTHON} is missing: `make helpdesk-venv` makes it (make test does)")
    return VENV_PYTHON


def _config(tmp_path: Path, config: str, *, slots: int, timeout: float = 30) -> Path:
    """The example's own config, pointed at its files from a temporary directory."""
    text = (EXAMPLE / config).read_text().replace("tickets.jsonl", str(EXAMPLE / "tickets.jsonl"))
    text = text.replace("pythonpath: [.]", f"pythonpath: [{EXAMPLE}]").replace("schema: [schema]",
                                                                               f"schema: [{EXAMPLE / 'schema'}]")
    text = text.replace("${HELPDESK_PYTHON:-../../.venv-helpdesk}", str(VENV_PYTHON))
    text = text.replace("workers: 4", f"workers: 2\nslots: {slots}\nconversation_timeout_seconds: {timeout}")
    if config == "runner-command.yaml":  # its CLI runs from its checkout
        text = text.replace("  chunk_size: 5", f"  chunk_size: 5\n  cwd: {EXAMPLE}")
    p = tmp_path / config
    p.write_text(text)
    return p


def _outcomes(out: Path) -> dict[str, dict[str, Any]]:
    """Per run, per record: the harness's verdict and score, with each record checked to be there once."""
    got = {}
    for run in RUNS:
        rows = rows_of(out, run)
        ids = [r["record_id"] for r in rows]
        assert len(ids) == len(set(ids)) == int(LIMIT), (run, len(ids), len(set(ids)))
        got[run] = {r["record_id"]: (r["status"], r["success"], r["metrics"].get("score")) for r in rows}
    return got


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory, venv: Path, sandbox_image: str) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("clean")
    p = start_run(_config(tmp, "runner.yaml", slots=1), tmp / "out", "--sandbox", "docker", "--limit", LIMIT)
    rc, log = finish(p)
    assert rc == 0, log[-3000:]
    outcomes = _outcomes(tmp / "out")
    assert all(o[0] == "ok" for run in outcomes.values() for o in run.values())
    return outcomes


def _any_discarded(out: Path) -> bool:
    for run in RUNS:
        try:
            lines = (out / "results" / f"{run}.jsonl").read_text().splitlines()
        except OSError:
            continue
        if any(json.loads(line).get("discarded") for line in lines if line.strip().endswith("}")):
            return True
    return False


def _admin(container: str) -> psycopg.Connection[Any]:
    """A session of the runner's own role on a sandbox, through its socket (a docker exec per look is too
    slow to catch a record at work)."""
    info = json.loads(subprocess.run(["docker", "inspect", container], capture_output=True, text=True,
                                     check=True).stdout)[0]
    env = dict(e.split("=", 1) for e in info["Config"]["Env"])
    socket = next(m["Source"] for m in info["Mounts"] if m["Destination"] == SOCKET_MOUNT)
    return psycopg.connect(host=socket, port=5432, user="pgsr_admin", password=env["SANDBOX_ADMIN_PASSWORD"],
                           dbname="postgres", autocommit=True, connect_timeout=10)


def _strike(out: Path, p: subprocess.Popen[str], fault: str, struck: set[str]) -> bool:
    """A fault that lands mid-record: on whichever ready sandbox has a record at work (a harness session in
    its transaction, which lasts the whole conversation), `docker kill` of its container, `docker pause` of
    it (never unpaused: the runner must give up on it and remove it), or one backend killed -9 inside it, so
    that the server resets every session. A strike between records would change nothing, and the test would
    test nothing. A paused container is not looked at again (`struck`: a session on it would wait for good).
    False when the run ended first."""
    busy = ("SELECT pid FROM pg_stat_activity WHERE usename LIKE 'helpdesk%%' "
            "AND state IN ('active', 'idle in transaction') LIMIT 1")
    sessions: dict[str, psycopg.Connection[Any]] = {}
    deadline = time.monotonic() + 60
    try:
        while p.poll() is None:
            assert time.monotonic() < deadline, "no record at work in any sandbox for a minute"
            for container in ready_containers(out, p):
                if container in struck:
                    continue
                try:  # a sandbox replaced meanwhile: the others, then the next look
                    if container not in sessions:
                        sessions[container] = _admin(container)
                    row = sessions[container].execute(busy).fetchone()
                except (psycopg.OperationalError, subprocess.CalledProcessError, StopIteration):
                    sessions.pop(container, None)
                    continue
                if row is None:
                    continue
                # the kill fails when the session ended between the look and it (then look again); when it
                # succeeds, the session, and so its record, was still at work
                strike = {"kill": ["docker", "kill", container], "pause": ["docker", "pause", container]}.get(
                    fault, ["docker", "exec", container, "sh", "-c", f"kill -9 {row[0]}"])
                if subprocess.run(strike, capture_output=True).returncode == 0:
                    if fault == "pause":
                        struck.add(container)
                        sessions.pop(container).close()
                    return True
            time.sleep(0.005)
        return False
    finally:
        for session in sessions.values():
            session.close()


def _logged(out: Path, what: str) -> int:
    return sum(f.read_text(errors="replace").count(what) for f in (out / "logs").glob("worker-*.log"))


def _discard_seen(out: Path) -> bool:
    """Whether a worker has thrown a result away (its log says so as it does, before the record's rerun)."""
    return _logged(out, "result discarded") > 0


def _await_discard(out: Path, p: subprocess.Popen[str], replaced: int) -> None:
    """After a strike: until a result is thrown away, the run ends, or the worker has replaced its sandbox
    (past the `replaced` it had before) and had a moment more to throw a result away. A strike can land as a
    record ends, on its session still open: the worker then replaces the sandbox and has nothing to throw
    away, and the caller strikes again."""
    deadline, noticed = time.monotonic() + 60, None
    while not _discard_seen(out) and p.poll() is None and time.monotonic() < deadline:
        if noticed is None and _logged(out, "is gone") > replaced:
            noticed = time.monotonic()
        if noticed is not None and time.monotonic() > noticed + 2:
            return
        time.sleep(0.1)


@pytest.mark.parametrize(("config", "slots", "fault"), [
    ("runner.yaml", 1, "kill"),
    ("runner.yaml", 3, "postgres"),
    ("runner.yaml", 1, "pause"),
    ("runner-command.yaml", 1, "pause"),
    ("runner-command.yaml", 2, "kill"),
    ("runner-command.yaml", 2, "postgres"),
])
def test_a_fault_mid_run_changes_no_outcome(tmp_path: Path, clean: dict[str, dict[str, Any]], config: str,
                                            slots: int, fault: str, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    # a slower agent than the clean run's (outcomes do not depend on it): the run lasts long enough after
    # its first results for the fault to land on records at work however fast the slots are
    monkeypatch.setenv("HELPDESK_LATENCY_MS", "100")
    # a short time limit: a frozen sandbox is given up on soon (the witness's own wait follows it)
    p = start_run(_config(tmp_path, config, slots=slots, timeout=4), out, "--sandbox", "docker", "--limit", LIMIT)
    deadline = time.monotonic() + 120
    while line_count(out) < 3:
        assert p.poll() is None and time.monotonic() < deadline, "no results in time"
        time.sleep(0.05)
    # strike again (up to 5 times) until a worker is seen throwing a result away, or the run ends: a strike
    # can land as a record ends, and then there is nothing to throw away
    struck: set[str] = set()
    for _ in range(5):
        replaced = _logged(out, "is gone")
        if not _strike(out, p, fault, struck):
            break
        _await_discard(out, p, replaced)
        if _discard_seen(out) or p.poll() is not None:
            break
    rc, log = finish(p, timeout=400)
    assert rc == 0, log[-3000:]
    assert _outcomes(out) == clean
    manifest = json.loads((out / "manifest.json").read_text())
    discarded = sum(len(r["discarded"]) for run in RUNS for r in rows_of(out, run))
    assert manifest["discarded"].get("sandbox_lost", 0) == discarded >= 1, (manifest["discarded"], discarded)
    assert "discarded" in log
    assert not subprocess.run(["docker", "ps", "-aq", f"--filter=label=pgsandbox-runner.owner-pid={p.pid}"],
                              capture_output=True, text=True).stdout.split(), "containers left behind"


def test_the_harness_runs_in_its_own_interpreter(tmp_path: Path, venv: Path, sandbox_image: str) -> None:
    """Its openai is the venv's (1.x), not the runner's; its logging lands in the worker's log, marked."""
    import openai

    there = subprocess.run([str(venv), "-c", "import openai; print(openai.__version__)"], capture_output=True,
                           text=True, check=True).stdout.strip()
    assert there.split(".")[0] != openai.__version__.split(".")[0]
    out = tmp_path / "out"
    cfg = _config(tmp_path, "runner.yaml", slots=2)
    p = start_run(cfg, out, "--sandbox", "docker", "--limit", "6")
    rc, log = finish(p)
    assert rc == 0, log[-3000:]
    rows = rows_of(out, "replay")
    assert {r["output"]["openai_version"] for r in rows} == {there}
    worker_logs = "".join(f.read_text() for f in (out / "logs").glob("worker-*.log"))
    assert "| harness replay:hd-0000 |" not in log and "ticket hd-0000" not in log  # not on the console
    assert "harness replay:hd-0000 | " in worker_logs and "ticket hd-0000: " in worker_logs
    assert "| harness - |" not in worker_logs  # every line under its record's mark, its last ones included
    # scores written as strings are read as numbers, with one warning per field, not per record
    assert rows[0]["metrics"]["score"] == 1.0 and rows[0]["success"] is True
    assert log.count("metrics.score (score): read from a string") == 1
    # no model variable reached it: its judge (on whenever OPENAI_API_KEY is set) stayed off
    assert all("judge" not in r["output"] for r in rows)
    assert "simulated" not in log
