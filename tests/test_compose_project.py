"""scripts/compose.sh gives each checkout a compose project of its own (compose named it after the file's
directory, "compose": two checkouts shared one, and `down -v` in one removed the other's sandbox)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _project(checkout: Path, fake_bin: Path, **env: str) -> str:
    """The project name compose.sh hands compose, read by a stand-in for docker-compose."""
    done = subprocess.run([str(checkout / "scripts" / "compose.sh"), "ps"], capture_output=True, text=True,
                          env={"PATH": f"{fake_bin}:{os.environ['PATH']}", **env}, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_two_checkouts_get_two_projects_and_each_keeps_its_own(tmp_path: Path) -> None:
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "docker").write_text("#!/bin/sh\nexit 1\n")  # no `docker compose`: the v1 binary is used
    (fake_bin / "docker-compose").write_text('#!/bin/sh\necho "$COMPOSE_PROJECT_NAME"\n')
    for f in fake_bin.iterdir():
        f.chmod(0o755)
    checkouts = []
    for name in ("one", "two"):
        c = tmp_path / name / "pgsandbox-runner"
        shutil.copytree(ROOT / "scripts", c / "scripts")
        shutil.copytree(ROOT / "compose", c / "compose")
        checkouts.append(c)
    first, second = (_project(c, fake_bin) for c in checkouts)
    assert first != second and first.startswith("pgsr-") and second.startswith("pgsr-")
    assert _project(checkouts[0], fake_bin) == first  # the same checkout, the same project: `down` finds it
    assert _project(checkouts[0], fake_bin, COMPOSE_PROJECT_NAME="mine") == "mine"  # one given is kept
