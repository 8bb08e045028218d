"""The sandbox image: locate its inputs, name it by their hash, build it only when missing.

Two ways to a base, one Dockerfile: an ordinary registry image (installs PostgreSQL at build),
or, where no registry answers, a base made from Debian packages by images/base/make-base.sh.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from loguru import logger

from runner.errors import ImageBuildError

REPO_NAME = "pgsandbox-runner/sandbox"
REGISTRY_BASE = "debian:bookworm-slim"
OFFLINE_BASE = "pgsandbox-runner/base:bookworm-pg15"
PG_MAJOR = "15"
SCHEMA_PATH = Path(__file__).resolve().parent.parent / "crm" / "schema.sql"
_CONTEXT_FILES = ("Dockerfile", "entrypoint.sh", "sandbox.conf")


def images_dir() -> Path:
    """images/ of the checkout this package runs from (or RUNNER_IMAGES_DIR)."""
    env = os.environ.get("RUNNER_IMAGES_DIR")
    candidates = [Path(env)] if env else []
    candidates.append(Path(__file__).resolve().parents[2] / "images")
    for c in candidates:
        if (c / "sandbox" / "Dockerfile").is_file():
            return c
    raise ImageBuildError(
        "cannot find images/sandbox/Dockerfile; run from a checkout or set RUNNER_IMAGES_DIR"
    )


def image_tag() -> str:
    """pgsandbox-runner/sandbox:<hash of Dockerfile, entrypoint, conf, schema, PG major>."""
    h = hashlib.sha256(PG_MAJOR.encode())
    src = images_dir() / "sandbox"
    for name in _CONTEXT_FILES:
        h.update(name.encode() + b"\0" + (src / name).read_bytes())
    h.update(b"schema.sql\0" + SCHEMA_PATH.read_bytes())
    return f"{REPO_NAME}:{h.hexdigest()[:12]}"


def _docker(*args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=check)
    except subprocess.CalledProcessError as e:
        raise ImageBuildError(f"docker {' '.join(args[:2])} failed: {(e.stderr or e.stdout).strip()[-2000:]}") from e
    except subprocess.TimeoutExpired as e:
        raise ImageBuildError(f"docker {' '.join(args[:2])} timed out after {timeout:.0f}s") from e
    except FileNotFoundError as e:
        raise ImageBuildError("the docker client is not installed") from e


def image_exists(ref: str) -> bool:
    return _docker("image", "inspect", ref, check=False, timeout=30).returncode == 0


def choose_base() -> str:
    """A registry base if one is here or can be pulled, else the offline Debian base."""
    forced = os.environ.get("RUNNER_BASE_IMAGE")
    if forced:
        return forced
    if image_exists(REGISTRY_BASE):
        return REGISTRY_BASE
    if image_exists(OFFLINE_BASE):
        return OFFLINE_BASE
    pulled = _docker("pull", "-q", REGISTRY_BASE, check=False, timeout=60)
    if pulled.returncode == 0:
        return REGISTRY_BASE
    logger.info("no registry answers ({}); building the base from Debian packages", pulled.stderr.strip()[:120])
    script = images_dir() / "base" / "make-base.sh"
    try:
        subprocess.run(["bash", str(script), OFFLINE_BASE, PG_MAJOR], check=True, timeout=900)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        raise ImageBuildError(f"{script} failed: {e}") from e
    return OFFLINE_BASE


def ensure_image(*, force: bool = False) -> str:
    """Return the sandbox image tag, building it first if it is not there."""
    tag = image_tag()
    if not force and image_exists(tag):
        logger.debug("sandbox image {} is up to date", tag)
        return tag
    base = choose_base()
    root = images_dir().parent  # the checkout; .dockerignore there admits only the image's inputs
    logger.info("building {} from {}", tag, base)
    _docker("build", "-q", "-f", str(images_dir() / "sandbox" / "Dockerfile"), "--build-arg", f"BASE={base}",
            "--build-arg", f"PG_MAJOR={PG_MAJOR}", "--label", f"pgsandbox-runner.base={base}", "-t", tag,
            str(root), timeout=1200)
    return tag
