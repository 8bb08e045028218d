"""The hostile-SQL suite's machinery: running the hostile harness over a dataset and judging its results
against a clean run's (tests/sandbox/test_hostile_python.py and test_hostile_command.py; one file per kind, so
the two run side by side under xdist). What the suite checks:

The harness in tests/sandbox/hostile/ runs each record's SQL as a model with a raw SQL tool would
(kind python: its function in the worker; kind command: its CLI, one record per process), with
`reset: recreate`, a time limit of 3 s (python) or 5 s (command), one worker, and 1 or 3 slots.
Every benign record passes on a fresh sandbox. For each kind and slot count:

  (a) the benign records alone                        -> their outcomes: the reference (each passes;
      the clean run that shows it is made only when a record ends otherwise, to tell the two apart);
  (b) the same benign records, each attack between them (records.jsonl: the records after an attack
      run in the same sandbox and, with 3 slots, in the neighbour slots while it runs and after);
  (c) every benign record must end exactly as in (a) (status, success, error kind), and no attack
      may have read another record's query text (each benign statement carries SECRET-<its id>).

The attacks' own outcomes (refused, accepted, timed out...) are printed, not asserted: an attack
may fail; its neighbours and the records after it must not notice.

    .venv/bin/pytest tests/sandbox/test_hostile_python.py tests/sandbox/test_hostile_command.py -q -s
    HOSTILE_EACH=1 .venv/bin/pytest tests/sandbox/test_hostile_python.py -q -s -k alone   # each attack alone
    HOSTILE_EACH=1 ... test_hostile_python.py -k "alone and 3slot and role-read-only"  # one of them
    HOSTILE_SUMMARY=/tmp/hostile.jsonl ...     # also one JSON line per run: attacks, changed records, secrets

The per-attack runs (opt-in, ~10 s each, 58 attacks x 4) say which attack changed which record when
the interleaved run cannot (a role-wide setting changes every record after it, hiding the rest).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_records import ATTACKS, benign, hostile, records  # noqa: E402

sys.path.remove(str(HERE))

CONFIGS = {"python": HERE / "runner.yaml", "command": HERE / "runner-command.yaml",
           "command-chunked": HERE / "runner-command-chunked.yaml"}
KINDS = ("python", "command")
SLOTS = (1, 3)
EACH_FOLLOWERS = 8  # benign records after an attack when it runs alone
REQUIRED = bool(os.environ.get("RUNNER_REQUIRE_DOCKER") or os.environ.get("CI"))

Outcome = tuple[Any, Any, Any]
PASSED: Outcome = ("ok", True, None)  # every benign record's outcome on a fresh sandbox


# ------------------------------------------------------------------------------------------- helpers

def runner_command() -> list[str]:
    exe = Path(sys.executable).parent / "runner"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "runner"]


@pytest.fixture(scope="module")
def engine() -> None:
    docker = shutil.which("docker")
    ok = docker is not None and subprocess.run([docker, "info"], capture_output=True, timeout=60).returncode == 0
    if not ok:
        if REQUIRED:
            pytest.fail("no Docker engine answers; docker tests are required here", pytrace=False)
        pytest.skip("no Docker engine answers (run `make engine`)")


def write(path: Path, recs: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def run(kind: str, slots: int, dataset: Path, out: Path, *extra: str) -> str:
    """`runner run CONFIG --out DIR --workers 1 --slots K` over the dataset; the console log."""
    cmd = [*runner_command(), "run", str(CONFIGS[kind]), "--dataset", str(dataset), "--out", str(out), "--workers", "1",
           "--slots", str(slots), "--sandbox", "docker", "--no-fail-on-error", *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=out.parent)
    log = p.stdout + p.stderr
    # 0: done. Anything else (2: the run stopped) still leaves what finished; missing records count as changed.
    if p.returncode != 0:
        print(f"!! runner exited {p.returncode}:\n{log[-3000:]}")
    return log


def rows(out: Path) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for f in sorted((out / "results").glob("*.jsonl")) if (out / "results").exists() else []:
        for line in f.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                rows[r["record_id"]] = r
    return rows


def _outcome(row: dict[str, Any] | None) -> Outcome:
    if row is None:
        return ("missing", None, None)
    return (row["status"], row["success"], row["error_kind"])


def _why(row: dict[str, Any] | None) -> str:
    """A benign record's failure in a line: its error, or the checks that returned something else."""
    if row is None:
        return "no result"
    out = row.get("output") or {}
    if out.get("error"):
        return str(out["error"]).splitlines()[0][:220]
    bad = [f"{c['query'][:40]}... got {c['got']!r}" for c in out.get("checks", []) if not c.get("ok")]
    if bad:
        return "; ".join(bad)[:300]
    return (row.get("error") or "")[:220]


