"""`make bench` / `make bench-quick`: every benchmark, one document.

    python -m bench.all --out docs/benchmarks.md    the full set (about 15 minutes here)
    python -m bench.all --quick                     small sizes, every benchmark, no targets judged
    python -m bench.all --tiny                      the smallest sizes: that the code runs (CI)
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import sys
import time
from pathlib import Path
from typing import Any

from loguru import logger

from bench import (
    batch,
    cached,
    floor,
    gateway,
    harness,
    headline,
    heavy,
    helpdesk,
    inflight,
    memory,
    ratelimit,
    ray_budget,
    report_load,
    scaling,
    soak,
    startup,
    targets,
)
from bench.common import WORK, machine


def _compiled() -> None:
    """Every module of the runner and the examples compiled first, as a user's second run finds them: a
    process started with PYTHONDONTWRITEBYTECODE (set on some machines and CI images), or a fresh checkout,
    compiles each module it imports again, every launch (~0.2-0.5 CPU-s per process of the runner)."""
    import compileall

    root = Path(__file__).resolve().parents[1]
    for d in ("runner", "examples"):
        compileall.compile_dir(root / d, quiet=1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small sizes: every benchmark, minutes, no verdicts")
    ap.add_argument("--tiny", action="store_true", help="the smallest sizes: only that every benchmark's code runs "
                    "(CI)")
    ap.add_argument("--out", type=Path, help="write the markdown document here")
    ap.add_argument("--only", help="comma-separated subset: scaling,slots,startup,memory,inflight,ratelimit,ray,cached,"
                    "harness,helpdesk,heavy,heavy7,gateway,headline,floor,batch,report,soak; with --out naming an "
                    "existing "
                    "document, only those sections of it are replaced")
    ap.add_argument("--floor-n", type=int, default=1200,
                    help="conversations per run in the rate-limit-bound headline (1200 = the seeds' whole job)")
    ap.add_argument("--floor-scale", type=float, default=1 / 2,
                    help="time scale of the rate-limit-bound headline (1/2: ~11 minutes; faster, and 2 cores bind)")
    ap.add_argument("--batch-n", type=int, default=1200,
                    help="conversations per run in the batch-mode benchmark (1200 = the seeds' whole job)")
    ap.add_argument("--headline-n", type=int, default=300,
                    help="conversations per run in the headline (1200 = the seeds' whole job)")
    args = ap.parse_args()
    _compiled()
    logger.remove()
    logger.add(lambda m: print(m, end=""), level="WARNING")
    only = set(args.only.split(",")) if args.only else None
    q = args.quick or args.tiny
    t = args.tiny

    def size(tiny: Any, quick: Any, full: Any) -> Any:
        return tiny if t else quick if q else full
    sections: list[str] = []
    raw: dict[str, object] = {}
    t_all = time.monotonic()

    def step(name: str, fn: object) -> None:
        if only and name not in only:
            return
        t0 = time.monotonic()
        print(f"== {name} ...", flush=True)
        res, text = fn()  # type: ignore[operator]
        raw[name] = res
        sections.append(text)
        print(text, f"({time.monotonic() - t0:.0f} s)\n", flush=True)

    step("scaling", lambda: _pair(scaling.scaling(size([1], [1, 2], [1, 2, 4, 8, 16, 32]), 50 if q else 200,
                                                  size(2, 2, 6), size(2, 4, 10)),
                                  scaling.overhead(size(2, 6, 100)), scaling.render))
    step("slots", lambda: _one(scaling.slots(size([1, 2], [1, 4, 16], [1, 2, 4, 8, 16, 32, 64]), 50 if q else 200,
                                             size(3, 6, 10), size(2, 4, 16), size(1, 1, 3)), scaling.render_slots))
    step("startup", lambda: _one(startup.startup(size([1], [1, 2], [1, 4, 8]), 1 if q else 3), startup.render))
    step("memory", lambda: _one(memory.memory(size(2, 2, 8), size(8, 8, 48)), memory.render))
    # tiny: conversations of ~10 s, so that a loaded CI machine still sees all 4 in flight at a sample
    step("inflight", lambda: _one(inflight.inflight(size(4, 32, 256), size(1500, 2000, 4000)), inflight.render))
    # quick: 4 workers spend a 60-request burst well within the 4 s warm-up, so the window sees the limit
    step("ratelimit", lambda: _one(ratelimit.ratelimit(size(2, 4, 16), size(1, 4, 12), size(2, 8, 30),
                                                       60 if q else ratelimit.RPM),
                                   ratelimit.render))
    step("ray", lambda: _one(ray_budget.ray_budget(size(2, 3, 3), size(2, 2, 4), size(2, 4, 15), size(2, 8, 40),
                                                  60 if q else ray_budget.RPM), ray_budget.render))
    step("cached", lambda: _one(cached.cached(workers=size(2, 4, 4), limit=size(4, 12, None)), cached.render))
    step("harness", lambda: _one(harness.harness(size([1], [1, 2], [1, 2, 4, 8, 16]), size(4, 12, 160),
                                                 20 if q else 100), harness.render))
    step("helpdesk", lambda: _one(helpdesk.helpdesk(size([1], [1, 2], [1, 2, 4, 8]), size(2, 4, 16), size(6, 40, 400),
                                                    20 if q else 100), helpdesk.render))
    step("heavy", lambda: _one(heavy.heavy(size([1], [1, 2], [1, 2, 4, 8]), size(2, 4, 16), size(6, 40, 120),
                                           20 if q else 100), heavy.render))
    # issue 64's row: a ~7 s import (a real team's stack), 400 records, -c 16 against the sharing mode
    step("heavy7", lambda: _one(heavy.heavy([], size(2, 4, 16), size(6, 40, 400), 20 if q else 100,
                                            work=size(1.0, 4.7, 4.7)), heavy.render))
    step("gateway", lambda: _one(gateway.gateway(size("tiny", "quick", "full")), gateway.render))
    step("headline", lambda: _one(headline.headline(size(4, 20, args.headline_n), size(2, 4, 16),
                                                    size(1 / 100, 1 / 20, 1 / 20)),
                                  headline.render))
    # tiny (bench-smoke): a quarter of the job on a quarter of the limits, ~3 minutes, judged (regressions fail)
    step("floor", lambda: _one(floor.headline_auto(size(floor.SMOKE_N, 40, args.floor_n),
                                                   size(floor.SMOKE_SCALE, 1 / 10, args.floor_scale),
                                                   size(floor.SMOKE_TIER, 1.0, 1.0)), floor.render))
    step("batch", lambda: _one(batch.batch(size(2, 32, args.batch_n), size(8, 128, 1024),
                                           median=size(1.0, 2.0, 3.0), p95=size(2.0, 4.0, 6.0)), batch.render))
    step("report", lambda: _one(report_load.report_load(size([400], [2000], [2000, 10_000]), size(1, 2, 3)),
                                report_load.render))
    # the fault campaign at a short setting (`make soak` runs it for as long as it is told)
    step("soak", lambda: _one(soak.soak(size(0, 2, 10), seed=1), soak.render))
    total = time.monotonic() - t_all
    raw = _merge_raw(raw, q, partial=bool(only))
    sections.insert(0, targets.summary(raw))
    if args.out:
        cmd = "make bench" + (" (tiny)" if t else " (quick)" if q else "")
        argv = " ".join(sys.argv[1:])
        if only and args.out.exists():
            _replace_sections(args.out, sections, f"python -m bench.all {argv}", total)
        else:
            head = (f"# Benchmarks\n\nMeasured {dt.date.today().isoformat()} on this machine: {machine()}.\n\n"
                    f"Command: `{cmd}` (= `python -m bench.all {argv}`), {total / 60:.1f} minutes in all. "
                    "Every comparison below ran side by side in the same invocation (each table compares "
                    f"within itself). Raw numbers: `{WORK}/bench.json`.\n\n")
            if q:
                head += ("**Quick run**: sizes chosen to exercise every benchmark, too small to judge; the "
                         "met/missed verdicts below are not results.\n\n")
            args.out.write_text(head + "\n".join(sections))
        print(f"wrote {args.out}")
    print(f"benchmarks done in {total:.0f} s")
    regressed = _regressed(raw, tiny=t)
    if regressed:
        sys.exit(f"regressed: {regressed}")


def _regressed(raw: dict[str, object], *, tiny: bool) -> str:
    """What `make bench-smoke` fails on: the rate-limit floor's ratio past its smoke target."""
    h = raw.get("floor")
    if not tiny or not isinstance(h, dict) or h.get("met", True):
        return ""
    return (f"the rate-limit-bound job took {h['ratio']:.2f} x its floor (target {h['target']:g}), "
            f"{h['share_429']:.2%} of calls 429")


