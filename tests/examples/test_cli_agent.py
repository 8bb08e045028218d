"""examples/cli-agent as `make run-example` runs it: a CLI agent per record, each in a workspace made and
removed around it, its model calls through the runner's gateway, its CPU and memory measured per record."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runs import rows_of

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cli-agent"
pytestmark = [pytest.mark.slow, pytest.mark.local]


def test_each_record_s_agent_runs_in_its_own_workspace_through_the_gateway(tmp_path: Path, local_bindir: str) -> None:
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k != "CI"}  # the simulator
    p = subprocess.run([sys.executable, "-m", "runner", "run", str(EXAMPLE / "runner.yaml"), "--sandbox", "local",
                        "--out", str(out), "--cache-dir", str(tmp_path / "cache")],
                       capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rows = rows_of(out, "sonnet")
    assert [r["record_id"] for r in rows] == [f"t{i:02d}" for i in range(1, 11)]  # the dataset's order
    by_id = {r["record_id"]: r for r in rows}
    # an agent that stops without an answer is its record's error; the others ran on
    assert by_id["t09"]["error_kind"] == "harness_error" and "error_max_turns" in by_id["t09"]["error"]
    assert by_id["t08"]["success"] is False  # asked which Bluepeak deal instead of moving one: a failure
    assert all(r["success"] for rid, r in by_id.items() if rid not in ("t08", "t09"))
    for r in (r for r in rows if r["status"] == "ok"):
        o = r["output"]
        # its own workspace: the task's files, the agent's session and report, then removed
        assert o["workspace"] == [".opsagent/session.jsonl", "AGENT.md", "report.md"]
        assert o["report"].startswith(f"# {o['transcript'][0]['text']}")
        # every model call went through the gateway, and the record was charged with exactly those
        assert r["usage"]["llm_calls"] == len(o["model_calls"]) == o["turns"] > 0
        assert r["usage"]["cost_usd"] > 0 and o["agent"]["cpu_seconds"] > 0 and o["agent"]["max_rss_mb"] > 10
    scratch = out / "scratch"
    assert not [p for p in scratch.rglob("*") if p.name.startswith("t")], "a workspace was left behind"
    resolved = by_id["t06"]["output"]["tool_calls"]  # a wrong case number, then the lookup and the close
    assert [(c["tool"], c["ok"]) for c in resolved] == [("update_case_status", False), ("search_cases", True),
                                                        ("update_case_status", True)]
