"""The pytest plugin (runner/pytest_plugin.py) on the example suite (examples/pytest-tool-calls), run as a team
runs it: pytest-xdist with four workers, their SDK calls through one gateway the session starts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from runner.config import Limits, SimSettings
from runner.models.sim.process import SimServer

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "pytest-tool-calls"
CASES = sum(1 for line in (EXAMPLE / "cases.jsonl").read_text().splitlines() if line)
PROVIDER_RPM = 60


def _suite(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # the stand-in keys are the plugin's to set (on the simulator), the base URLs its to point
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL", "_API_BASE"))}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "xdist", "-n", "4", "-o",
                           f"cache_dir={tmp_path / 'pytest-cache'}", *args], cwd=EXAMPLE, env=env,
                          capture_output=True, text=True, timeout=600)


def _said(p: subprocess.CompletedProcess[str]) -> dict[str, int]:
    """The plugin's closing lines: calls answered by the model, from the cache, and per worker."""
    m = re.search(r"(\d+) model call\(s\): (\d+) answered by the model.*?, (\d+) from the response cache", p.stdout)
    assert m, p.stdout[-3000:] + p.stderr[-3000:]
    workers = dict(re.findall(r"(gw\d+) (\d+)", p.stdout.split("by worker:")[1].splitlines()[0]))
    return {"calls": int(m[1]), "model": int(m[2]), "cache": int(m[3]),
            **{w: int(n) for w, n in workers.items()}}


@pytest.mark.slow
def test_four_xdist_workers_share_one_budget_and_a_rerun_is_answered_from_the_cache(tmp_path: Path) -> None:
    # The provider (the simulator) allows 60 requests a minute for the model, counted by its own token
    # bucket, and answers 429 past that. The gateway's budget is a request a minute under it: at exactly the
    # provider's rate its clock and the provider's, a few milliseconds of network apart, disagree at the
    # edge now and then (the gateway retries that 429; docs/pytest.md).
    gw = tmp_path / "gw.yaml"
    gw.write_text(f"rate_limits: {{anthropic: {{rpm: {PROVIDER_RPM - 1}}}}}\ncache_dir: responses\n")
    provider = SimSettings(limits={"claude-sonnet-5-5": Limits(rpm=PROVIDER_RPM)})
    with SimServer(provider) as sim:
        first = _suite(tmp_path, f"--runner-gateway={gw}", f"--runner-gateway-sim={sim.url}")
        served = sim.stats()
        second = _suite(tmp_path, f"--runner-gateway={gw}", f"--runner-gateway-sim={sim.url}")
        again = sim.stats()
    tests = 2 * CASES + 2  # a selection and an argument test per case, two schema tests
    assert first.returncode == 0 and f"{tests} passed" in first.stdout, first.stdout[-3000:] + first.stderr[-3000:]
    said = _said(first)
    # every test's call went through the gateway, from every worker: none went around it
    assert said["calls"] == 2 * CASES == sum(n for k, n in said.items() if k.startswith("gw"))
    assert sum(1 for k, n in said.items() if k.startswith("gw") and n) >= 2, said
    # the provider saw more requests than a minute's budget, and refused none: the four workers together
    # stayed within its limit, paced by one budget (four per-process limiters would each have spent it)
    assert int(served.get("requests", 0)) == said["model"] > PROVIDER_RPM, served
    assert int(served.get("429", 0)) == 0, served
    # each case's selection and argument test ask the same thing: one of the two was the cache's
    assert said["model"] + said["cache"] == 2 * CASES and said["cache"] >= CASES // 2
    # the second session asks the provider nothing: every answer comes from the response cache
    assert second.returncode == 0 and f"{tests} passed" in second.stdout, second.stdout[-3000:]
    assert again.get("requests") == served.get("requests")
    assert _said(second)["cache"] == 2 * CASES and _said(second)["model"] == 0


def test_a_missing_gateway_config_stops_the_session_in_one_line(tmp_path: Path) -> None:
    p = _suite(tmp_path, "--runner-gateway=no-such.yaml", "--co")
    assert p.returncode == 4
    assert "--runner-gateway no-such.yaml: no such file" in p.stderr + p.stdout


@pytest.mark.slow
def test_batch_mode_sends_the_suite_s_calls_through_the_batch_apis(tmp_path: Path) -> None:
    gw = tmp_path / "gw.yaml"
    gw.write_text("cache: false\nbatch: {window_seconds: 0.5, poll_min_seconds: 0.2}\n")
    with SimServer(SimSettings()) as sim:
        p = _suite(tmp_path, f"--runner-gateway={gw}", f"--runner-gateway-sim={sim.url}", "--runner-gateway-batch",
                   "-k", "crm-7-00000-t1 or crm-7-00001-t1")
        served = sim.stats()
    assert p.returncode == 0 and "4 passed" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]
    m = re.search(r"batch mode: (\d+) batch\(es\), (\d+) call\(s\) answered through them", p.stdout)
    assert m and int(m[1]) >= 1 and int(m[2]) == 4, p.stdout[-2000:]
    # the simulator was asked through its batch API only: every request it answered came in a batch
    assert served["batch_requests"] == served["ok"] == 4 and not served.get("requests"), served
