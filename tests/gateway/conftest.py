"""A simulator failing 30 % of its answers with 500, and a gateway in front of it, shared by the package."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.config import Faults, SimSettings
from runner.models.sim.process import SimServer

CACHE_DIRS: list[Path] = []
TOKEN = "the-runs-gateway-token"  # what the gateway admits: its callers' API key


@pytest.fixture(scope="package")
def sim() -> Iterator[str]:
    with SimServer(SimSettings(faults=Faults(http_500=0.3))) as s:
        yield s.url


@pytest.fixture(scope="package")
def gateway(sim: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    d = tmp_path_factory.mktemp("gw")
    CACHE_DIRS.append(d / "cache")
    cfg = d / "gw.yaml"
    cfg.write_text(f"dataset: x.jsonl\nharness: {{kind: python, entrypoint: 'm:f'}}\ncache_dir: {d / 'cache'}\n"
                   "retry: {max_attempts: 8, base_seconds: 0.05, max_backoff_seconds: 0.5}\n"
                   "rate_limits: {anthropic: {rpm: 6000}}\nruns: [{name: r}]\n")
    env = {**{k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}, "RUNNER_GATEWAY_TOKEN": TOKEN}
    p = subprocess.Popen([sys.executable, "-m", "runner", "gateway", str(cfg), "--port", "0", "--upstream-sim", sim],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        line = p.stdout.readline() if p.stdout else ""
        assert line.startswith("listening on "), line
        yield line.split()[-1]
    finally:
        p.terminate()
        p.wait(10)


