"""`runner export --format inspect`, checked with Inspect AI itself: `read_eval_log` loads each log and its
samples, scores and usage equal the output's; `inspect view` serves them. Inspect lives in a virtualenv of
its own with the runner (`make test` builds .venv-inspect: ~60 packages the runner's own tests do not need);
in CI (REQUIRED) a missing one fails instead of skipping."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from runner.results.result import Result, outcome
from runner.results.sink import read_results
from tests.conftest import REQUIRED
from tests.report.exports.outputs import write_output

VENV = Path(__file__).resolve().parents[3] / ".venv-inspect" / "bin"
needs_inspect = pytest.mark.skipif(not (VENV / "inspect").exists() and not REQUIRED,
                                   reason="no .venv-inspect (make test builds it)")

READ = r"""
import json, sys
from inspect_ai.log import list_eval_logs, read_eval_log
out = []
for info in list_eval_logs(sys.argv[1]):
    log = read_eval_log(info)
    out.append({
        "task": log.eval.task, "model": log.eval.model, "status": log.status, "epochs": log.eval.config.epochs,
        "roles": sorted((log.eval.model_roles or {})),
        "results": {s.name: {k: m.value for k, m in s.metrics.items()} for s in log.results.scores},
        "samples": [{
            "id": s.id, "epoch": s.epoch, "input": s.input,
            "scores": {k: v.value for k, v in (s.scores or {}).items()},
            "explanation": (s.scores or {}).get("success") and s.scores["success"].explanation,
            "usage": {m: u.model_dump() for m, u in s.model_usage.items()},
            "error": s.error.message if s.error else None,
            "messages": [{"role": m.role, "text": m.text, "calls": [[c.function, c.arguments] for c in
                         (getattr(m, "tool_calls", None) or [])], "call_id": getattr(m, "tool_call_id", None),
                          "function": getattr(m, "function", None)} for m in s.messages],
        } for s in log.samples],
    })
print(json.dumps(out))
"""


def _export(out: Path, dest: Path) -> list[dict[str, Any]]:
    p = subprocess.run([str(VENV / "runner"), "export", str(out), "--format", "inspect", "--out", str(dest)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    r = subprocess.run([str(VENV / "python"), "-c", READ, str(dest)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return list(json.loads(r.stdout))


def _expected_scores(r: Result) -> dict[str, Any]:
    if outcome(r) in ("error", "cut"):
        return {}
    scores: dict[str, Any] = {k: v for k, v in r.metrics.items() if v is not None}
    if outcome(r) in ("success", "failure"):
        scores["success"] = "C" if r.success else "I"
    return scores


@needs_inspect
def test_read_eval_log_loads_each_run_with_the_output_s_samples_scores_and_usage(tmp_path: Path) -> None:
    out = write_output(tmp_path / "out")
    logs = {log["task"]: log for log in _export(out, tmp_path / "logs")}
    assert set(logs) == {"strong", "mini"}
    for run, log in logs.items():
        rows = read_results(out / "results" / f"{run}.jsonl")
        samples = {(s["id"], s["epoch"]): s for s in log["samples"]}
        assert log["status"] == "success" and set(samples) == {r.trial for r in rows}
        for r in rows:
            s = samples[r.trial]
            assert s["scores"] == _expected_scores(r)
            [(model, usage)] = s["usage"].items()
            assert model == log["model"]
            u = r.usage
            assert (usage["input_tokens"], usage["output_tokens"], usage["input_tokens_cache_read"],
                    usage["input_tokens_cache_write"], usage["total_cost"]) == \
                   (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens, u.cost_usd)
            assert (s["error"] is not None) == (outcome(r) in ("error", "cut"))
    mini = logs["mini"]
    # the run's success rate as Inspect's accuracy: successes among finished records (2 of 4)
    assert mini["results"]["success"]["accuracy"] == 0.5 and mini["results"]["state_match"]["mean"] == 0.5
    failed = next(s for s in mini["samples"] if s["id"] == "rec-2")
    assert "wrong arguments to create_contact: account_id expected 3, got 2" in failed["explanation"]
    # the conversation: the user's request, the model's tool call, the tool's answer (named), the last word
    assert failed["input"] == "request of rec-2"
    assert [m["role"] for m in failed["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert failed["messages"][1]["calls"] == [["search_accounts", {"query": "Aurora"}]]
    assert failed["messages"][2]["call_id"] == "call_rec-2" and failed["messages"][2]["function"] == "search_accounts"
    error = next(s for s in logs["strong"]["samples"] if s["id"] == "rec-4")
    assert error["error"] == "harness_error: KeyError: 'account_id'"


@needs_inspect
def test_trials_are_epochs_and_an_atlas_teacher_a_model_role(tmp_path: Path) -> None:
    out = write_output(tmp_path / "out", {"atlas": ["success", "failure", "success", "success"]}, epochs=2)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["runs"] = [{"name": "atlas", "agent": "atlas", "provider": "openai", "model": "gpt-5.4-mini",
                         "teacher": {"provider": "anthropic", "model": "claude-sonnet-5-5"}}]
    (out / "manifest.json").write_text(json.dumps(manifest))
    [log] = _export(out, tmp_path / "logs")
    assert log["model"] == "openai/gpt-5.4-mini" and log["roles"] == ["teacher"] and log["epochs"] == 2
    # Inspect keeps a log's samples epoch by epoch
    assert [(s["id"], s["epoch"]) for s in log["samples"]] == [("rec-1", 1), ("rec-2", 1), ("rec-1", 2), ("rec-2", 2)]
    assert log["results"]["success"]["accuracy"] == 0.75


DATAFRAMES = r"""
import json, sys
import pandas as pd
from inspect_ai.analysis import evals_df, samples_df
evals, samples = evals_df(sys.argv[1]), samples_df(sys.argv[1])
task = dict(zip(evals["eval_id"], evals["task_name"]))
print(json.dumps({"headline": dict(zip(evals["task_name"], evals["score_headline_value"])),
                  "success": {f"{task[e]}/{i}": None if pd.isna(v) else v  # NA: no score
                              for e, i, v in zip(samples["eval_id"], samples["id"], samples["score_success"])}}))
