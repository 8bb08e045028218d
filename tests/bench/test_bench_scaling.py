"""CI: the scaling, startup, memory, inflight benchmarks run end to end on their smallest sizes (no timing judged).
The benchmarks are split over three files so that pytest-xdist runs them side by side."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.runs import run_tiny


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_they_run_and_write_their_sections(tmp_path: Path, sandbox_image: str) -> None:
    text = run_tiny(tmp_path, ["scaling", "slots", "startup", "memory", "inflight"])
    for section in ["Scaling against the seeds' design", "Scaling with slots", "Harness overhead", "Sandbox start-up",
                    "Memory at W=",
                    "Memory per conversation in flight"]:
        assert section in text, section
