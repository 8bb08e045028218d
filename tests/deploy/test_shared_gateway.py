"""The Kubernetes topology on one machine: two shards (pods) whose SDKs reach one gateway through
ANTHROPIC_BASE_URL / OPENAI_BASE_URL, as deploy/k8s/shards-job.yaml sets them. Every model call of
both shards goes through that one gateway (one budget), none around it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.config import Config, RunSpec, SimSettings
from runner.gateway import gateway_settings
from runner.gateway.process import GatewayServer
from runner.models.sim.process import SimServer
from tests.runs import SAMPLE, rows_of

pytestmark = pytest.mark.slow


def test_two_shards_share_one_gateway(tmp_path: Path, local_bindir: str) -> None:
    runs = "runs:\n  - {name: strong, provider: anthropic, model: claude-sonnet-5-5}\n" \
           "  - {name: mini, provider: openai, model: gpt-5.4-mini}\n"
    cfg_path = tmp_path / "runner.yaml"
    cfg_path.write_text(f"dataset: {SAMPLE}\ncache: false\nworkers: 2\nsandbox: local\n{runs}")
    budget = Config(dataset=SAMPLE, runs=[RunSpec(name="x", provider="anthropic", model="claude-sonnet-5-5")],
                    cache=False, rate_limits={"anthropic": {"rpm": 600}, "openai": {"rpm": 600}})
    token = "the-shared-gateways-token"  # what every shard presents: the gateway holds the keys
    with SimServer(SimSettings()) as sim, GatewayServer(gateway_settings(budget, sim_url=sim.url), token) as gw:
        env = {**{k: v for k, v in os.environ.items() if k != "CI"}, "ANTHROPIC_API_KEY": token,
               "OPENAI_API_KEY": token, "ANTHROPIC_BASE_URL": gw.url, "OPENAI_BASE_URL": f"{gw.url}/v1"}
        pods = [subprocess.Popen([sys.executable, "-m", "runner", "run", str(cfg_path), "--shard", f"{i}/2",
                                  "--limit", "5", "--providers", "real", "--out", str(tmp_path / f"shard-{i}")],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                for i in (1, 2)]
        logs = [p.communicate(timeout=300)[0] for p in pods]
        assert [p.returncode for p in pods] == [0, 0], "\n".join(x[-2000:] for x in logs)
        through = gw.stats()
        served = sim.stats()
    rows = [r for i in (1, 2) for run in ("strong", "mini") for r in rows_of(tmp_path / f"shard-{i}", run)]
    assert len(rows) == 20 and all(r["status"] == "ok" for r in rows)
    calls = sum(r["usage"]["llm_calls"] for r in rows)
    # every call of both pods reached the one gateway (plain /v1 paths: the pods' own clients)
    gateway_calls = sum(int(c.get("llm_calls", 0)) for c in through.values() if isinstance(c, dict))
    assert gateway_calls == calls > 0, (gateway_calls, calls, through)
    assert served.get("ok") == calls, served  # and each reached the API once, through it (no cache, no faults)
