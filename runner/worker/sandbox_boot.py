"""One life of a worker's sandbox, booted: the server started (one launched ahead of the worker, or a
fresh one), locked down, its templates taken, every slot's role and databases made (or left to be made
in the background, for the first life), and the runner's sessions that watch it (the steward, the
witness, the lock-queue guard). keeper.py holds the lives one after another."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loguru import logger

from runner.config import SLOT_DATA_MIB
from runner.errors import SandboxBootError
from runner.harness.base import sandbox_info, slot_database
from runner.sandbox.base import (
    Launched,
    Sandbox,
    copy_databases,
    databases_bytes,
    new_password,
    snapshot_database,
    template_name,
)
from runner.sandbox.lock_queue import LockQueueGuard
from runner.sandbox.settings import SandboxSettings
from runner.sandbox.tenancy import Steward
from runner.sandbox.witness import Witness

Copies = list[tuple[str | None, list[tuple[str, str]]]]  # per slot from 1: (owner, [(template, copy)])


@dataclass
class Booted:
    sandbox: Sandbox
    steward: Steward
    witness: Witness
    guard: LockQueueGuard | None  # with neighbour slots only: no session of theirs queues a strong lock
    # what the first life leaves to the background (keeper.copy_in_background): slot k's copies, and its
    # role (slot, its databases), made just before them
    copies: Copies = field(default_factory=list)
    roles: list[tuple[int, list[str]]] = field(default_factory=list)


def new_sandbox(spec: Any, generation: int, launched: Launched | None = None) -> Sandbox:
    """The sandbox a worker (its WorkerSpec) has in its `generation`-th life, not started: the worker
    starts it, or the supervisor launches the first one ahead (engine/prestart.py)."""
    settings: SandboxSettings = spec.sandbox
    return settings.make(f"w{spec.worker}g{generation}", launched)


def main_db(settings: SandboxSettings, sb: Sandbox) -> str:
    return getattr(sb, "dbname", None) or settings.database.name


def own_databases(settings: SandboxSettings, sb: Sandbox, slot: int) -> list[str]:
    """The slot's databases but those every slot shares (which no slot resets nor cancels)."""
    assert sb.endpoint is not None
    return [
        d.name
        for n, d in sandbox_info(sb, settings.database, main_db(settings, sb), slot).databases.items()
        if n not in settings.database.shared
    ]


def boot(spec: Any, generation: int, *, defer: bool) -> Booted:
    """The worker's sandbox in its `generation`-th life (from 1), with every slot's role and databases (and
    templates for `reset: recreate`); `defer`: slots 1.. get theirs later, in the background."""
    settings: SandboxSettings = spec.sandbox
    sb = _started(spec, generation, new_sandbox(spec, generation, spec.launched if generation == 1 else None))
    steward: Steward | None = None
    witness: Witness | None = None
    guard: LockQueueGuard | None = None
    try:
        assert sb.endpoint is not None
        db = settings.database
        steward = Steward(
            sb.control.local_dsn(),
            db.user,
            sb.endpoint.password,
            shared=db.shared,
            connections=settings.connections,
            slots=spec.slots,
            enabled=sb.admin is not None,
        )
        steward.start()
        # Templates while nobody is connected, then every slot's copies of them, by FILE_COPY (a
        # pair took 2-7 s by WAL once other slots ran). The first sandbox's copies are made in the
        # background, slot after slot, each slot ready when its own are (4 workers x 63 slots took
        # 18 s at boot, 4 % of the headline's wall); a replacement's are made here, all at once, and
        # it is published only then: a slot that looked at it earlier would find no database of its own.
        own = own_databases(settings, sb, 0)
        steward.lock_down(own)
        slot_dbs = own if spec.slots > 1 else []
        if slot_dbs and not settings.memory_given:
            _make_room(sb, slot_dbs, spec.slots)
        for name in own if settings.recreate else slot_dbs:
            snapshot_database(sb.control, name)
            steward.neutralize(template_name(name))
        copies: Copies = []
        roles: list[tuple[int, list[str]]] = []
        for k in range(1, spec.slots):
            mine = [slot_database(d, k) for d in slot_dbs]
            roles.append((k, mine))
            copies.append(
                (steward.owner(k), [(template_name(d), new) for d, new in zip(slot_dbs, mine, strict=True)])
            )
        if not defer:
            for k, mine in roles:
                steward.provision(k, mine, new_password())
            copy_databases(sb.control, copies, adopting(steward, copies))
        witness = Witness(sb.control.local_dsn())
        witness.start()
        if steward.enabled and spec.slots > 1:
            guard = LockQueueGuard(
                sb.control.local_dsn(),
                name=f"lock-queue-guard-{spec.worker}",
                shared=settings.database.shared,
            )
            guard.start()
    except BaseException:
        for started in (guard, witness, steward):
            if started is not None:
                started.stop()
        sb.stop()
        raise
    # each deferred slot's role is made just before its copies, in the background too: 63 roles, each with
    # its password hashed by the server, took ~0.6 s on the way to the worker's first record
    return Booted(sb, steward, witness, guard, copies if defer else [], roles if defer else [])


def adopting(steward: Steward, copies: Copies) -> Callable[[int], bool]:
    """After slot i + 1's copies are made: its objects are its own, its state the one tidy keeps."""

    def done(i: int) -> bool:
        for _, new in copies[i][1]:
            steward.adopt(i + 1, new)
        steward.settle(i + 1)
        return True

    return done


def _started(spec: Any, generation: int, sb: Sandbox) -> Sandbox:
    """`sb` started; one launched ahead of this worker that does not come up (its container removed
    meanwhile, say) gives way to a fresh one, once."""
    ahead = sb.launched is not None
    try:
        sb.start()
        return sb
    except BaseException as e:
        sb.stop()
        if not ahead or not isinstance(e, SandboxBootError):
            raise
        logger.warning("the sandbox started ahead of this worker failed ({}); starting a new one", e)
    fresh = new_sandbox(spec, generation, None)
    try:
        fresh.start()
    except BaseException:
        fresh.stop()
        raise
    return fresh


def _make_room(sb: Sandbox, names: list[str], slots: int) -> None:
    """Databases larger than the default limit allows for, in memory, K - 1 copies and templates
    each: raise the container's limit before copying (the server killed for memory mid-run would
    take every slot's record with it)."""
    assert sb.endpoint is not None
    if not sb.data_in_memory():
        return
    size = databases_bytes(sb.control, names)
    # a quarter more for what records write
    extra = int(size * slots * 1.25) - SLOT_DATA_MIB * 2**20 * (slots - 1)
    if extra > 0 and sb.raise_memory(extra):
        logger.info(
            "sandbox memory limit raised by {} MiB: {} slots' copies of {} MiB of databases in memory",
            extra // 2**20,
            slots,
            size // 2**20,
        )
