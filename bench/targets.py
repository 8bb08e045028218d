"""The targets at a glance, built from the raw results so a re-run never leaves it stale."""

from __future__ import annotations

from typing import Any

from bench.common import table

HEADING = "### Targets at a glance"


def _verdict(met: bool | None) -> str:
    return "" if met is None else ("met" if met else "**missed** (see its section)")


def _scaling(section: dict[str, Any]) -> list[list[str]]:
    rows = section["scaling"]["rows"]
    met, missed = [r for r in rows if r["met"]], [r for r in rows if not r["met"]]
    out = []
    if met:
        ws = ", ".join(str(r["W"]) for r in met)
        out.append([f"throughput ≥ 0.9·W x the seeds' design, W = {ws}",
                    ", ".join(f"{r['speedup']:.2f}x" for r in met), _verdict(True)])
    for r in missed:
        out.append([f"same, W = {r['W']}", f"{r['speedup']:.1f}x (target {r['target']:.1f}x)", _verdict(False)])
    return out


def _slots(section: dict[str, Any]) -> list[list[str]]:
    rows = section["rows"]
    met, missed = [r for r in rows if r["met"]], [r for r in rows if not r["met"]]
    out = []
    if met:
        out.append([f"with slots: throughput ≥ 0.9·C x the seeds' design, C = {', '.join(str(r['C']) for r in met)}",
                    ", ".join(f"{r['speedup']:.2f}x" for r in met), _verdict(True)])
    for r in missed:
        out.append([f"same, C = {r['C']}", f"{r['speedup']:.1f}x (target {r['target']:.1f}x)", _verdict(False)])
    top = rows[-1]  # the most in flight: where the machine is busiest (fewer in flight cost more each)
    out.append(["CPU per conversation ≤ 15 ms, all processes (with slots, 200 ms per call)",
                f"{top['cpu_ms']:.1f} ms at C={top['C']} (runner's own {top['cpu_parts_ms']['runner']:.1f} ms)",
                _verdict(top["cpu_ms"] <= 15)])
    return out


def _gateway(g: dict[str, Any]) -> list[list[str]]:
    b, f, fb, tp = g["budget"], g["faults"], g["first_byte"], g["throughput"]
    return [
        [f"gateway: {b['procs']} SDK processes, ≥ 95 % of {b['rpm']:.0f} RPM, ≤ 1 % 429s seen",
         f"{b['share_of_limit']:.1%}, {b['client_429s']} of {b['client_calls']} calls 429", _verdict(b["met"])],
        ["gateway: 30 % upstream 500/529 unseen by clients; identical rerun makes no upstream call",
         f"{f['first_errors']} errors seen; {f['second_upstream']} upstream calls", _verdict(f["met"])],
        ["gateway: streamed first byte ≤ 5 ms after the upstream's", f"+{fb['added_ms']:.2f} ms", _verdict(fb["met"])],
        ["gateway: ≥ 1,000 requests/s, ≤ 2 ms p50 added",
         f"{tp['rps']:.0f}/s, {tp['added_p50_ms']:.2f} ms", _verdict(tp["met"])]]