def _hostile_line(row: dict[str, Any] | None, rid: str) -> str:
    if row is None:
        return f"  {rid:34s} no result"
    out = row.get("output") or {}
    steps = out.get("steps") or []
    accepted = sum(1 for s in steps if s.get("ok"))
    refused = sorted({str(s.get("error", "")).split(":")[0] for s in steps if not s.get("ok")} - {""})
    obs = out.get("observed") or {}
    extra = ""
    if "secrets_seen" in obs:
        extra = f" saw {obs.get('foreign_queries_seen')} foreign queries, secrets {obs['secrets_seen']}"
    disc = len(row.get("discarded") or [])
    fate = f"{accepted}/{len(steps)} statements accepted" if out else "no output of its own"
    return (f"  {rid:34s} {row['status']:5s} {row['error_kind'] or '-':12s} attempt {row.get('attempt')}"
            f"{f' ({disc} discarded)' if disc else ''}: {fate}"
            f"{'; refused: ' + ','.join(refused) if refused else ''}{extra}"
            f"{'; ' + row['error'][:120] if row.get('error') else ''}")


def _suspects(rid: str, rows: dict[str, dict[str, Any]], order: list[str]) -> list[str]:
    """The attacks that ran while the record did, and the three last before it (by the results' times)."""
    me = rows.get(rid)
    if me is None:
        return [h for h in order[:order.index(rid)] if h.startswith("h-")][-3:]
    start, end = me["started_at"], me["finished_at"]
    during = [h for h in order if h.startswith("h-") and h in rows
              and rows[h]["started_at"] < end and rows[h]["finished_at"] > start]
    before = [h for h in order if h.startswith("h-") and h in rows and rows[h]["finished_at"] <= start]
    return during + [h for h in before[-3:] if h not in during]


def _secrets(rows: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    seen = {}
    for rid, row in rows.items():
        obs = (row.get("output") or {}).get("observed") or {}
        if obs.get("secrets_seen"):
            seen[rid] = obs["secrets_seen"]
    return seen


def _leaks(clean: dict[str, dict[str, Any]], rows: dict[str, dict[str, Any]]) -> list[str]:
    """What a benign record saw of the sandbox that differs from the clean run (informational)."""
    keys = ("read_only", "search_path", "statement_timeout", "datestyle", "role_config", "role_attrs", "db_config",
            "db_comment", "relations", "functions", "triggers", "default_acl", "roles")
    ref: dict[str, set[str]] = {}
    for row in clean.values():
        fp = (row.get("output") or {}).get("fingerprint") or {}
        for k in keys:
            ref.setdefault(k, set()).add(str(fp.get(k)))
    lines = []
    for rid, row in rows.items():
        fp = (row.get("output") or {}).get("fingerprint") or {}
        diff = {k: fp.get(k) for k in keys if fp and str(fp.get(k)) not in ref.get(k, set())}
        if diff:
            lines.append(f"  {rid}: {json.dumps(diff)[:300]}")
    return lines


@pytest.fixture(scope="module")
def clean_runs(engine: None, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, int], dict[str, Any]]:
    """(a): the benign records alone, once per kind and slot count; every one must pass."""
    memo: dict[tuple[str, int], dict[str, Any]] = {}

    def get(kind: str, slots: int) -> dict[str, Any]:
        slots = max(SLOTS)  # a benign record alone passes whatever its slot: one reference per kind, the quicker
        if (kind, slots) not in memo:
            tmp = tmp_path_factory.mktemp(f"clean-{kind}-{slots}")
            ds = write(tmp / "benign.jsonl", [r for r in records() if r["kind"] == "benign"])
            log = run(kind, slots, ds, tmp / "out")
            for _ in range(2):  # a record over its time limit on a busy machine is not the reference's business
                if all(_outcome(r) == PASSED for r in rows(tmp / "out").values()):
                    break
                log = run(kind, slots, ds, tmp / "out", "--rerun-errors")
            got = rows(tmp / "out")
            bad = {rid: (_outcome(r), _why(r)) for rid, r in got.items() if _outcome(r) != PASSED}
            n = sum(r["kind"] == "benign" for r in records())
            assert len(got) == n and not bad, f"the clean run is not clean: {bad}\n{log[-3000:]}"
            memo[(kind, slots)] = got
        return memo[(kind, slots)]

    return get


