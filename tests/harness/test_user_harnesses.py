"""A user's harness through `runner run`: python and command kinds, each failure mode one record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

TOY = Path(__file__).resolve().parent / "toy"
pytestmark = pytest.mark.slow

RECORDS = [{"id": "r1"}, {"id": "r2"}, {"id": "boom", "do": "raise"}, {"id": "die", "do": "exit"},
           {"id": "hang", "do": "hang"}, {"id": "odd", "do": "not-a-dict"}, {"id": "r3"}, {"id": "r4"}]


def _run(tmp_path: Path, harness: str, records: list[dict[str, Any]], *args: str) -> tuple[int, str, Path]:
    data = tmp_path / "records.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / ".env").write_text("TOY_SETTING=from-dotenv\nDB_HOST=not-this-one\n")
    cfg = tmp_path / "runner.yaml"
    cfg.write_text(f"dataset: records.jsonl\nworkers: 2\nmax_attempts: 2\nconversation_timeout_seconds: 4\n"
                   f"success_field: ok\nharness:\n{harness}\n"
                   f"database: {{schema: [{TOY / 'schema'}], name: toy, user: toy}}\n"
                   "runs:\n  - {name: a, params: {greeting: hello}}\n")
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "TOY_SETTING"}
    p = subprocess.run([sys.executable, "-m", "runner", "run", str(cfg), "--out", str(out), "--sandbox", "local",
                        *args], capture_output=True, text=True, timeout=240, env=env)
    return p.returncode, p.stdout + p.stderr, out


def _results(out: Path) -> dict[str, dict[str, Any]]:
    rows = [json.loads(x) for x in (out / "results" / "a.jsonl").read_text().splitlines()]
    ids = [r["record_id"] for r in rows]
    assert len(ids) == len(set(ids)), ids  # exactly once
    return {r["record_id"]: r for r in rows}


def test_python_harness_failures_are_results_and_the_run_goes_on(tmp_path: Path, local_bindir: str) -> None:
    harness = f"  kind: python\n  entrypoint: toy.toyharness:play\n  pythonpath: [{TOY.parent}]\n"
    code, log, out = _run(tmp_path, harness, RECORDS)
    assert code == 0, log[-3000:]
    res = _results(out)
    assert set(res) == {r["id"] for r in RECORDS}
    for rid in ("r1", "r2", "r3", "r4"):
        r = res[rid]
        assert r["status"] == "ok" and r["success"] is True and r["output"]["greeting"] == "hello"
        assert r["output"]["env"] == "from-dotenv"  # .env read; DB_HOST from it lost to the sandbox
        assert Path(r["output"]["scratch"]).is_dir()
    assert res["boom"]["error_kind"] == "harness_error" and "ValueError: bad record boom" in res["boom"]["error"]
    assert "Traceback" in res["boom"]["error"] and "toyharness.py" in res["boom"]["error"]
    assert res["die"]["error_kind"] == "worker_died" and "2 attempts" in res["die"]["error"]
    assert res["hang"]["error_kind"] == "timeout" and "4s" in res["hang"]["error"]
    assert res["odd"]["error_kind"] == "harness_error" and "returned str, not a dict" in res["odd"]["error"]


def test_reset_recreate_gives_every_record_a_fresh_database(tmp_path: Path, local_bindir: str) -> None:
    harness = f"  kind: python\n  entrypoint: toy.toyharness:play\n  pythonpath: [{TOY.parent}]\n"
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
