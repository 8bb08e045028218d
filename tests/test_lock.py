"""The locks (requirements/*.txt) that every venv `make` builds installs from: they agree with pyproject.toml and
their inputs, and what is installed is what they pin. A lock that drifted from the venvs would let CI test other
packages than a fresh clone installs."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import REQUIRED

ROOT = Path(__file__).resolve().parents[1]
LOCKS = ROOT / "requirements"
# the venv, its lock, and the packages installed from this tree (not from an index: no pin)
VENVS = {
    ".venv": ("runner.txt", {"pgsandbox-runner"}),
    ".venv-inspect": ("runner.txt", {"pgsandbox-runner"}),
    ".venv-litellm": ("litellm.txt", set()),
    ".venv-helpdesk": ("helpdesk.txt", {"heavystack"}),
}


def pins(lock: str) -> dict[str, str]:
    """name -> version of each line of a lock that applies here (a universal lock may pin a name twice, under
    markers that exclude each other)."""
    out: dict[str, str] = {}
    for line in (LOCKS / lock).read_text().splitlines():
        if not line or line.startswith((" ", "#", "-")):
            continue
        spec, _, marker = line.partition(";")
        name, _, version = spec.strip().partition("==")
        if marker.strip() and not Marker(marker.strip()).evaluate():
            continue
        assert version, f"{lock}: {line!r} is not pinned with =="
        assert canonicalize_name(name) not in out, f"{lock}: {name} pinned twice for this interpreter"
        out[canonicalize_name(name)] = version
    return out


def _requirements(lines: list[str]) -> list[Requirement]:
    reqs = [Requirement(line) for line in lines]
    return [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]


def _in_file(path: Path) -> list[str]:
    out = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            out += _in_file(path.parent / line[3:].strip())
        elif line:
            out.append(line)
    return out


def _unmet(reqs: list[Requirement], pinned: dict[str, str]) -> list[str]:
    bad = []
    for r in reqs:
        version = pinned.get(canonicalize_name(r.name))
        if version is None or not r.specifier.contains(version, prereleases=True):
            bad.append(f"{r} (locked: {version})")
    return bad


def test_the_runner_lock_meets_pyproject_with_every_extra_and_its_inputs() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        wanted += extra
    wanted += _in_file(LOCKS / "runner.in")
    assert _unmet(_requirements(wanted), pins("runner.txt")) == []


@pytest.mark.parametrize("lock", ["litellm", "helpdesk"])
def test_each_side_venvs_lock_meets_its_inputs(lock: str) -> None:
    assert _unmet(_requirements(_in_file(LOCKS / f"{lock}.in")), pins(f"{lock}.txt")) == []


def test_the_lock_check_sees_a_range_the_lock_does_not_meet_and_a_name_it_lacks() -> None:
    pinned = {"anthropic": "2.15.0"}
    assert _unmet([Requirement("anthropic>=2.12")], pinned) == []
    assert _unmet([Requirement("anthropic>=99"), Requirement("no-such-package")], pinned) == [
        "anthropic>=99 (locked: 2.15.0)", "no-such-package (locked: None)"]


@pytest.mark.parametrize("venv", sorted(VENVS))
def test_every_package_make_test_installed_is_the_locked_version(venv: str) -> None:
    python = ROOT / venv / "bin" / "python"
    if not python.exists():
        if REQUIRED:
            pytest.fail(f"{venv} is missing: `make test` builds it", pytrace=False)
        pytest.skip(f"{venv} not built here (make test builds it)")
    lock, local = VENVS[venv]
    listed = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m, json; "
         "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"],
        capture_output=True, text=True, check=True, timeout=60).stdout
    installed = {canonicalize_name(k): v for k, v in json.loads(listed).items()}
    pinned = pins(lock)
    off = {name: (version, pinned.get(name)) for name, version in sorted(installed.items())
           if name not in local and pinned.get(name) != version}
    assert off == {}, f"{venv}: installed (version, locked) differ; `make lock` or a fresh venv"
