"""Run some benchmarks end to end at their smallest sizes (`--tiny`: that the code runs; no timing
judged), as `make bench` would, into a document of their own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_tiny(tmp_path: Path, steps: list[str]) -> str:
    doc = tmp_path / "benchmarks.md"
    env = {**{k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}, "BENCH_DIR": str(tmp_path)}
    p = subprocess.run([sys.executable, "-m", "bench.all", "--tiny", "--only", ",".join(steps), "--out", str(doc)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    assert (tmp_path / "bench.json").exists()
    text = doc.read_text()
    assert "Targets at a glance" in text
    return text
