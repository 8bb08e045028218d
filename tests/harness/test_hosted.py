"""harness.python with slots and `isolation: thread`: one interpreter of the user's per worker hosts all its
slots, each a thread."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.runs import TOY_PYTHON, toy_config

pytestmark = pytest.mark.slow
# the user's own interpreter (here: this one), its slots threads of it
HOSTED = TOY_PYTHON + f"  python: {sys.executable}\n  isolation: thread\n"


def _run(tmp_path: Path, records: list[dict[str, Any]], *args: str, extra: str = "",
         harness: str = "") -> tuple[int, str, Path]:
    cfg = toy_config(tmp_path, HOSTED + harness, records, extra=extra)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "OPENAI_API_KEY")}
    p = subprocess.run([sys.executable, "-m", "runner", "run", str(cfg), "--out", str(out), "--sandbox", "local",
                        "-w", "1", *args], capture_output=True, text=True, timeout=300, env=env)
    return p.returncode, p.stdout + p.stderr, out


def _results(out: Path) -> dict[str, dict[str, Any]]:
    rows = [json.loads(line) for line in (out / "results" / "a.jsonl").read_text().splitlines()]
    ids = [r["record_id"] for r in rows]
    assert len(ids) == len(set(ids)), ids  # exactly once
    return {r["record_id"]: r for r in rows}


def test_slots_share_one_interpreter_each_with_its_own_database_and_environment(tmp_path: Path,
                                                                                local_bindir: str) -> None:
    records = [{"id": f"r{i}", "nap": 0.3} for i in range(12)]
    code, log, out = _run(tmp_path, records, "--slots", "4", harness="  reset: recreate\n")
    assert code == 0, log[-3000:]
    res = _results(out)
    outputs = [r["output"] for r in res.values()]
    assert all(r["status"] == "ok" for r in res.values()), [r.get("error") for r in res.values()][:2]
    assert len({o["pid"] for o in outputs}) == 1  # one interpreter for the worker's four slots
    assert len({o["db"] for o in outputs}) == 4  # each slot its own database, read from its own DB_NAME ...
    assert all(o["db"] == o["ctx_db"] for o in outputs)  # ... which is its ctx.db
    assert all(o["visits"] == 1 for o in outputs)  # and no record saw another's rows (reset between records)
    # no gateway: no API key, though the interpreter was started (ahead of the sandbox) with a marker for one
    assert {o["api_key"] for o in outputs} == {None}


def test_a_slot_past_its_limit_is_cut_and_the_others_go_on_in_the_same_interpreter(tmp_path: Path,
                                                                                   local_bindir: str) -> None:
    records = [{"id": "spin", "do": "spin"}, *({"id": f"r{i}", "nap": 0.5} for i in range(8))]
    _code, log, out = _run(tmp_path, records, "--slots", "3", extra="conversation_timeout_seconds: 3")
    res = _results(out)
    assert res["spin"]["error_kind"] == "timeout", log[-3000:]
    others = [res[f"r{i}"] for i in range(8)]
    assert all(r["status"] == "ok" for r in others), log[-3000:]
    assert len({r["output"]["pid"] for r in others}) == 1  # the interpreter was not restarted for the cut
    assert "retires" not in log


def test_kill_9_of_the_interpreter_ends_each_record_in_it_once_and_the_next_ones_start_another(
        tmp_path: Path, local_bindir: str) -> None:
    """Whatever was in flight in the killed interpreter ends as an error naming it, once; every record started
    after it runs in the next interpreter (one for all three slots)."""
    records = [{"id": "a0", "nap": 1.5}, {"id": "a1", "nap": 1.5}, {"id": "kill", "do": "kill", "nap": 0.5},
               *({"id": f"r{i}", "nap": 0.3} for i in range(6))]
    _code, log, out = _run(tmp_path, records, "--slots", "3")
    res = _results(out)
    assert len(res) == 9
    assert res["kill"]["status"] == "error" and "ended (signal SIGKILL)" in res["kill"]["error"]
    errors = [r for r in res.values() if r["status"] != "ok"]
    assert all("ended (signal SIGKILL)" in r["error"] for r in errors), errors
    after = [r for r in res.values() if r["started_at"] > res["kill"]["finished_at"]]
    assert after and all(r["status"] == "ok" for r in after), log[-3000:]
    assert len({r["output"]["pid"] for r in after}) == 1  # the next interpreter, for every slot


def test_a_slot_that_cannot_be_cut_retires_its_worker_and_every_record_ends_once(tmp_path: Path,
                                                                                 local_bindir: str) -> None:
    """A thread blocked in C (a sleep) takes no exception: the record times out, the worker retires after its
    other slots, and another worker (another interpreter) runs the rest."""
    records = [{"id": "hang", "do": "hang"}, *({"id": f"r{i}", "nap": 0.3} for i in range(8))]
    _code, log, out = _run(tmp_path, records, "--slots", "2", extra="conversation_timeout_seconds: 3")
    res = _results(out)
    assert res["hang"]["error_kind"] == "timeout", log[-3000:]
    assert all(res[f"r{i}"]["status"] == "ok" for i in range(8)), log[-3000:]
    workers = "".join(p.read_text() for p in (out / "logs").glob("worker-*.log"))
    assert "did not let go" in workers and "retires" in workers
