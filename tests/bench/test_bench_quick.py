"""CI: every benchmark runs end to end on its smallest sizes (`--tiny`; no timing judged)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_every_benchmark_runs(tmp_path: Path, sandbox_image: str) -> None:
    doc = tmp_path / "benchmarks.md"
    env = {**{k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}, "BENCH_DIR": str(tmp_path)}
    p = subprocess.run([sys.executable, "-m", "bench.all", "--tiny", "--out", str(doc)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    text = doc.read_text()
    for section in ("Targets at a glance", "Scaling against the seeds' design", "Harness overhead",
                    "Sandbox start-up", "Memory at W=", "Memory per conversation in flight",
                    "Rate limits:", "Rate limits across nodes", "Fully cached rerun", "A user's harness",
                    "Model gateway", "The headline", "bound by rate limits"):
        assert section in text, section
    assert "Command: `make bench (tiny)`" in text and (tmp_path / "bench.json").exists()