def _replace_sections(doc: Path, sections: list[str], cmd: str, total: float) -> None:
    """Swap in re-measured sections (by their ### heading's first words), saying when and how."""
    text = doc.read_text()
    # a blank line first: a line right under a table would be read as one more row of it (GFM)
    stamp = (f"\n\n_Re-measured {dt.date.today().isoformat()} with `{cmd}` ({total / 60:.1f} minutes) on "
             f"{machine()}._\n")
    for new in sections:
        for part in new.split("### ")[1:]:
            heading = part.split("\n", 1)[0]
            key = heading.split("(")[0].split(":")[0].strip()
            start = text.find("### " + key)
            body = "### " + part.rstrip() + stamp + "\n"
            if key == "Targets at a glance" and start >= 0:  # re-measured rows replace theirs, others stay
                body = _merged_targets(text, start, part) + "\n"
            if start < 0:
                text = text.rstrip() + "\n\n" + body
                continue
            end = text.find("\n### ", start + 4)
            text = text[:start] + body + (text[end + 1:] if end >= 0 else "")
    doc.write_text(text)


def _merged_targets(text: str, start: int, part: str) -> str:
    """The document's targets table with the rows of `part` (re-measured) in place of their old ones.
    Rows go by family (a target's text before " = ", and "same, ..." rows with the row above them):
    which values met changes between runs, and a row that moved from "same, C = 32" to the met row's
    list must not also stay behind as a stale miss."""
    end = text.find("\n### ", start + 4)
    old = [line for line in text[start:end if end >= 0 else len(text)].splitlines()
           if not line.startswith("_Re-measured")]
    new_rows = [line for line in part.splitlines() if _is_row(line)]
    fresh: dict[str, list[str]] = {}
    for fam, row in zip(_families(new_rows), new_rows, strict=True):
        fresh.setdefault(fam, []).append(row)
    old_rows = [line for line in old if _is_row(line)]
    old_fams = iter(_families(old_rows))
    rows: list[str] = []
    replaced: set[str] = set()
    for line in old:
        family = next(old_fams) if _is_row(line) else None
        if family is not None and family in fresh:
            rows += fresh.pop(family)  # the family's new rows where its first old one stood
            replaced.add(family)
        elif family is None or family not in replaced:
            rows.append(line)
    last = max(i for i, line in enumerate(rows) if line.startswith("|"))
    rows[last + 1:last + 1] = [r for rs in fresh.values() for r in rs]
    return "\n".join(rows).rstrip() + "\n"


