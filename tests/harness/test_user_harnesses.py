"""A user's harness through `runner run`: python and command kinds, each failure mode one record."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.runs import TOY, TOY_PYTHON, results_by_id, toy_config

pytestmark = pytest.mark.slow

RECORDS = [{"id": "r1"}, {"id": "r2"}, {"id": "boom", "do": "raise"}, {"id": "die", "do": "exit"},
           {"id": "hang", "do": "hang"}, {"id": "odd", "do": "not-a-dict"}, {"id": "r3"}, {"id": "r4"}]


def _run(tmp_path: Path, harness: str, records: list[dict[str, Any]], *args: str) -> tuple[int, str, Path]:
    cfg = toy_config(tmp_path, harness, records)
    (tmp_path / ".env").write_text("TOY_SETTING=from-dotenv\nDB_HOST=not-this-one\n")
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("TOY_SETTING", "CI")}
    p = subprocess.run([sys.executable, "-m", "runner", "run", str(cfg), "--out", str(out), "--sandbox", "local",
                        *args], capture_output=True, text=True, timeout=240, env=env)
    return p.returncode, p.stdout + p.stderr, out


_results = results_by_id


def test_python_harness_failures_are_results_and_the_run_goes_on(tmp_path: Path, local_bindir: str) -> None:
    harness = TOY_PYTHON
    code, log, out = _run(tmp_path, harness, RECORDS, "--fail-on-error")
    # done, every record recorded, but the harness failed some: exit 1 (as in CI), saying why
    assert code == 1 and "ended in an error, not an outcome of the agent (harness_error: 2" in log, log[-3000:]
    res = _results(out)
    assert set(res) == {r["id"] for r in RECORDS}
    for rid in ("r1", "r2", "r3", "r4"):
        r = res[rid]
        assert r["status"] == "ok" and r["success"] is True and r["output"]["greeting"] == "hello"
        assert r["output"]["env"] == "from-dotenv"  # .env read; DB_HOST from it lost to the sandbox
        assert Path(r["output"]["scratch"]).is_dir()
    assert res["boom"]["error_kind"] == "harness_error" and "ValueError: bad record boom" in res["boom"]["error"]
    assert "Traceback" in res["boom"]["error"] and "toyharness.py" in res["boom"]["error"]
    # its slot's own process died (isolation: process): that record alone, run again, then slot_died
    assert res["die"]["error_kind"] == "slot_died" and "2 attempts" in res["die"]["error"]
    assert res["die"]["discarded"] == ["slot_died: attempt 1", "slot_died: attempt 2"]
    assert res["hang"]["error_kind"] == "timeout" and "4s" in res["hang"]["error"]
    assert res["odd"]["error_kind"] == "harness_error" and "returned str, not a dict" in res["odd"]["error"]


def test_reset_recreate_gives_every_record_a_fresh_database(tmp_path: Path, local_bindir: str) -> None:
    harness = TOY_PYTHON
    records = [{"id": f"r{i}"} for i in range(6)]
    code, log, out = _run(tmp_path, harness + "  reset: recreate\n", records)
    assert code == 0, log[-3000:]
    assert [r["output"]["visits"] for r in _results(out).values()] == [1] * 6  # nothing left by the one before
    (tmp_path / "none").mkdir()
    code, log, out = _run(tmp_path / "none", harness, records)
    assert code == 0, log[-3000:]
    assert max(r["output"]["visits"] for r in _results(out).values()) > 1  # reset: none keeps what records leave


def test_command_harness_crash_and_garbage_fail_only_their_records(tmp_path: Path, local_bindir: str) -> None:
    harness = ("  kind: command\n  chunk_size: 3\n"
               f"  command: ['{{python}}', '{TOY / 'toycli.py'}', '{{input}}', '{{output}}']\n")
    records = [{"id": f"ok{i}"} for i in range(5)] + [{"id": "junk", "do": "garbage"}, {"id": "late"},
                                                      {"id": "crash", "do": "crash"}, {"id": "after"}]
    code, log, out = _run(tmp_path, harness, records)
    assert code == 0, log[-3000:]
    res = _results(out)
    assert set(res) == {r["id"] for r in records}
    assert res["junk"]["error_kind"] == "harness_error" and "wrote no result" in res["junk"]["error"]
    assert res["crash"]["error_kind"] == "harness_error" and "exit code 3" in res["crash"]["error"]
    assert "crashing on crash" in res["crash"]["error"]  # the command's own last words
    failed_with_crash = {k for k, r in res.items() if r["status"] == "error"}
    assert len(failed_with_crash) <= 4  # junk + what shared the crashed chunk
    assert sum(r["status"] == "ok" for r in res.values()) >= 5
    assert "crashing on crash" in "".join(p.read_text() for p in (out / "logs").glob("worker-*.log"))


def test_a_missing_id_and_an_unknown_placeholder_stop_before_any_worker(tmp_path: Path) -> None:
    harness = "  kind: command\n  command: [echo, '{input}', '{output}', '{nope}']\n"
    code, log, _ = _run(tmp_path, harness, [{"id": "a"}])
    assert code == 2 and "harness.command[3]" in log and "unknown placeholder {nope}" in log
    code, log, _ = _run(tmp_path, harness.replace(", '{nope}'", ""), [{"id": "a"}, {"name": "no id"}])
    assert code == 2 and "records.jsonl:2" in log and "no id" in log


def test_debug_runs_one_record_of_a_users_harness_and_leaves_its_database(tmp_path: Path, local_bindir: str) -> None:
    """Before, `runner debug` refused any harness but the built-in CRM."""
    import re
    import shlex

    import psycopg

    cfg = toy_config(tmp_path, TOY_PYTHON, [{"id": "r1"}, {"id": "r2"}])
    done = subprocess.run([sys.executable, "-m", "runner", "debug", "r2", "--config", str(cfg), "--sandbox", "local"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "300"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"greeting": "hello"' in done.stdout and '"id": "r2"' in done.stdout
    dsn = re.search(r"connect:\s+psql '(.+)'", done.stdout).group(1)  # type: ignore[union-attr]
    stop = re.search(r"stop:\s+(.+)", done.stdout).group(1).strip()  # type: ignore[union-attr]
    with psycopg.connect(dsn, connect_timeout=5) as conn:  # what the record left is there to inspect
        assert conn.execute("SELECT record_id FROM visits").fetchall() == [("r2",)]
    assert subprocess.run(["/bin/sh", "-c", stop], capture_output=True).returncode == 0
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(dsn, connect_timeout=3).close()
    assert shlex.split(stop)[0] == "kill"


def test_slots_run_records_at_once_each_on_its_own_database(tmp_path: Path, local_bindir: str) -> None:
    """One worker, four slots (threads): each record sees only its slot's database through the same DB_*
    variables, a hung record is cut at its limit without stopping the others, a crash requeues."""
    records = [{"id": f"r{i}", "nap": 0.4} for i in range(12)] + [{"id": "hang", "do": "hang"},
                                                                  {"id": "boom", "do": "raise"}]
    code, log, out = _run(tmp_path, TOY_PYTHON + "  reset: recreate\n", records, "-w", "1", "--slots", "4")
    assert code == 0, log[-3000:]
    res = _results(out)
    assert set(res) == {r["id"] for r in records}
    ok = [r for r in res.values() if r["status"] == "ok"]
    assert len(ok) == 12 and {r["worker"] for r in ok} == {0}
    # the env a thread reads is its slot's: the same database ctx names, and more than one of them in use
    assert all(r["output"]["db"] == r["output"]["ctx_db"] for r in ok)
    assert {r["output"]["db"] for r in ok} <= {"toy", "toy__s1", "toy__s2", "toy__s3"}
    assert len({r["output"]["db"] for r in ok}) >= 3
    # records ran side by side (each naps 0.4 s after its write), yet none saw another's row
    assert [r["output"]["visits"] for r in ok] == [1] * 12
    assert res["hang"]["error_kind"] == "timeout" and res["boom"]["error_kind"] == "harness_error"


def test_a_shared_database_is_one_for_all_slots(tmp_path: Path, local_bindir: str) -> None:
    """`shared_databases`: every slot of a worker reaches the same journal (not a copy of its own), while
    each keeps its own copy of the main database."""
    records = [{"id": f"r{i}", "nap": 0.2} for i in range(8)]
    cfg = toy_config(tmp_path, TOY_PYTHON, records)
    cfg.write_text(cfg.read_text().replace("name: toy, user: toy}",
                                           "name: toy, user: toy, extra_databases: {journal: null},"
                                           " shared_databases: [journal]}"))
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "runner", "run", str(cfg), "--out", str(out), "--sandbox", "local",
                        "-w", "1", "--slots", "4"], capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    res = [r["output"] for r in _results(out).values()]
    assert len(res) == 8 and len({r["db"] for r in res}) >= 3  # several slots, each on its own toy copy
    assert {r["journal"][0] for r in res} == {"journal"}
    # the last to count saw every slot's row (copies per slot would hold at most 6 of the 8)
    assert max(r["journal"][1] for r in res) == 8


@pytest.mark.docker
def test_slots_of_a_large_database_in_memory_get_the_room_for_their_copies(tmp_path: Path, sandbox_image: str) -> None:
    """Four slots' copies of ~75 MiB in memory are more than the default limit allows for: the worker
    raises it before copying, and every record runs (the server is not killed for memory)."""
    big = tmp_path / "big.sql"
    big.write_text("CREATE TABLE big AS SELECT g, repeat('x', 200) AS pad FROM generate_series(1, 300000) AS g;\n")
    records = [{"id": f"r{i}"} for i in range(8)]
    cfg = toy_config(tmp_path, TOY_PYTHON, records)
    cfg.write_text(cfg.read_text().replace(f"schema: [{TOY / 'schema'}]", f"schema: [{TOY / 'schema'}, {big}]"))
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "runner", "run", str(cfg), "--out", str(out), "--sandbox", "docker",
                        "-w", "1", "--slots", "4"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert all(r["status"] == "ok" for r in _results(out).values()) and len(_results(out)) == 8
    log = (out / "logs" / "worker-0.log").read_text()
    assert re.search(r"sandbox memory limit raised by \d+ MiB: 4 slots' copies of [78]\d MiB", log), log[-2000:]


def test_command_harness_slots_run_chunks_side_by_side(tmp_path: Path, local_bindir: str) -> None:
    harness = ("  kind: command\n  chunk_size: 2\n"
               f"  command: ['{{python}}', '{TOY / 'toycli.py'}', '{{input}}', '{{output}}']\n")
    records = [{"id": f"ok{i}", "nap": 0.3} for i in range(12)]
    code, log, out = _run(tmp_path, harness, records, "-w", "1", "--slots", "3")
    assert code == 0, log[-3000:]
    res = _results(out)
    assert set(res) == {r["id"] for r in records} and all(r["status"] == "ok" for r in res.values())
    # each chunk's process got its slot's database in its environment
    assert len({r["output"]["db"] for r in res.values()}) >= 2
    assert {r["output"]["db"] for r in res.values()} <= {"toy", "toy__s1", "toy__s2"}


@pytest.mark.docker
def test_a_harness_reaches_a_sandbox_without_network_through_db_host_as_given(tmp_path: Path,
                                                                               sandbox_image: str) -> None:
    """container_network: none for a user's harness: its own psycopg.connect(host=DB_HOST, port=DB_PORT)
    gets the socket's directory and works, in two slots; the container has no network."""
    import docker

    # each naps: alone, slot 0 would take 3.2 s, time enough for slot 1's copy of the database on a busy machine
    records = [{"id": f"r{i}", "nap": 0.4} for i in range(8)]
    cfg = toy_config(tmp_path, TOY_PYTHON, records, extra="container_network: none")
    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, "-m", "runner", "run", str(cfg), "--out", str(out), "--sandbox", "docker",
                          "-w", "1", "--slots", "2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    modes: set[str] = set()
    while p.poll() is None:  # this run's containers, while they are up
        manifest = out / "manifest.json"
        run_id = json.loads(manifest.read_text()).get("run_id") if manifest.exists() else None
        if run_id:
            for c in docker.from_env().containers.list(filters={"label": f"pgsandbox-runner.run={run_id}"}):
                modes.add(c.attrs["HostConfig"]["NetworkMode"])
        time.sleep(0.1)
    log = p.communicate()[0]
    assert p.returncode == 0, log[-3000:]
    res = _results(out)
    assert len(res) == 8 and all(r["status"] == "ok" and r["output"]["visits"] for r in res.values()), res
    assert {r["output"]["db"] for r in res.values()} == {"toy", "toy__s1"} and modes == {"none"}, modes
