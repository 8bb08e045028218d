"""Sandbox start-up: N sandboxes started in parallel (as workers do) until all accept a login."""

from __future__ import annotations

import os
import statistics
import threading
import time
from typing import Any

from bench.common import table
from runner.harness.crm.harness import DATABASE as CRM
from runner.sandbox import make_sandbox
from runner.sandbox.base import Sandbox
from runner.sandbox.image import ensure_image


def _all_ready(kind: str, n: int, image: str | None) -> float:
    boxes: list[Sandbox] = [make_sandbox(kind, CRM, image=image, run_id="bench-startup", owner_pid=os.getpid(),
                                         name_hint=f"s{i}") for i in range(n)]
    errors: list[BaseException] = []

    def start(sb: Sandbox) -> None:
        try:
            sb.start()
        except BaseException as e:
            errors.append(e)

    t0 = time.monotonic()
    threads = [threading.Thread(target=start, args=(sb,)) for sb in boxes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    for sb in boxes:
        sb.stop()
    if errors:
        raise errors[0]
    return elapsed


def startup(counts: list[int], repeats: int) -> dict[str, Any]:
    image = ensure_image(CRM)
    make_sandbox("local", CRM, image=None, run_id="warm", owner_pid=os.getpid(), name_hint="warm").__enter__().stop()
    rows = []
    for kind in ("docker", "local"):
        for n in counts:
            times = [_all_ready(kind, n, image) for _ in range(repeats)]
            rows.append({"kind": kind, "n": n, "median_s": statistics.median(times), "min_s": min(times),
                         "max_s": max(times), "met": None if (kind, n) != ("docker", 8)
                         else statistics.median(times) <= 2.5})
    return {"repeats": repeats, "rows": rows}


def render(s: dict[str, Any]) -> str:
    t = table(["backend", "sandboxes", "all ready: median s", "min s", "max s", "target"],
              [[r["kind"], r["n"], r["median_s"], r["min_s"], r["max_s"],
                "" if r["met"] is None else ("≤ 2.5 s: yes" if r["met"] else "≤ 2.5 s: **no**")] for r in s["rows"]])
    return (f"### Sandbox start-up (parallel start until every sandbox accepts a login; median of {s['repeats']})\n\n"
            f"{t}\n")