def _is_row(line: str) -> bool:
    return line.startswith("| ") and not line.startswith("| target")


def _families(rows: list[str]) -> list[str]:
    out: list[str] = []
    for row in rows:
        target = row.split("|")[1].strip()
        out.append(out[-1] if target.startswith("same, ") and out else target.split(" = ")[0])
    return out


def _merge_raw(raw: dict[str, object], quick: bool, *, partial: bool) -> dict[str, object]:
    """bench.json holds the latest result of every benchmark: a partial run updates its sections
    (of a run of the same size), so the summary always covers the whole document."""
    path = WORK / "bench.json"
    previous: dict[str, object] = {}
    if partial and path.exists():
        with contextlib.suppress(ValueError):
            previous = json.loads(path.read_text())
        if previous.get("_quick") != quick:
            previous = {}
    merged = {**previous, **raw, "_quick": quick}
    WORK.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(merged, indent=2, default=str))
    return {k: v for k, v in merged.items() if k != "_quick"}


def _one(res: object, render: object) -> tuple[object, str]:
    return res, render(res)  # type: ignore[operator]


def _pair(a: object, b: object, render: object) -> tuple[object, str]:
    return {"scaling": a, "overhead": b}, render(a, b)  # type: ignore[operator]


if __name__ == "__main__":
    main()
