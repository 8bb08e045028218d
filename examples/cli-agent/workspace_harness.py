"""A team's per-sample evaluation of a CLI agent (seeds/001: one workspace per sample, the agent run as a
subprocess in it), as a python harness: the runner calls `run_task` once per record, in as many workers and
slots as asked (`--concurrency N`), keeps results in the dataset's order, turns an exception into that
record's error and shows progress. Nothing here knows the runner beyond `ctx`.

Per record: a workspace of its own (the task's files in it), made and removed around the agent; the agent
(`python -m opsagent`, a stand-in for `claude -p`, `gemini -p` or `codex exec`) run there with this slot's
environment, so its SDK calls go through the runner's gateway (ANTHROPIC_BASE_URL) and its SQL to the slot's
database (DATABASE_URL); its CPU time and peak memory measured by the kernel (wait4); then the task's checks
against the database and the agent's answer."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import psycopg

HERE = Path(__file__).resolve().parent
AGENT_SECONDS = 120.0


def run_agent(argv: list[str], workspace: Path) -> tuple[int, str, str, dict[str, float]]:
    """The agent's exit code, stdout and stderr, and what it used (CPU seconds, peak memory). A process group of
    its own: past AGENT_SECONDS, or if this record is cut short, it goes with everything it started."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, cwd=workspace, stdout=out, stderr=err, start_new_session=True,
                                env={**os.environ, "PYTHONPATH": str(HERE)})  # a slot's own variables
        timer = threading.Timer(AGENT_SECONDS, os.killpg, (proc.pid, signal.SIGKILL))
        timer.start()
        try:
            _, status, used = os.wait4(proc.pid, 0)  # the child's own rusage, not the whole worker's
        finally:
            timer.cancel()
            if proc.returncode is None:  # not reaped above: the record was cut short
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        usage = {"cpu_seconds": round(used.ru_utime + used.ru_stime, 3), "max_rss_mb": round(used.ru_maxrss / 1024, 1)}
        return proc.returncode, out.read(), err.read(), usage


def read_session(workspace: Path) -> list[dict[str, Any]]:
    path = workspace / ".opsagent" / "session.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line] if path.is_file() else []


def as_output(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The session in the runner's shapes (docs/harness.md): `transcript`, `model_calls`, `tool_calls` and when
    each tool call ran, so `runner show`, report.html and the Inspect and OpenTelemetry exports show the steps."""
    transcript: list[dict[str, Any]] = []
    model_calls, tool_calls, timings = [], [], []
    for e in events:
        if e["type"] == "user":
            transcript.append({"role": "user", "text": e["text"]})
        elif e["type"] == "assistant":
            transcript.append({"role": "assistant", "text": e["text"], "tool_calls": e["tool_calls"]})
            model_calls.append({"role": "agent", "turn": 0, "model": e["model"], "started_at": e["started_at"],
                                "latency_seconds": e["seconds"], "stop_reason": e["stop_reason"],
                                "request_id": e["id"], "cached": False, "attempts": 1, **e["usage"]})
        else:
            content = json.dumps({"ok": e["ok"], "result": e["result"]} if e["ok"] else
                                 {"ok": False, "error": e["error"]}, sort_keys=True)
            if not transcript or transcript[-1]["role"] != "tool":
                transcript.append({"role": "tool", "results": []})
            transcript[-1]["results"].append({"id": e["id"], "content": content, "is_error": not e["ok"]})
            tool_calls.append({"turn": 0, "id": e["id"], "tool": e["name"], "args": e["args"], "ok": e["ok"],
                               "result": e["result"], "error": e["error"]})
            timings.append({"id": e["id"], "started_at": e["started_at"], "seconds": e["seconds"]})
    return {"transcript": transcript, "model_calls": model_calls, "tool_calls": tool_calls,
            "timings": {"tool_calls": timings}}


def check(task: dict[str, Any], answer: str) -> dict[str, bool]:
    """The task's checks: SQL on the slot's database that must return true, words the answer must hold."""
    results = {}
    with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
        for name, sql in task.get("expect_sql", {}).items():
            row = conn.execute(sql).fetchone()
            results[name] = bool(row and row[0])
    for word in task.get("answer_has", []):
        results[f"answer has {word!r}"] = word.casefold() in answer.casefold()
    return results


def run_task(task: dict[str, Any], ctx: Any) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"{task['id']}-", dir=ctx.scratch) as name:
        workspace = Path(name)
        for path, text in task.get("files", {}).items():  # the sample's setup
            (workspace / path).parent.mkdir(parents=True, exist_ok=True)
            (workspace / path).write_text(text)
        argv = [sys.executable, "-m", "opsagent", "-p", task["prompt"], "--output-format", "json",
                "--model", ctx.params["model"], "--max-turns", str(task.get("max_turns", 8))]
        code, stdout, stderr, used = run_agent(argv, workspace)
        events = read_session(workspace)
        report = (workspace / "report.md").read_text() if (workspace / "report.md").is_file() else None
        files = sorted(str(p.relative_to(workspace)) for p in workspace.rglob("*") if p.is_file())
    try:
        result = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise RuntimeError(f"the agent exited {code} without a result; its stderr: {stderr[-2000:]}") from None
    if result.get("is_error"):  # it could not finish: an error of this record, not a wrong answer
        raise RuntimeError(f"the agent stopped: {result.get('subtype')} after {result.get('num_turns')} turn(s)")
    checks = check(task, result["result"])
    return {"success": all(checks.values()), "checks": checks, "answer": result["result"],
            "turns": result["num_turns"], "exit_code": code, "agent": used, "workspace": files, "report": report,
            **as_output(events)}
