"""configs/clouds.yaml through `runner run` on the simulator, as a user runs it: a run per cloud (Claude on
Bedrock, Claude on Vertex AI, GPT on Azure OpenAI), every request one the cloud would take, none in error,
and the manifest naming where each cloud's calls went."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.config import CLOUD_ENV
from tests.runs import finish, rows_of, start_run

ROOT = Path(__file__).resolve().parents[2]
CLOUDS = ROOT / "configs" / "clouds.yaml"

pytestmark = [pytest.mark.slow, pytest.mark.docker]


def test_the_clouds_config_runs_one_agent_through_each_cloud(tmp_path: Path, sandbox_image: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CLOUD_ENV:  # the config's own settings, whatever this machine's environment holds
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "out"
    code, said = finish(start_run(CLOUDS, out, "--limit", "2", "--providers", "sim", "--no-cache",
                                  "--sandbox", "docker", "-w", "3"), timeout=600)
    assert code == 0, said[-4000:]
    manifest = json.loads((out / "manifest.json").read_text())
    runs = {"claude-bedrock": "bedrock", "claude-vertex": "vertex", "gpt-azure": "azure"}
    for run, cloud in runs.items():
        rows = rows_of(out, run)
        assert len(rows) == 2 and all(r["status"] == "ok" for r in rows), [r.get("error") for r in rows]
        assert all(r["usage"]["llm_calls"] > 0 and r["usage"]["cost_usd"] > 0 for r in rows)
        [sent] = manifest["requests"][run]
        assert sent["provider"] == cloud and "first-party prices" in sent["prices"]
        # no --budget: what the run spent is still counted, for a later invocation's cap
        assert manifest["spent"][run][0] == pytest.approx(sum(r["usage"]["cost_usd"] for r in rows), rel=1e-3)
    # each figure rounded to a millionth of a dollar in the manifest: the sum of three of them within 2 of it
    assert manifest["spent"]["job"][0] == pytest.approx(sum(manifest["spent"][r][0] for r in runs), abs=2e-6)
    sim = manifest["endpoints"]["anthropic"]  # the simulator's address: each cloud's calls went there
    assert manifest["endpoints"]["bedrock"] == sim and manifest["endpoints"]["azure"] == sim
    assert manifest["endpoints"]["vertex"] == f"{sim}/v1"
    refused = [line for line in (out / "logs" / "simulator.log").read_text().splitlines() if line[:4] in
               ("400 ", "401 ", "403 ", "404 ")]
    assert refused == []
