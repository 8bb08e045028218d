"""The example CI workflow (.github/workflows/eval-shards.yml), as far as it can be checked without GitHub:
every `runner` command in it is one the CLI knows, with options it has; and its budget split for shards
without a shared gateway gives each 1/N of every limit of the config."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from runner.cli import cli
from runner.config import load_config

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "eval-shards.yml"


def _runner_commands() -> list[list[str]]:
    doc = yaml.safe_load(WORKFLOW.read_text())
    scripts = [step["run"] for job in doc["jobs"].values() for step in job["steps"] if "run" in step]
    commands = []
    for script in scripts:
        for line in script.splitlines():
            line = re.sub(r"\$\{\{[^}]*\}\}", "1", line)  # a GitHub expression: any value will do
            if ".venv/bin/runner " in line:
                commands.append(shlex.split(line.split(".venv/bin/runner ", 1)[1]))
    return commands


def test_every_runner_command_of_the_workflow_is_one_the_cli_knows() -> None:
    commands = _runner_commands()
    assert {c[0] for c in commands} == {"run", "report", "merge"}
    assert any("--junit" in c and "--summary" in c for c in commands)  # the test report and the job summary
    for args in commands:
        cmd = cli.commands[args[0]]
        known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
        assert [a for a in args[1:] if a.startswith("--") and a not in known] == [], args
        cmd.make_context(args[0], args[1:], resilient_parsing=True)  # the positional arguments fit


def test_without_a_shared_gateway_each_shard_gets_a_third_of_every_limit(tmp_path: Path) -> None:
    config = tmp_path / "default.yaml"
    config.write_text((ROOT / "configs" / "default.yaml").read_text().replace("../data", str(ROOT / "data")))
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "shard-budget.py"), str(config), "3"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    whole, share = load_config(config), load_config(p.stdout.strip())
    assert set(share.rate_limits) == set(whole.rate_limits) == {"anthropic", "openai"}
    for key, spec in whole.rate_limits.items():
        full, third = spec.resolved(), share.rate_limits[key].resolved()  # the tier4 preset resolved first
        for dim in ("rpm", "itpm", "otpm"):
            assert getattr(third, dim) * 3 == pytest.approx(getattr(full, dim))
    # the rest is the same job: the shards' outputs merge (runner merge checks the fingerprint)
    assert share.fingerprint() == whole.fingerprint() and share.dataset == whole.dataset
