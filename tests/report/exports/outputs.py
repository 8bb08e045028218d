"""Outputs of `runner run` made by hand, every outcome in them, for the exporters' tests: two runs of six
records (a success, a failure with its anatomy, an error with its traceback, a cut turn, an unscored record),
and a run of three trials per record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runner.results.result import Result, Usage

TRACEBACK = ('harness_error: Traceback (most recent call last):\n  File "harness.py", line 12, in run\n'
             '    raise KeyError("account_id")\nKeyError: \'account_id\'')
ANATOMY = {"turns": [{"turn": 1, "user": "Add Tariq Larsen as Head of IT at Aurora Retail Group.", "right": False,
                      "expected": [{"tool": "create_contact", "args": {"account_id": 3}, "made": True,
                                    "wrong_args": [{"arg": "account_id", "expected": 3, "got": 2}]}],
                      "unexpected": []}],
           "state": {"contacts": {"missing": [], "extra": [],
                                  "changed": [{"id": 1001, "columns": {"account_id": {"expected": 3, "got": 2}}}]}}}


def result(run: str, rid: str, index: int, kind: str, *, epoch: int = 1, second: int = 0) -> Result:
    """One record's result as the runner writes it: `kind` one of success, failure, error, cut, unscored."""
    usage = Usage(llm_calls=3, cache_misses=3, input_tokens=900 + index, output_tokens=40, cost_usd=0.0021,
                  latency_seconds=1.2)
    common: dict[str, Any] = {"run": run, "record_id": rid, "index": index, "epoch": epoch, "worker": 0,
                              "started_at": f"2026-11-20T10:00:{second:02d}.000+00:00",
                              "finished_at": f"2026-11-20T10:00:{second + 1:02d}.500+00:00", "wall_seconds": 1.5}
    if kind in ("error", "cut"):
        error, ek = (TRACEBACK, "harness_error") if kind == "error" else ("max_tokens: the turn hit its output "
                                                                           "limit (800 tokens)", "max_tokens")
        return Result(**common, status="error", success=False, error=error, error_kind=ek, usage=usage)
    success = None if kind == "unscored" else kind == "success"
    output = {"success": success, "model": "claude-sonnet-5-5", "provider": "anthropic",
              "anatomy": ANATOMY if kind == "failure" else None,
              "transcript": [{"role": "user", "text": f"request of {rid}"},
                             {"role": "assistant", "text": "", "tool_calls": [
                                 {"id": f"call_{rid}", "name": "search_accounts", "args": {"query": "Aurora"}}]},
                             {"role": "tool", "results": [{"id": f"call_{rid}", "content": "{\"ok\": true}",
                                                           "is_error": False}]},
                             {"role": "assistant", "text": "Done.", "tool_calls": []}]}
    # two model calls and the tool call between them, when each started (as the built-in CRM writes them)
    at = f"2026-11-20T10:00:{second:02d}"
    output["model_calls"] = [
        {"role": "agent", "turn": 0, "model": "sim-strong", "started_at": f"{at}.100000+00:00", "latency_seconds": 0.4,
         "input_tokens": 300, "output_tokens": 20, "cache_read_tokens": 100, "cache_write_tokens": 0,
         "stop_reason": "tool_use", "request_id": f"req_{rid}_1", "cached": False, "attempts": 1, "cost_usd": 0.001},
        {"role": "agent", "turn": 0, "model": "sim-strong", "started_at": f"{at}.600000+00:00", "latency_seconds": 0.3,
         "input_tokens": 320, "output_tokens": 20, "cache_read_tokens": 0, "cache_write_tokens": 0,
         "stop_reason": "end_turn", "request_id": f"req_{rid}_2", "cached": True, "attempts": 1, "cost_usd": 0.0}]
    output["tool_calls"] = [{"turn": 0, "id": f"call_{rid}", "tool": "search_accounts", "args": {"query": "Aurora"},
                             "ok": kind != "failure", "result": {"count": 1} if kind != "failure" else None,
                             "error": None if kind != "failure" else "no such account"}]
    output["timings"] = {"tool_calls": [{"id": f"call_{rid}", "started_at": f"{at}.510000+00:00", "seconds": 0.002}]}
    metrics = {} if success is None else {"state_match": float(success)}
    return Result(**common, status="ok", success=success, usage=usage, metrics=metrics, output=output,
                  groups={"difficulty": ["easy" if index % 2 else "hard"]})


PLAN = {"strong": ["success", "success", "success", "error", "success", "success"],
        "mini": ["success", "failure", "unscored", "cut", "failure", "success"]}


def write_output(out: Path, plan: dict[str, list[str]] | None = None, *, epochs: int = 1,
                 compare_to: str | None = None, mode: str = "sim", dataset: str = "d1") -> Path:
    """An output directory of `plan` (run -> each record's outcome; with epochs, each trial's in turn)."""
    plan = plan or PLAN
    (out / "results").mkdir(parents=True)
    for run, kinds in plan.items():
        rows = [result(run, f"rec-{i // epochs + 1}", i // epochs, k, epoch=i % epochs + 1, second=i)
                for i, k in enumerate(kinds)]
        (out / "results" / f"{run}.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in rows))
    manifest = {"dataset_sha256": dataset, "mode": mode, "epochs": epochs, "compare_to": compare_to,
                "runs": [{"name": n} for n in plan]}
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out
