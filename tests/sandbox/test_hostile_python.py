"""Hostile SQL, the `python` kind: the harness's function in the worker, 1 and 3 slots
(tests/sandbox/hostile/suite.py says what is checked and how to run it).

    .venv/bin/pytest tests/sandbox/test_hostile_python.py -q -s
    HOSTILE_EACH=1 .venv/bin/pytest tests/sandbox/test_hostile_python.py -q -s -k "alone and 3slot and role-read-only"
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.sandbox.hostile.suite import EACH, EACH_ASKED, SLOTS, alone, clean_runs, engine, interleaved  # noqa: F401 - the suite's fixtures

pytestmark = [pytest.mark.docker, pytest.mark.slow]
KIND = "python"


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
