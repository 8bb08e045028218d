"""Hostile SQL, the `command` kind: the harness's CLI, one record per process, 1 and 3 slots
(tests/sandbox/hostile/suite.py says what is checked and how to run it).

    .venv/bin/pytest tests/sandbox/test_hostile_command.py -q -s
    HOSTILE_EACH=1 .venv/bin/pytest tests/sandbox/test_hostile_command.py -q -s -k "alone and 3slot and role-read-only"
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.sandbox.hostile.suite import (  # noqa: F401 - the suite's fixtures
    ATTACKS,
    CONFIGS,
    EACH,
    EACH_ASKED,
    SLOTS,
    alone,
    benign,
    clean_runs,
    engine,
    hostile,
    interleaved,
    judge,
    rows,
    run,
    runner_command,
    write,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]
KIND = "command"


@pytest.mark.parametrize("slots", SLOTS, ids=[f"{s}slot" for s in SLOTS])
def test_attacks_change_no_other_record(slots: int, clean_runs: Callable[[str, int], dict[str, Any]],  # noqa: F811
                                        tmp_path: Path) -> None:
    interleaved(KIND, slots, clean_runs, tmp_path)


if EACH_ASKED:
    @pytest.mark.parametrize("attack", EACH, ids=[n.removeprefix("h-") for n in EACH])
    @pytest.mark.parametrize("slots", SLOTS, ids=[f"{s}slot" for s in SLOTS])
    def test_each_attack_alone(slots: int, attack: str, clean_runs: Callable[[str, int], dict[str, Any]],
                               tmp_path: Path) -> None:
        alone(KIND, slots, attack, clean_runs, tmp_path)


OWN_DB = ("h-own-db-settings", "h-own-other-schema", "h-own-function-trigger", "h-own-default-privileges",
          "h-own-sequence")


def test_command_records_each_get_fresh_databases(clean_runs: Callable[[str, int], dict[str, Any]],  # noqa: F811
                                                  tmp_path: Path) -> None:
    """The command kind with `reset: recreate` and the default chunk: each attack on its own database is
    followed by a benign record, which must start on a fresh copy, as it does alone. A chunk of 2 records per
    process would share one database between them: that config is refused, in one line naming it."""
    recs: list[dict[str, Any]] = []
    for n, attack in enumerate(OWN_DB, start=1):
        name, what, steps, _ = next(a for a in ATTACKS if a[0] == attack)
        recs += [hostile(name, what, steps), benign(n)]
    ds = write(tmp_path / "records.jsonl", recs)
    log = run("command-chunked", 1, ds, tmp_path / "out")
    judge("command, reset: recreate, 1 slot, attacks on the own database", recs, lambda: clean_runs("command", 1),
          rows(tmp_path / "out"), log)
    chunked = tmp_path / "chunked.yaml"
    chunked.write_text(CONFIGS["command-chunked"].read_text().replace("  reset: recreate", "  chunk_size: 2\n"
                                                                       "  reset: recreate"))
    p = subprocess.run([*runner_command(), "run", str(chunked), "--dataset", str(ds), "--out", str(tmp_path / "out2"),
                        "--sandbox", "docker"], capture_output=True, text=True, timeout=120,
                       cwd=CONFIGS["command"].parent)
    said = [line for line in (p.stdout + p.stderr).splitlines() if line.strip()]
    assert p.returncode == 2 and len(said) == 1, p.stdout + p.stderr
    assert f"{chunked}:" in said[0] and "chunk_size: 2 with reset: recreate" in said[0], said
    assert not (tmp_path / "out2" / "results").exists()
