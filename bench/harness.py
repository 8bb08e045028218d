"""A team's own harness (examples/legacy-harness), three ways, at W = 1, 2, 4, 8, 16:

- its own sequential CLI on one database (what the team runs today: the baseline rate);
- W copies of that CLI on the same one database (the obvious fix: TRUNCATE's lock serialises them);
- the runner with W workers, each with a private database built from the harness's schema/.

The stand-in model thinks STANDIN_LATENCY_MS per turn (100 ms, as in the issue's measurement).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, WORK, CpuMeter, repeated, result_timing, table
from runner.config import load_config
from runner.harness import database_spec
from runner.run.job import run_job

EXAMPLE = ROOT / "examples" / "legacy-harness"
TARGET_SHARE = 0.9  # the runner at >= 0.9 * W x the sequential rate ...
TARGET_UP_TO = 8  # ... up to W = 8


def records(n: int) -> Path:
    """n conversations: the example's 40, repeated under new ids."""
    return repeated(EXAMPLE / "conversations.jsonl", "conversation_id", "legacy", n)


def shared_database_rate(data: Path, w: int, dsn_env: dict[str, str]) -> float:
    """W copies of the team's CLI, each over its share of the records, all on one database."""
    lines = data.read_text().splitlines()
    parts = []
    for i in range(w):
        part = WORK / f"legacy-part-{i}.jsonl"
        part.write_text("".join(x + "\n" for x in lines[i::w]))
        parts.append(part)
    env = {**os.environ, **dsn_env}
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-m", "crmbench.run_baseline", "--conversations", str(p), "--output",
                               str(p.with_suffix(".out")), "--backend", "postgres", "--provider", "standin",
                               "--model", "oracle"], cwd=EXAMPLE, env=env, stderr=subprocess.DEVNULL)
             for p in parts]
    for p in procs:
        if p.wait(timeout=3600) != 0:
            raise RuntimeError(f"crmbench CLI exited with {p.returncode}")
    return len(lines) / (time.monotonic() - t0)


def runner_rate(data: Path, w: int) -> tuple[float, float, dict[str, float]]:
    """(steady rate, end-to-end rate, CPU in the steady window) of `runner run runner.yaml --workers W`."""
    out = WORK / f"legacy-runner-w{w}"
    shutil.rmtree(out, ignore_errors=True)
    cfg = load_config(EXAMPLE / "runner.yaml", {"workers": w, "output_dir": str(out), "dataset": str(data)})
    cfg = cfg.model_copy(update={"runs": cfg.runs[:1]})
    t0 = time.monotonic()
    with CpuMeter() as cpu:
        run_job(cfg)
    wall = time.monotonic() - t0
    t = result_timing(out)
    a, b = t.window
    busy = cpu.busy_between(a, b) if b > a else 0.0
    use = {"cpu_ms_per_conv": round(busy / max(t.inside, 1) * 1000, 1),
           "cpu_utilisation": round(busy / ((b - a) * (os.cpu_count() or 1)), 3) if b > a else 0.0}
    return t.steady, len(data.read_text().splitlines()) / wall, use


def harness(ws: list[int], n: int, latency_ms: int) -> dict[str, Any]:
    from runner.sandbox.docker import DockerSandbox
    from runner.sandbox.image import ensure_image

    os.environ["STANDIN_LATENCY_MS"] = str(latency_ms)  # the process environment wins over the example's .env
    data = records(n)
    image = ensure_image(database_spec(load_config(EXAMPLE / "runner.yaml")))
    rows = []
    # The shared database gets the same in-memory data directory as the runner's: like for like.
    with DockerSandbox(image, "crmbench", run_id="bench-legacy", owner_pid=os.getpid(), name_hint="shared",
                       tmpfs=True) as db:
        assert db.endpoint is not None
        env = {"DB_HOST": db.endpoint.host, "DB_PORT": str(db.endpoint.port), "DB_USER": "crmbench",
               "DB_PASSWORD": db.endpoint.password, "DB_NAME": "crmbench"}
        sequential = shared_database_rate(data, 1, env)
        for w in ws:
            shared = sequential if w == 1 else shared_database_rate(data, w, env)
            steady, end_to_end, use = runner_rate(data, w)
            target = TARGET_SHARE * w * sequential if w <= TARGET_UP_TO else None
            rows.append({"W": w, "shared_db_conv_s": round(shared, 2), "shared_db_x": round(shared / sequential, 2),
                         "runner_conv_s": round(steady, 2), "runner_x": round(steady / sequential, 2),
                         "runner_end_to_end_conv_s": round(end_to_end, 2),
                         "target_conv_s": round(target, 2) if target else None,
                         "met": None if target is None else steady >= target, **use})
    return {"n": n, "latency_ms": latency_ms, "sequential_conv_s": round(sequential, 2), "rows": rows,
            "met": all(r["met"] for r in rows if r["met"] is not None)}


def render(h: dict[str, Any]) -> str:
    t = table(["W", "shared DB: conv/s", "x sequential", "runner: conv/s (steady)", "x sequential",
               "runner end to end (with boot)", "CPUs busy (steady)", "CPU ms/conv", "target (0.9·W x)", "met"],
              [[r["W"], r["shared_db_conv_s"], r["shared_db_x"], r["runner_conv_s"], r["runner_x"],
                r["runner_end_to_end_conv_s"], f"{r['cpu_utilisation']:.0%}", r["cpu_ms_per_conv"],
                r["target_conv_s"] or "-", "-" if r["met"] is None else ("yes" if r["met"] else "**no**")]
               for r in h["rows"]])
    missed = [r for r in h["rows"] if r["met"] is False]
    why = "".join(f" At W = {r['W']} the {os.cpu_count()} CPUs were {r['cpu_utilisation']:.0%} busy "
                  f"({r['cpu_ms_per_conv']} ms of CPU per conversation, machine-wide: the harness's own "
                  "connect, TRUNCATE and queries, its PostgreSQL, and the runner)." for r in missed)
    return (f"### A user's harness: examples/legacy-harness, unmodified ({h['n']} conversations, "
            f"{h['latency_ms']} ms stand-in latency per turn)\n\n"
            f"Its own sequential CLI on one database: {h['sequential_conv_s']} conversations/s. The same CLI in W "
            "processes on that one database stays near 1x: each conversation holds TRUNCATE's ACCESS EXCLUSIVE "
            "lock from its BEGIN to its ROLLBACK, so the others wait. The runner gives each of W workers its own "
            "database, built from the harness's schema/ (python kind: `crmbench.harness:run_conversation`, "
            "called as written). Steady = the window in which every worker is busy; end to end includes "
            f"sandbox boot and start-up.\n\n{t}\n\nVerdict (>= 0.9·W x up to W = 8): "
            f"{'met' if h['met'] else '**missed**'}.{why}\n")
