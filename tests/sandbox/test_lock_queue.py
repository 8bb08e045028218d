"""The guard against lock queues on shared objects (runner/sandbox/lock_queue.py), on a real server: a tenant
that holds a weak lock on a database and asks, from another session, to drop it makes every new connection
to it wait; with the guard, the drop's session is ended and the connections go through."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from runner.sandbox.docker import DockerSandbox
from runner.sandbox.lock_queue import HOLD_SECONDS, LockQueueGuard

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


def test_a_tenant_holding_a_shared_table_others_wait_for_is_ended_and_they_go_on(sandbox: DockerSandbox) -> None:
    """The second probe's residual: a strong lock on a shared table (a foreign key made to it, in a
    transaction kept open) granted, and every neighbour's INSERT waiting behind it until the record ends.
    With the guard, the holder's session is ended past HOLD_SECONDS and the INSERT goes through."""
    with psycopg.connect(sandbox.control.dsn("crm"), autocommit=True) as admin:
        admin.execute("CREATE TABLE IF NOT EXISTS held (k int PRIMARY KEY)")
        admin.execute("GRANT ALL ON held TO sandbox")
    with LockQueueGuard(sandbox.control.dsn("postgres"), shared=["crm"]) as guard:
        holder = psycopg.connect(sandbox.dsn("crm"))  # its transaction stays open
        holder.execute("LOCK TABLE held IN SHARE ROW EXCLUSIVE MODE")  # as a foreign key to it takes
        try:
            with psycopg.connect(sandbox.dsn("crm"), autocommit=True) as neighbour:
                t0 = time.monotonic()
                neighbour.execute("SET statement_timeout = '10s'")
                neighbour.execute("INSERT INTO held VALUES (1)")  # waits, then goes on once the holder is gone
                waited = time.monotonic() - t0
            # it went through (its wait starts after the holder's transaction did: no lower bound to it)
            assert waited < 5, waited
            for _ in range(100):  # the guard counts it once the server has said the session is gone
                if guard.ended:
                    break
                threading.Event().wait(0.05)
            assert guard.ended == 1
            with pytest.raises(psycopg.OperationalError):
                holder.execute("SELECT 1")
        finally:
            holder.close()
    with psycopg.connect(sandbox.control.dsn("crm"), autocommit=True) as admin:
        assert admin.execute("SELECT count(*) FROM held").fetchone() == (1,)
        admin.execute("DROP TABLE held")


def test_a_tenant_holding_a_shared_table_nobody_waits_for_is_left_alone(sandbox: DockerSandbox) -> None:
    """A harness's own DDL in a shared database (a table referencing another, at start) holds the same lock:
    nobody waiting, nothing is ended, however long its transaction."""
    with psycopg.connect(sandbox.control.dsn("crm"), autocommit=True) as admin:
        admin.execute("CREATE TABLE IF NOT EXISTS alone (k int PRIMARY KEY)")
        admin.execute("GRANT ALL ON alone TO sandbox")
    with LockQueueGuard(sandbox.control.dsn("postgres"), shared=["crm"]) as guard, \
            psycopg.connect(sandbox.dsn("crm")) as holder:
        holder.execute("LOCK TABLE alone IN SHARE ROW EXCLUSIVE MODE")
        threading.Event().wait(HOLD_SECONDS + 1.0)
        assert holder.execute("SELECT 1").fetchone() == (1,)
        assert guard.ended == 0
    with psycopg.connect(sandbox.control.dsn("crm"), autocommit=True) as admin:
        admin.execute("DROP TABLE alone")