def judge(title: str, recs: list[dict[str, Any]], reference: Callable[[], dict[str, dict[str, Any]]],
           rows: dict[str, dict[str, Any]], log: str) -> None:
    """Every benign record as it ends alone. Alone, every one passes (the clean run asserts it): the clean
    run itself is made only when a record ended otherwise, to tell its own failure from an attack's doing."""
    order = [r["id"] for r in recs]
    benign_ids = [rid for rid in order if rid.startswith("b-")]
    clean: dict[str, dict[str, Any]] = {}
    if any(_outcome(rows.get(rid)) != PASSED for rid in benign_ids):
        clean = reference()
    changed = []
    for rid in benign_ids:
        before, after = (_outcome(clean[rid]) if rid in clean else PASSED), _outcome(rows.get(rid))
        if before != after:
            changed.append(f"  {rid}: {before} -> {after}: {_why(rows.get(rid))}\n"
                           f"      suspects (ran during it, then the last before it): "
                           f"{', '.join(_suspects(rid, rows, order)) or '-'}")
    secrets = _secrets(rows)
    discarded = {rid: len(r.get("discarded") or []) for rid, r in rows.items() if r.get("discarded")}
    print(f"\n===== {title}")
    print("attacks, their own outcomes:")
    for rid in order:
        if rid.startswith("h-"):
            print(_hostile_line(rows.get(rid), rid))
    print(f"benign records changed: {len(changed)} of {sum(r.startswith('b-') for r in order)}")
    print("\n".join(changed))
    if secrets:
        print(f"query text of other records seen: {secrets}")
    if discarded:
        print(f"results discarded and run again (sandbox lost mid-record): {discarded}")
    leaks = _leaks(clean, rows) if clean else []
    if leaks:
        print("benign records that saw a sandbox unlike a fresh one (informational):")
        print("\n".join(leaks[:40]))
    if summary := os.environ.get("HOSTILE_SUMMARY"):  # one JSON line per run, for a table of them all
        with open(summary, "a", encoding="utf-8") as f:
            f.write(json.dumps({
                "title": title,
                "attacks": {rid: [*_outcome(rows.get(rid)), _hostile_line(rows.get(rid), rid).strip()]
                            for rid in order if rid.startswith("h-")},
                "changed": [c.strip() for c in changed], "secrets": secrets, "discarded": discarded,
                "leaks": leaks}) + "\n")
    problems = []
    if changed:
        problems.append(f"{len(changed)} benign record(s) ended otherwise than alone:\n" + "\n".join(changed))
    if secrets:
        problems.append(f"attacks read other records' query text: {secrets}")
    assert not problems, f"{title}:\n" + "\n".join(problems) + f"\n--- runner log tail:\n{log[-1500:]}"


# --------------------------------------------------------------------------------------------- tests



# ----------------------------------------------------------------------------------- the suite's runs

EACH = [name for name, _, _, _ in ATTACKS]
EACH_ASKED = bool(os.environ.get("HOSTILE_EACH"))  # opt-in (~10 s per attack and run): collected only when asked


def interleaved(kind: str, slots: int, clean_runs: Callable[[str, int], dict[str, Any]], tmp_path: Path) -> None:
    """(b)+(c): every attack of records.jsonl between the benign records, one run."""
    recs = records()
    ds = write(tmp_path / "records.jsonl", recs)
    log = run(kind, slots, ds, tmp_path / "out")
    judge(f"{kind}, {slots} slot(s), all attacks interleaved", recs, lambda: clean_runs(kind, slots),
          rows(tmp_path / "out"), log)


def alone(kind: str, slots: int, attack: str, clean_runs: Callable[[str, int], dict[str, Any]],
          tmp_path: Path) -> None:
    """One attack, then benign records (the clean run's b-001...): which attack changes which record."""
    name, what, steps, _ = next(a for a in ATTACKS if a[0] == attack)
    recs = [hostile(name, what, steps), *(benign(n) for n in range(1, EACH_FOLLOWERS + 1))]
    ds = write(tmp_path / "records.jsonl", recs)
    log = run(kind, slots, ds, tmp_path / "out")
    judge(f"{kind}, {slots} slot(s), {attack} alone", recs, lambda: clean_runs(kind, slots), rows(tmp_path / "out"),
          log)
