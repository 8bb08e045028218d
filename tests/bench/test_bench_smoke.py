"""CI: a few benchmarks end to end at their smallest sizes (no timing judged): the ones that go through the
benchmarks' shared machinery (datasets, runs of the runner, CPU by part, the document and its summary) at
the least cost. The others' sections render from recorded results (test_renders.py) and their measuring
runs in `make bench-smoke` and `make bench`: three end-to-end smoke tests of ~100 s each were a third of
`make test`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.runs import run_tiny


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_they_run_and_write_their_sections(tmp_path: Path, sandbox_image: str) -> None:
    text = run_tiny(tmp_path, ["startup", "harness", "cached", "headline"])
    for section in ["Sandbox start-up", "A user's harness", "Fully cached rerun", "The headline"]:
        assert section in text, section
