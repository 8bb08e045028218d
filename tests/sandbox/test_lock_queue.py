"""The guard against lock queues on shared objects (runner/sandbox/lock_queue.py), on a real server: a tenant
that holds a weak lock on a database and asks, from another session, to drop it makes every new connection
to it wait; with the guard, the drop's session is ended and the connections go through."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import psycopg
import pytest

from runner.sandbox.docker import DockerSandbox
from runner.sandbox.lock_queue import LockQueueGuard

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def sandbox(sandbox_image: str) -> Iterator[DockerSandbox]:
    with DockerSandbox(sandbox_image, "sandbox", run_id="pytest-lockqueue", owner_pid=os.getpid()) as sb:
        yield sb


def _queue(sb: DockerSandbox, *, wait: bool = True
           ) -> tuple[psycopg.Connection[tuple[object, ...]], threading.Thread, list[BaseException]]:
    """The attack, as a tenant (the sandbox's non-superuser role): a weak lock on `postgres` held open, and a
    DROP DATABASE postgres that waits on it (from a session on another database), in a thread. Watched from
    a session opened first, on another database: once the drop waits, a new one to `postgres` would wait
    too, the runner's superuser's as well. `wait`: until the drop waits (a guard may end it first)."""
    with psycopg.connect(sb.control.dsn("crm"), autocommit=True) as admin:
        holder = psycopg.connect(sb.dsn("postgres"))  # its transaction stays open
        holder.execute("ALTER ROLE sandbox IN DATABASE postgres SET work_mem = '64kB'")
        failed: list[BaseException] = []

        def drop() -> None:
            try:
                with psycopg.connect(sb.dsn("crm"), autocommit=True) as conn:
                    conn.execute("DROP DATABASE postgres")
            except psycopg.Error as e:
                failed.append(e)

        dropper = threading.Thread(target=drop, daemon=True)
        dropper.start()
        if not wait:
            return holder, dropper, failed
        for _ in range(400):
            if admin.execute("SELECT count(*) FROM pg_locks WHERE NOT granted AND database = 0 "
                             "AND mode = 'AccessExclusiveLock'").fetchone() == (1,):
                return holder, dropper, failed
            threading.Event().wait(0.05)
        holder.close()  # the drop, if it ever came, goes on to its ownership check and fails
        dropper.join(10)
        raise AssertionError("the drop never queued")


def test_without_the_guard_a_queued_drop_holds_every_new_connection(sandbox: DockerSandbox) -> None:
    holder, dropper, _ = _queue(sandbox)
    try:
        with pytest.raises(psycopg.OperationalError):  # it waits for as long as the holder's transaction lasts
            psycopg.connect(sandbox.dsn("postgres"), connect_timeout=2).close()
    finally:
        holder.close()  # the drop goes on to its ownership check, and fails
        dropper.join(10)


def test_the_guard_ends_the_queued_session_and_new_connections_go_through(sandbox: DockerSandbox) -> None:
    with LockQueueGuard(sandbox.control.dsn("postgres")) as guard:
        holder, dropper, failed = _queue(sandbox, wait=False)
        try:
            dropper.join(10)
            assert not dropper.is_alive() and isinstance(failed[0], psycopg.errors.AdminShutdown), failed
            for _ in range(100):  # the guard counts it once the server has said the session is gone
                if guard.ended:
                    break
                threading.Event().wait(0.05)
            assert guard.ended == 1
            with psycopg.connect(sandbox.dsn("postgres"), connect_timeout=10) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
            # the holder's own session, waiting on nothing, is left alone
            assert holder.execute("SELECT 1").fetchone() == (1,)
        finally:
            holder.close()


def test_the_guard_stops_promptly_on_a_frozen_server(sandbox: DockerSandbox) -> None:
    """A paused container answers nothing: the guard's look then waits forever, and its stop (the keeper's,
    as the frozen sandbox is replaced) must not wait with it."""
    import subprocess
    import time

    cid = sandbox.container_id()
    assert cid is not None
    guard = LockQueueGuard(sandbox.control.dsn("postgres"))
    guard.start()
    subprocess.run(["docker", "pause", cid], check=True, capture_output=True)
    try:
        time.sleep(0.5)  # its next look is under way, and unanswered
        t0 = time.monotonic()
        guard.stop()
        assert time.monotonic() - t0 < 8
    finally:
        subprocess.run(["docker", "unpause", cid], check=True, capture_output=True)
