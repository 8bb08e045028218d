"""report.html in a browser: how long a large job's report takes to open, and to open a record a link names.

The results are made up, shaped as the built-in CRM's (its generator's conversations, a transcript of every
gold call with its result, an anatomy for each failure, Atlas's steps and telemetry, the model calls), four
runs over records, a quarter of them failed somewhere; the report is written as `runner run` writes it. Then
headless Chromium (Debian's, driven by playwright) opens it twice, each time in a fresh page:

- load: navigation to the `load` event (the page parsed, the record list and the summary laid out);
- deep link: report.html#ID of a record near the end, to that record open, its body drawn and in view.

Target (issue 48): a 10,000-result report opens, and a deep link into it opens its record, in under 2 s.

    python -m bench.report_load --results 10000      one size, printed
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import table
from runner.harness.crm.generate import generate_one
from runner.report.build import write_reports
from runner.results.result import Result, Usage

RUNS = ("claude-sonnet", "gpt-large", "gpt-mini", "atlas")
TARGET_S = 2.0


def _transcript(conv: Any, rng: random.Random) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for t, turn in enumerate(conv.turns):
        out.append({"role": "user", "text": turn.user})
        for c, call in enumerate(turn.gold_calls):
            cid = f"call_{rng.getrandbits(64):016x}"
            out.append({"role": "assistant", "text": "", "tool_calls": [{"id": cid, "name": call.tool,
                                                                          "args": call.args}]})
            result = {"ok": True, "result": {"id": 1001 + t * 10 + c, **call.args, "stage": "prospecting"}}
            out.append({"role": "tool", "results": [{"id": cid, "content": json.dumps(result), "is_error": False}]})
        out.append({"role": "assistant", "text": f"Done: {turn.user[:60].lower()}", "tool_calls": []})
    return out


def _anatomy(conv: Any) -> dict[str, Any]:
    turn = conv.turns[0]
    call = turn.gold_calls[0] if turn.gold_calls else None
    expected = [] if call is None else [{"tool": call.tool, "args": call.args, "made": True, "ok": True,
                                         "wrong_args": [{"arg": k, "expected": v, "got": 1}
                                                        for k, v in list(call.args.items())[:1]]}]
    return {"turns": [{"turn": 1, "user": turn.user, "right": False, "expected": expected, "unexpected": []}],
            "state": {"opportunities": {"missing": [], "extra": [], "changed": [
                {"id": 1001, "columns": {"account_id": {"expected": 2, "got": 1}}}]}}}


def _steps(conv: Any) -> list[dict[str, Any]]:
    return [{"turn": t, "step": 0, "verdict": "approve", "guidance": None,
             "proposed": {"calls": [{"name": c.tool, "args": c.args} for c in turn.gold_calls]},
             "executed": {"calls": [{"name": c.tool, "args": c.args} for c in turn.gold_calls]}}
            for t, turn in enumerate(conv.turns)]


def results(n: int, seed: int = 7) -> dict[str, list[Result]]:
    """`n` results (n / 4 records x 4 runs), the last run Atlas, about one record in four failed somewhere."""
    rng = random.Random(seed)
    out: dict[str, list[Result]] = {run: [] for run in RUNS}
    for i in range(n // len(RUNS)):
        conv = generate_one(seed, i)
        for run in RUNS:
            ok = rng.random() > (0.3 if run == "gpt-mini" else 0.08)
            calls = [{"role": "agent", "model": run, "input_tokens": 3000 + 120 * k, "output_tokens": 20,
                      "cached": False, "latency_seconds": 0.05, "request_id": f"req_{rng.getrandbits(64):016x}"}
                     for k in range(2 * len(conv.turns) + 1)]
            output: dict[str, Any] = {
                "agent": "atlas" if run == "atlas" else "baseline", "model": run, "difficulty": conv.difficulty,
                "transcript": _transcript(conv, rng), "model_calls": calls, "success": ok,
                "anatomy": None if ok else _anatomy(conv), "tags": conv.tags,
                "scores": {"state_match": ok, "args_exact": 1.0 if ok else 0.75, "tool_selection": 1.0},
                **({"steps": _steps(conv), "atlas": {"session": f"s-{i}", "reviews": len(conv.turns)}}
                   if run == "atlas" else {})}
            out[run].append(Result(
                run=run, record_id=conv.id, index=i, status="ok", success=ok, started_at="t", finished_at="t",
                wall_seconds=1.0 + rng.random() * 3, output=output,
                metrics={"state_match": float(ok), "args_exact": 1.0 if ok else 0.75, "tool_selection": 1.0},
                groups={"difficulty": [conv.difficulty], "tag": list(conv.tags)},
                usage=Usage(llm_calls=len(calls), input_tokens=sum(c["input_tokens"] for c in calls),
                            output_tokens=20 * len(calls), cost_usd=0.002 * len(calls))))
    return out


def write(out: Path, n: int) -> tuple[Path, str, float]:
    """A report of `n` results in `out`, written as a run writes it: the report, the id of a record near its end
    (the one a deep link opens), and the seconds report.json and report.html took (the results read, the
    numbers, the charts, the page)."""
    rows = results(n)
    (out / "results").mkdir(parents=True, exist_ok=True)
    for run, rs in rows.items():
        (out / "results" / f"{run}.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in rs))
    (out / "manifest.json").write_text(json.dumps({"runs": [{"name": r} for r in RUNS], "compare_to": "atlas"}))
    t0 = time.monotonic()
    _, page = write_reports(out)
    return page, rows[RUNS[0]][-3].record_id, time.monotonic() - t0


def measure(browser: Any, page_path: Path, record_id: str, width: int = 1280) -> dict[str, float]:
    """Seconds to the page's load event, and from navigating to report.html#RECORD to that record open with its
    body drawn, each in a fresh page (nothing cached in the page between the two)."""
    page = browser.new_page(viewport={"width": width, "height": 900})
    t0 = time.monotonic()
    page.goto(page_path.as_uri(), wait_until="load")
    load = time.monotonic() - t0
    page.close()
    page = browser.new_page(viewport={"width": width, "height": 900})
    t0 = time.monotonic()
    page.goto(f"{page_path.as_uri()}#{record_id}", wait_until="commit")
    shown = ("id => { const d = document.getElementById(id); return !!(d && d.open && d.querySelector('.side .col') "
             "&& d.getBoundingClientRect().top < innerHeight); }")
    page.wait_for_function(shown, arg=record_id, timeout=60_000, polling="raf")
    deep = time.monotonic() - t0
    page.close()
    return {"load_s": load, "deep_link_s": deep}


def report_load(sizes: list[int], repeats: int) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise RuntimeError("no chromium: `make browser` installs Debian's")
    rows = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            for n in sizes:
                with tempfile.TemporaryDirectory(prefix="pgsr-report-") as tmp:
                    page, rid, written = write(Path(tmp), n)
                    runs = [measure(browser, page, rid) for _ in range(repeats)]
                    load = statistics.median(r["load_s"] for r in runs)
                    deep = statistics.median(r["deep_link_s"] for r in runs)
                    rows.append({"results": n, "mb": page.stat().st_size / 1e6, "write_s": written, "load_s": load,
                                 "deep_link_s": deep,
                                 "met": max(load, deep) < TARGET_S if n >= 10_000 else None})
        finally:
            browser.close()
    return {"repeats": repeats, "rows": rows}


def render(res: dict[str, Any]) -> str:
    head = ["results", "report.html", "written in (results read)", "opens in (load event)",
            "deep link to a record open", "target"]
    body = [[f"{r['results']:,}", f"{r['mb']:.1f} MB", f"{r['write_s']:.1f} s", f"{r['load_s']:.2f} s",
             f"{r['deep_link_s']:.2f} s", "" if r["met"] is None else ("met" if r["met"] else "**missed**")]
            for r in res["rows"]]
    return ("### The report in a browser: load time and a deep link\n\n"
            f"Made-up CRM results in four runs, written as a run writes them; headless Chromium opens report.html "
            f"(median of {res['repeats']}, a fresh page each time) and report.html#ID of a record near the end, "
            "until that record is open, drawn and in view. Target: a 10,000-result report in under "
            f"{TARGET_S:g} s, both ways.\n\n" + table(head, body) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", type=int, action="append", help="results in the report (repeatable; default "
                    "10000)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(render(report_load(args.results or [10_000], args.repeats)))


if __name__ == "__main__":
    main()