"""


@needs_inspect
def test_inspect_s_dataframes_read_each_run_s_rate_and_each_record_s_score(tmp_path: Path) -> None:
    out = write_output(tmp_path / "out")
    _export(out, tmp_path / "logs")
    r = subprocess.run([str(VENV / "python"), "-c", DATAFRAMES, str(tmp_path / "logs")], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    frames = json.loads(r.stdout)
    # a dashboard's headline: the run's success rate (successes among finished records), as the report's
    assert frames["headline"] == {"strong": 1.0, "mini": 0.5}
    rows = {f"{run}/{x.record_id}": x for run in ("strong", "mini") for x in read_results(out / "results" /
                                                                                           f"{run}.jsonl")}
    assert frames["success"] == {k: ("C" if r.success else "I") if outcome(r) in ("success", "failure") else None
                                 for k, r in rows.items()}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


@needs_inspect
def test_inspect_view_lists_and_serves_the_logs(tmp_path: Path) -> None:
    out = write_output(tmp_path / "out")
    dest = tmp_path / "logs"
    _export(out, dest)
    port = _free_port()
    view = subprocess.Popen([str(VENV / "inspect"), "view", "start", "--log-dir", str(dest), "--host", "127.0.0.1",
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "INSPECT_DISPLAY": "none"})
    try:
        base, listing = f"http://127.0.0.1:{port}/api", None
        deadline = time.monotonic() + 120
        while listing is None:
            try:
                listing = _get(f"{base}/logs")
            except OSError:
                assert view.poll() is None and time.monotonic() < deadline, "inspect view did not start"
                time.sleep(0.5)
        # the viewer's own requests: the listing (task and id from each file's name), then a log
        assert sorted(f["task"] for f in listing["files"]) == ["mini", "strong"]
        mini = next(f["name"] for f in listing["files"] if f["task"] == "mini")
        log = _get(f"{base}/logs/{urllib.parse.quote(mini, safe=':/')}")
        assert log["eval"]["task"] == "mini" and len(log["samples"]) == 6
    finally:
        view.terminate()
        view.wait(30)


def test_without_inspect_installed_the_export_says_which_extra_in_one_line(tmp_path: Path) -> None:
    out = write_output(tmp_path / "out")
    probe = subprocess.run([sys.executable, "-c", "import inspect_ai"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip("inspect_ai is installed here")
    p = subprocess.run([sys.executable, "-m", "runner", "export", str(out), "--format", "inspect"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert "pip install 'pgsandbox-runner[inspect]'" in p.stderr and p.stderr.count("\n") == 1
