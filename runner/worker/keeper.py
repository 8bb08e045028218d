"""A worker's sandbox and what keeps it: its boots (sandbox_boot.py: every slot's role and databases,
templates for `reset: recreate`), the witness that tells whether one live server served a whole record,
the steward that keeps each slot a tenant of its own (sandbox/tenancy.py), its replacement when it dies
(once, for all slots), and the per-slot chores (reset, tidy, cancel).

Its slots share it: a slot that finds it dead replaces it under `lock` unless another already did (the
`generation` it saw is gone); readers take `sandbox` once and work on that, since it may be swapped
under them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg
from loguru import logger

from runner.errors import WorkerClosing
from runner.harness.base import SandboxInfo, sandbox_info, slot_database
from runner.sandbox.base import Sandbox, cancel_queries, copy_databases, new_password, recreate_database
from runner.sandbox.lock_queue import LockQueueGuard
from runner.sandbox.tenancy import Steward, TenantStuck
from runner.sandbox.witness import Incarnation, SandboxGone, Witness
from runner.wire.messages import SandboxReplaced
from runner.worker import sandbox_boot
from runner.worker.turns import Turns


class SandboxKeeper:
    """A worker's sandbox through its lives (sandbox_boot.py boots each), shared by its slots."""

    def __init__(self, spec: Any, inbox: Any, *, inline: bool) -> None:
        """`spec`: the worker's (WorkerSpec); `inline`: one slot on the main thread (no background copies)."""
        self.spec, self.settings, self.inbox, self.inline = spec, spec.sandbox, inbox, inline
        self.sandbox: Sandbox | None = None
        self.witness: Witness | None = None  # the worker's own session: did the sandbox serve a whole record?
        self.steward: Steward | None = None  # the runner's superuser session: each slot a tenant of its own
        # with neighbour slots: no session of theirs queues a strong lock
        self.guard: LockQueueGuard | None = None
        self.turns = Turns()  # every slot at once, or a record run again alone
        self.generation = 0
        self.lock = threading.Lock()  # one replacement of the sandbox at a time
        self.closed = False  # the worker is stopping: its sandbox is removed and never replaced
        # slot k's databases exist in the first sandbox once copied[k] is set (copied in the background)
        self.copied = [threading.Event() for _ in range(spec.slots)]
        # ... and are the slot's: copied, adopted and settled whole (a copier stopped midway leaves one
        # that exists but its role does not own: its records met `permission denied`, as their own failure)
        self.whole = [slot == 0 for slot in range(spec.slots)]
        self.deferred: sandbox_boot.Copies = []  # (owner, [(template, copy)]) per slot from 1
        self.deferred_roles: list[tuple[int, list[str]]] = []  # (slot, its databases): made before its copies

    def boot(self) -> None:
        """A new sandbox with every slot's role and databases (and templates for `reset: recreate`)."""
        b = sandbox_boot.boot(self.spec, self.generation + 1, defer=self.generation == 0 and not self.inline)
        self.sandbox, self.witness, self.steward, self.guard = b.sandbox, b.witness, b.steward, b.guard
        self.deferred, self.deferred_roles = b.copies, b.roles
        self.generation += 1
        if self.generation > 1:
            for e in self.copied:  # a replacement has them all (and the background copier stops)
                e.set()

    def copy_in_background(self) -> None:
        """The first sandbox's slot databases, slot 1 first; stops at a replacement (which copies its own)."""
        self.copied[0].set()

        sb, steward = self.sandbox, self.steward
        adopt = sandbox_boot.adopting(steward, self.deferred) if steward is not None else (lambda i: True)

        def done(i: int) -> bool:  # slot i + 1 has its databases; go on unless the sandbox was replaced
            if self.generation != 1:
                return False
            adopt(i)
            self.whole[i + 1] = True
            self.copied[i + 1].set()
            return self.generation == 1

        try:
            if self.generation == 1 and sb is not None and sb.endpoint is not None:
                copy_databases(sb.control, self.deferred, done, before=self._provisioning(steward))
        except Exception as e:  # the sandbox died: the slot that finds it so replaces it, copies and all
            logger.warning("copying the slots' databases stopped: {}", e)
        finally:
            for ev in self.copied:  # a slot still waiting attaches now and finds out
                ev.set()

    def _provisioning(self, steward: Steward | None) -> Callable[[int], None] | None:
        """Before the deferred slot i + 1's copies: its role (the owner they are made for)."""
        if steward is None:
            return None

        def provision(i: int) -> None:
            slot, databases = self.deferred_roles[i]
            steward.provision(slot, databases, new_password())

        return provision

    def wait_copied(self, slot: int) -> None:
        """Until the slot's databases are whole in the current sandbox: where the background copier stopped
        before they were, the sandbox is replaced (a replacement makes every slot's), never used as it is."""
        self.copied[slot].wait()
        if self.generation == 1 and not self.whole[slot]:
            self.replace_sandbox(f"slot {slot}'s databases were not copied and handed over whole", 1)

    def main_db(self, sb: Sandbox | None = None) -> str:
        sb = sb or self.sandbox
        return sandbox_boot.main_db(self.settings, sb) if sb is not None else self.settings.database.name

    def slot_info(self, slot: int, sb: Sandbox | None = None) -> SandboxInfo:
        sb = sb or self.sandbox
        assert sb is not None and sb.endpoint is not None
        steward = self.steward
        login = steward.login(slot) if steward is not None and sb is self.sandbox else None
        return sandbox_info(
            sb,
            self.settings.database,
            self.main_db(sb),
            slot,
            (login.user, login.password) if login is not None else None,
        )

    def own_databases(self, slot: int, sb: Sandbox | None = None) -> list[str]:
        """The slot's databases but those every slot shares (which no slot resets nor cancels)."""
        sb = sb or self.sandbox
        assert sb is not None
        return sandbox_boot.own_databases(self.settings, sb, slot)

    def sandbox_id(self) -> str | None:
        return self.sandbox.id if self.sandbox else None

    def stop(self) -> None:
        if self.guard is not None:
            self.guard.stop()
            self.guard = None
        if self.witness is not None:
            self.witness.stop()
            self.witness = None
        if self.steward is not None:
            self.steward.stop()
            self.steward = None
        if self.sandbox is not None:
            self.sandbox.stop()
            self.sandbox = None

    def close(self) -> None:
        """The worker stops: its sandbox removed, and slots still running their records (whose databases
        go with it) find WorkerClosing rather than a replacement."""
        self.closed = True
        with self.lock:  # after a replacement under way, which the closed flag then stops at its end
            self.stop()

    def replace_sandbox(self, why: str, seen: int) -> None:
        """A new sandbox, unless another slot already replaced the one `seen` (a generation); WorkerClosing
        once the worker is stopping."""
        with self.lock:
            if self.closed:
                raise WorkerClosing(f"sandbox not replaced ({why}): the worker is stopping")
            if self.generation != seen:
                return
            old = self.sandbox.id if self.sandbox else "?"
            logger.warning("sandbox {} is gone ({}); starting a new one", old, why)
            self.stop()
            self.boot()
            assert self.sandbox is not None
            self.inbox.put(SandboxReplaced(self.spec.worker, old, self.sandbox.id, why[:200]))

    def incarnation(self, slot: int, *, failed: bool = False) -> tuple[int, Incarnation] | None:
        """Which sandbox (generation) and which server incarnation serves this slot's databases now; None
        when it does not answer. Equal before and after a record exactly when one live server served it.
        `failed`: after a record that failed, which may be the first sign of a death (witness.py)."""
        generation, witness, sb = self.generation, self.witness, self.sandbox  # a slot may be replacing them
        if witness is None or sb is None:
            return None
        try:
            names = [d.name for d in self.slot_info(slot, sb).databases.values()]
            return generation, witness.observe(names, through_postmaster=failed)
        except SandboxGone as e:
            logger.warning("slot {}: sandbox {} did not pass the witness check: {}", slot, sb.id, e)
            return None

    def sandbox_dead(self) -> bool:
        sb = self.sandbox  # another slot may be replacing it right now
        try:
            return sb is None or not sb.alive()
        except Exception:  # cannot tell: the caller's retry path finds out (replace_sandbox waits its turn)
            return True

    # another slot may be replacing the sandbox meanwhile: read it once
    def reset_slot(self, slot: int) -> None:
        """The slot's own databases afresh from their snapshots, its own again (`reset: recreate`)."""
        sb, steward = self.sandbox, self.steward
        if sb is None or sb.endpoint is None or steward is None:
            return
        for name in self.own_databases(0, sb):
            mine = slot_database(name, slot)
            recreate_database(sb.control, mine, template=name, owner=steward.owner(slot))
            steward.adopt(slot, mine)

    def tidy(self, slot: int, seen: int) -> None:
        """After a slot's chunk: what its records changed beyond their databases put back (tenancy.py); a
        slot that cannot be put back costs the sandbox (`seen`: the generation it ran on)."""
        steward = self.steward
        if steward is None or self.generation != seen:
            return
        try:
            undone = steward.tidy(slot)
        except TenantStuck as e:
            self.replace_sandbox(str(e), seen)
            return
        except (psycopg.OperationalError, psycopg.InterfaceError) as e:
            # dead, frozen or too slow to answer: either way the slot's next record cannot be trusted to it
            self.replace_sandbox(f"slot {slot} could not be tidied: {str(e).strip()[:120]}", seen)
            return
        if undone:
            logger.warning(
                "slot {}: its last records left changes beyond their databases: {}", slot, "; ".join(undone)
            )

    def starved(self, slot: int, since: float, until: float) -> str | None:
        """What the server ran out of for this slot's sessions meanwhile (tenancy.Steward.starved)."""
        steward = self.steward
        if steward is None:
            return None
        try:
            return steward.starved(slot, since, until)
        except (psycopg.OperationalError, psycopg.InterfaceError):
            return None

    def cancel_queries(self, slot: int, *, terminate: bool = False) -> None:
        if (sb := self.sandbox) is not None and sb.endpoint is not None:
            role = self.steward.own_role(slot) if self.steward is not None else None
            cancel_queries(sb.control, self.own_databases(slot, sb), role, terminate=terminate)
