"""How `make test` orders the suite's files (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SLOW_FIRST

HERE = Path(__file__).resolve().parent


def test_every_file_named_slow_first_exists_once() -> None:
    """A file renamed or removed would drop out of the order silently."""
    assert [name for name in SLOW_FIRST if not (HERE / name).is_file()] == []
    assert len(set(SLOW_FIRST)) == len(SLOW_FIRST)
