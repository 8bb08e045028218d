"""Sandbox start-up: N sandboxes started in parallel (as workers do) until all accept a login, and
stopped. Docker's as a run makes them: the data directory in memory, a read-only root, and the network
the built-in CRM gets (none) and a user's harness gets (bridge: a port on 127.0.0.1)."""

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


def _all_ready(kind: str, n: int, image: str | None, network: str) -> tuple[float, float]:
    boxes: list[Sandbox] = [make_sandbox(kind, CRM, image=image, run_id="bench-startup", owner_pid=os.getpid(),
                                         name_hint=f"s{i}", tmpfs=True, network=network) for i in range(n)]
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
    t1 = time.monotonic()
    for sb in boxes:
        sb.stop()
    if errors:
        raise errors[0]
    return elapsed, time.monotonic() - t1


def startup(counts: list[int], repeats: int) -> dict[str, Any]:
    image = ensure_image(CRM)
    make_sandbox("local", CRM, image=None, run_id="warm", owner_pid=os.getpid(), name_hint="warm").__enter__().stop()
    rows = []
    for kind, network in (("docker", "none"), ("docker", "bridge"), ("local", "bridge")):
        for n in counts:
            runs = [_all_ready(kind, n, image, network) for _ in range(repeats)]
            times = [r[0] for r in runs]
            rows.append({"kind": kind if kind == "local" else f"docker, network {network}", "n": n,
                         "median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
                         "stop_s": statistics.median(r[1] for r in runs),
                         "met": None if (kind, n) != ("docker", 8) else statistics.median(times) <= 2.5})
    return {"repeats": repeats, "rows": rows}


def render(s: dict[str, Any]) -> str:
    t = table(["backend", "sandboxes", "all ready: median s", "min s", "max s", "all stopped: median s", "target"],
              [[r["kind"], r["n"], r["median_s"], r["min_s"], r["max_s"], r.get("stop_s", "-"),
                "" if r["met"] is None else ("≤ 2.5 s: yes" if r["met"] else "≤ 2.5 s: **no**")] for r in s["rows"]])
    return (f"### Sandbox start-up (parallel start until every sandbox accepts a login; median of {s['repeats']})\n\n"
            "Docker's sandboxes as a run makes them: the data directory in memory, a read-only root, every "
            "capability dropped; with no network (the built-in CRM's, reached through its Unix socket) and on "
            "Docker's bridge with a port on 127.0.0.1 (a user's harness's).\n\n"
            f"{t}\n")
