"""The sandbox image: locate its inputs, name it by their hash, build it only when missing.

The database inside comes from a DatabaseSpec (the harness's schema files); the tag hashes it.
Two ways to a base, one Dockerfile: an ordinary registry image (installs PostgreSQL at build),
or, where no registry answers, a base made from Debian packages by images/base/make-base.sh.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from loguru import logger

from runner.config import environment
from runner.errors import ImageBuildError
from runner.sandbox.schema import DatabaseSpec, map_error

REPO_NAME = "pgsandbox-runner/sandbox"
REGISTRY_BASE = "debian:bookworm-slim"
_CONTEXT_FILES = ("Dockerfile", "entrypoint.sh", "sandbox.conf", "init-db.sh")
# Debian suites that package each PostgreSQL major (the offline base is built from them).
_SUITES = {"15": "bookworm", "17": "trixie"}


def offline_base(major: str) -> str:
    return f"pgsandbox-runner/base:{_SUITES.get(major, 'bookworm')}-pg{major}"


def images_dir() -> Path:
    """images/ of the checkout this package runs from (or RUNNER_IMAGES_DIR)."""
    env = environment().images_dir
    candidates = [env] if env else []
    candidates.append(Path(__file__).resolve().parents[2] / "images")
    for c in candidates:
        if (c / "sandbox" / "Dockerfile").is_file():
            return c
    raise ImageBuildError(
        "cannot find images/sandbox/Dockerfile; run from a checkout or set RUNNER_IMAGES_DIR"
    )


def image_tag(spec: DatabaseSpec) -> str:
    """pgsandbox-runner/sandbox:<hash of the image's own files and of the database spec>."""
    h = hashlib.sha256(spec.digest().encode())
    src = images_dir() / "sandbox"
    for name in _CONTEXT_FILES:
        h.update(name.encode() + b"\0" + (src / name).read_bytes())
    return f"{REPO_NAME}:{h.hexdigest()[:12]}"


def _docker(*args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=check)
    except subprocess.CalledProcessError as e:
        said = f"{e.stdout or ''}\n{e.stderr or ''}".strip()
        raise ImageBuildError(f"docker {' '.join(args[:2])} failed: {said[-4000:]}") from e
    except subprocess.TimeoutExpired as e:
        raise ImageBuildError(f"docker {' '.join(args[:2])} timed out after {timeout:.0f}s") from e
    except FileNotFoundError as e:
        raise ImageBuildError("the docker client is not installed") from e


def image_exists(ref: str) -> bool:
    return _docker("image", "inspect", ref, check=False, timeout=30).returncode == 0


def choose_base(major: str) -> str:
    """A registry base if one is here or can be pulled, else the offline Debian base."""
    forced = environment().base_image
    if forced:
        return forced
    base = offline_base(major)
    if image_exists(REGISTRY_BASE) and major == "15":
        return REGISTRY_BASE
    if image_exists(base):
        return base
    if major not in _SUITES:
        raise ImageBuildError(
            f"no Debian suite packages PostgreSQL {major} (offline builds can make "
            f"{', '.join(sorted(_SUITES))}); set RUNNER_BASE_IMAGE to a base that has it"
        )
    pulled = _docker("pull", "-q", REGISTRY_BASE, check=False, timeout=60)
    if pulled.returncode == 0 and major == "15":
        return REGISTRY_BASE
    logger.info(
        "no registry answers ({}); building the base from Debian packages", pulled.stderr.strip()[:120]
    )
    script = images_dir() / "base" / "make-base.sh"
    try:
        subprocess.run(["bash", str(script), base, major, _SUITES[major]], check=True, timeout=900)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        raise ImageBuildError(f"{script} failed: {e}") from e
    return base


def stage_context(spec: DatabaseSpec, into: Path) -> None:
    """The build context: the image's own files plus initdb/<database>/NNN-<file> in apply order."""
    src = images_dir() / "sandbox"
    for name in _CONTEXT_FILES:
        shutil.copy2(src / name, into / name)
    for db in spec.databases:
        (into / "initdb" / db).mkdir(parents=True, exist_ok=True)
    for db, staged, origin in spec.staged_names():
        shutil.copy2(origin, into / "initdb" / db / staged)


def ensure_image(spec: DatabaseSpec, *, force: bool = False, also_tag: str | None = None) -> str:
    """Return the sandbox image tag for this database, building it first if it is not there.

    A failing schema file fails the build with psql's message rewritten to the user's file:line.
    """
    tag = image_tag(spec)
    if not force and image_exists(tag):
        logger.debug("sandbox image {} is up to date", tag)
    else:
        base = choose_base(spec.postgres)
        logger.info("building {} from {} ({} schema files)", tag, base, len(spec.all_files()))
        with tempfile.TemporaryDirectory(prefix="sandbox-context-") as ctx:
            stage_context(spec, Path(ctx))
            try:
                _docker(
                    "build",
                    "--force-rm",
                    "--build-arg",
                    f"BASE={base}",
                    "--build-arg",
                    f"PG_MAJOR={spec.postgres}",
                    "--build-arg",
                    f"DB_NAME={spec.name}",
                    "--build-arg",
                    f"DB_USER={spec.user}",
                    "--build-arg",
                    f"EXTRA_DBS={' '.join(e for e, _ in spec.extra)}",
                    "--label",
                    f"pgsandbox-runner.base={base}",
                    "-t",
                    tag,
                    ctx,
                    timeout=1200,
                )
            except ImageBuildError as e:
                raise ImageBuildError(map_error(spec, _schema_error(str(e)))) from None
    if also_tag:
        _docker("tag", tag, also_tag, timeout=60)
    return tag


def _schema_error(text: str) -> str:
    """The lines that say what went wrong in the user's files, not the whole build log."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # the builder colours its output
    lines = [ln for ln in text.splitlines() if "ERROR" in ln or "init-db:" in ln or "psql:" in ln]
    return "sandbox image build failed: " + ("\n".join(lines[-8:]) if lines else text)
