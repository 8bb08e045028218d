"""What a worker's sandboxes are made with: resolved once from the config at the run's start (run/job.py)
and handed down in the worker's spec, so the sandbox layer reads these and never the whole config. Every
life of a worker's sandbox (its first, and each replacement) is made from the same settings."""

from __future__ import annotations

from dataclasses import dataclass

from runner.config import Config
from runner.sandbox import make_sandbox
from runner.sandbox.base import Launched, Sandbox
from runner.sandbox.schema import DatabaseSpec


def connections_for(slots: int) -> int:
    """PostgreSQL's max_connections for K slots: a harness may hold a few per database (the CRM holds
    two, one per database), plus the runner's own and headroom."""
    return max(100, 4 * slots + 20)


@dataclass(frozen=True)
class SandboxSettings:
    kind: str  # docker, local or external: what the run resolved `sandbox` to
    database: DatabaseSpec
    image: str | None  # docker's: the sandbox image built for this schema
    run_id: str
    owner_pid: int  # the supervisor's: a sandbox whose owner is gone is removed (sandbox/owner.py)
    slots: int  # records at once in it, each on databases of its own
    memory: str  # the container's memory limit for that many slots
    memory_given: bool  # the config set it: the worker does not raise it for larger databases
    cpus: float
    tmpfs: bool
    network: str
    dsn: str | None  # an external server's
    recreate: bool  # reset: recreate: templates of every database, each record on fresh copies

    @property
    def connections(self) -> int:
        return connections_for(self.slots)

    def make(self, name_hint: str, launched: Launched | None = None) -> Sandbox:
        """A sandbox of these settings, not started; `launched`: its container started ahead (Prestart)."""
        return make_sandbox(
            self.kind,
            self.database,
            image=self.image,
            run_id=self.run_id,
            owner_pid=self.owner_pid,
            name_hint=name_hint,
            memory=self.memory,
            cpus=self.cpus,
            dsn=self.dsn,
            tmpfs=self.tmpfs,
            connections=self.connections,
            network=self.network,
            launched=launched,
        )


def sandbox_settings(
    cfg: Config,
    database: DatabaseSpec,
    *,
    kind: str,
    image: str | None,
    run_id: str,
    owner_pid: int,
    slots: int,
) -> SandboxSettings:
    return SandboxSettings(
        kind=kind,
        database=database,
        image=image,
        run_id=run_id,
        owner_pid=owner_pid,
        slots=slots,
        memory=cfg.sandbox_memory(slots),
        memory_given=cfg.container_memory is not None,
        cpus=cfg.container_cpus,
        tmpfs=cfg.container_tmpfs,
        network=cfg.sandbox_network(),
        dsn=cfg.dsn,
        recreate=cfg.harness.reset == "recreate",
    )