def summary(raw: dict[str, Any]) -> str:
    rows: list[list[str]] = []
    if "scaling" in raw:
        rows += _scaling(raw["scaling"])
        o = raw["scaling"]["overhead"]
        rows.append(["harness overhead ≤ 15 ms p50 (W=1)",
                     f"{o['harness_p50_ms']:.1f} ms ({o['overhead_p50_ms']:.1f} ms with the once-per-conversation "
                     "gold replay)", _verdict(o["met"])])
    if "slots" in raw:
        rows += _slots(raw["slots"])
    if "startup" in raw:
        for r in raw["startup"]["rows"]:
            if r["met"] is not None:
                rows.append([f"{r['n']} {r['kind']} sandboxes all ready ≤ 2.5 s", f"{r['median_s']:.2f} s",
                             _verdict(r["met"])])
    if "memory" in raw:
        m = raw["memory"]
        rows.append(["≤ 150 MiB per worker incl. its PostgreSQL", f"{m['per_worker_total_max']:.0f} MiB",
                     _verdict(m["met"])])
    if "inflight" in raw:
        m = raw["inflight"]
        rows.append([f"≤ 25 MiB per conversation in flight ({m['in_flight']} at once, all processes incl. "
                     "PostgreSQL)", f"{m['per_conversation']:.1f} MiB", _verdict(m["met"])])
    if "ratelimit" in raw:
        r = raw["ratelimit"]
        s = r["rows"][0]
        rows.append([f"shared limiter: 95-105 % of {r['rpm']:.0f} RPM, ≤ 1 % 429s ({r['workers']} workers)",
                     f"{s['share_of_limit']:.1%}, {s['share_429']:.2%} 429s", _verdict(r["met"])])
    if "ray" in raw:
        r = raw["ray"]
        rows.append([f"one budget across {r['nodes']} Ray nodes x {r['per_node']} actors: ≥ 95 % of {r['rpm']:.0f} "
                     "RPM, ≤ 1 % 429s", f"{r['share_of_limit']:.1%}, {r['share_429']:.2%} 429s", _verdict(r["met"])])
    if "floor" in raw:
        f = raw["floor"]
        rows.append([f"the seeds' job at real latency, `--concurrency auto`: wall ≤ {f.get('target', 1.15):g} x the "
                     "rate-limit floor, ≤ 1 % 429s", f"{f['ratio']:.2f} x, {f['share_429']:.2%} 429s",
                     _verdict(f["met"])])
        if "plan" in f:
            m = f["plan"]["measured"]
            rows.append(["`runner plan`'s floor from a pilot within ±10 % of the measured wall",
                         f"{m['floor_s'] / f['wall_s']:.2f} x", _verdict(abs(m["floor_s"] / f["wall_s"] - 1) <= 0.1)])
    if "heavy" in raw:
        h = raw["heavy"]
        rows.append(["a harness with heavy, thread-starting imports in its own venv, -c 16: ≥ 0.8 x in-process, "
                     "first result ≤ 1.5 s behind", f"{h.get('vs_inprocess', '-')} x, {h.get('first_behind_s', '-')} s",
                     _verdict(bool(h.get("met")))])
    if "cached" in raw:
        w = raw["cached"]["warm"]
        rows.append(["fully cached rerun: no API call, ≥ 100 conversations/s",
                     f"{w['cache_misses']} calls, {w['conv_per_s']:.0f} conv/s", _verdict(raw["cached"]["met"])])
    if "harness" in raw:
        for r in raw["harness"]["rows"]:
            if r["met"] is not None:
                rows.append([f"a user's harness (legacy example), W = {r['W']}: ≥ 0.9·W x its sequential CLI",
                             f"{r['runner_x']:.2f}x (shared database: {r['shared_db_x']:.2f}x)", _verdict(r["met"])])
    if "helpdesk" in raw:
        h = raw["helpdesk"]
        for r in h["rows"]:
            if r["met"] is not None:
                rows.append([f"a harness with real habits (helpdesk), {r['label']}: ≥ 0.9·W x its CLI, launch to exit",
                             f"{r['x']:.2f}x (target {r['target'] / h['cli']['rate']:.2f}x)", _verdict(r["met"])])
        f = h["fixed"]
        record = f.get("user_record_s", 0.3)
        rows += [["a user harness's 1-worker job: first result ≤ 1.0 s after launch, besides the record's own time",
                  f"{f['user_first_s']:.2f} s (the record {record:.2f} s)",
                  _verdict(f["user_first_s"] <= 1.0 + record)],
                 ["exit ≤ 0.5 s after the last result", f"{f['user_exit_after_last_s']:.2f} s",
                  _verdict(f["user_exit_after_last_s"] <= 0.5)],
                 ["resume of a finished job ≤ 1.0 s", f"{f['resume_s']:.2f} s", _verdict(f["resume_s"] <= 1.0)],
                 ["a 1-record built-in job ≤ 3 s", f"{f['builtin_wall_s']:.2f} s",
                  _verdict(f["builtin_wall_s"] <= 3.0)]]
    if "gateway" in raw:
        rows += _gateway(raw["gateway"])
    if "batch" in raw:
        rows += _batch(raw["batch"])
    if "report" in raw:
        for r in raw["report"]["rows"]:
            if r["met"] is not None:
                rows.append([f"report.html of {r['results']:,} results: opens, and a deep link opens its record, "
                             "in < 2 s", f"{r['load_s']:.2f} s, {r['deep_link_s']:.2f} s ({r['mb']:.1f} MB)",
                             _verdict(r["met"])])
    if "headline" in raw:
        h = raw["headline"]
        rows.append([f"the seeds' whole job ({h['conversations']} conversations): wall vs one at a time",
                     f"{h['wall_s']:.0f} s vs {h['ideal_sequential_s']:.0f} s contention-free "
                     f"({h['ideal_speedup']:.1f}x), {h['errors']} errors", ""])
    return f"{HEADING}\n\n" + table(["target", "measured", ""], rows) + "\n"


def _batch(b: dict[str, Any]) -> list[list[str]]:
    from bench.batch import TARGET_COST_SHARE, TARGET_MIB

    rows = []
    n = b["batch"]["conversations"]
    if b.get("cost_share") is not None:
        rows.append([f"batch mode, {n} conversations: model cost ≤ {TARGET_COST_SHARE:g} x interactive",
                     f"{b['cost_share']:.3f} x ({b['batch']['wall_s']:.0f} s vs {b['interactive']['wall_s']:.0f} s)",
                     _verdict(b["cost_share"] <= TARGET_COST_SHARE + 0.01)])
    m = b.get("memory") or {}
    if b.get("mib_per_waiting") is not None:
        waiting = m.get("in_flight", 0)
        rows.append([f"batch mode: ≤ {TARGET_MIB:g} MiB per conversation waiting, 1,024 waiting (all processes "
                     "but the providers' stand-in)", f"{b['mib_per_waiting']:.1f} MiB at {waiting:.0f} waiting",
                     _verdict(b["mib_per_waiting"] <= TARGET_MIB) if waiting >= 1024 else "not judged"])
    return rows
