"""Sandboxes: one PostgreSQL per worker. `make_sandbox` builds the kind the run resolved to."""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.errors import SandboxBootError

if TYPE_CHECKING:  # not imported with the package: a run's janitor (run/janitor.py) reads sandbox/owner.py
    # alone, and psycopg was most of its start (~0.15 s of CPU, once per run)
    from runner.sandbox.base import Launched, Sandbox
    from runner.sandbox.schema import DatabaseSpec


def resolve_kind(requested: str) -> str:
    """auto -> docker when an engine answers, else local (when binaries exist). docker without an
    engine fails here, naming it, before any image build or worker start."""
    from runner.sandbox.docker import engine_address, engine_answers

    if requested == "docker" and not engine_answers():
        raise SandboxBootError(
            f"--sandbox docker: no Docker engine answers at {engine_address()}: start one "
            "(`make engine`), or use --sandbox local"
        )
    if requested != "auto":
        return requested
    from runner.sandbox.local import find_bindir

    if engine_answers():
        return "docker"
    if find_bindir() is not None:
        return "local"
    raise SandboxBootError(
        "no Docker engine answers and no PostgreSQL binaries were found: run `make engine`, "
        "apt-get install postgresql, or pip install 'pgsandbox-runner[embedded]'"
    )


def make_sandbox(
    kind: str,
    spec: DatabaseSpec,
    *,
    image: str | None,
    run_id: str,
    owner_pid: int,
    name_hint: str,
    memory: str = "256m",
    cpus: float = 1.0,
    dsn: str | None = None,
    keep: bool = False,
    tmpfs: bool = False,
    connections: int = 100,
    network: str = "bridge",
    launched: Launched | None = None,
) -> Sandbox:
    """`launched`: a docker container started ahead of this sandbox's owner (Prestart), which start() takes
    over instead of starting one."""
    if kind == "docker":
        from runner.sandbox.docker import DockerSandbox

        if image is None:
            raise SandboxBootError("docker sandbox without an image")
        sb = DockerSandbox(
            image,
            spec.user,
            run_id=run_id,
            owner_pid=owner_pid,
            memory=memory,
            cpus=cpus,
            keep=keep,
            name_hint=name_hint,
            tmpfs=tmpfs,
            connections=connections,
            network=network,
        )
        sb.launched = launched
        return sb
    if kind == "local":
        from runner.sandbox.local import LocalSandbox

        return LocalSandbox(spec, name_hint=name_hint, keep=keep, connections=connections)
    if kind == "external":
        from runner.sandbox.external import ExternalSandbox

        if not dsn:
            raise SandboxBootError("the external sandbox needs --dsn")
        return ExternalSandbox(dsn)
    raise SandboxBootError(f"unknown sandbox kind {kind!r}")
