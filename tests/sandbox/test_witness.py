"""The witness tells a sandbox that served a whole record from one that died, froze, restarted or lost
a database meanwhile, whatever the harness said."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from runner.sandbox.base import Sandbox
from runner.sandbox.docker import DockerSandbox
from runner.sandbox.witness import SandboxGone, Witness


@pytest.fixture
def witness(any_sandbox: Sandbox) -> Iterator[Witness]:
    assert any_sandbox.endpoint is not None
    with Witness(any_sandbox.endpoint.local_dsn()) as w:
        yield w


def test_same_server_same_databases_look_the_same(witness: Witness) -> None:
    first = witness.observe(["crm", "atlas"])
    assert first == witness.observe(["crm", "atlas"])
    assert first.started and first.databases == "atlas,crm"


def test_a_dropped_database_is_missed_and_one_made_again_is_the_harnesss_business(any_sandbox: Sandbox,
                                                                                 witness: Witness) -> None:
    """Dropped: the record ran without its database. Dropped and made again within the record: some harnesses
    reset that way, and the server that served it is the same."""
    with psycopg.connect(any_sandbox.dsn("postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier("witness_tmp")))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier("witness_tmp")))
        before = witness.observe(["witness_tmp"])
        conn.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier("witness_tmp")))
        assert witness.observe(["witness_tmp"]) != before  # gone
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier("witness_tmp")))
        assert witness.observe(["witness_tmp"]) == before
        conn.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier("witness_tmp")))


def test_a_healthy_postmaster_lets_the_knock_through(witness: Witness, monkeypatch: pytest.MonkeyPatch) -> None:
    """Asked through the postmaster too (a failed record), a healthy server looks the same; a password in
    the environment is not used for the knock (it stops at the server's request for one)."""
    monkeypatch.setenv("PGPASSWORD", "not-this-one")
    assert witness.observe(["crm"], through_postmaster=True) == witness.observe(["crm"])


def test_a_witness_stopped_by_another_slot_while_it_looks_says_the_sandbox_is_gone(
        witness: Witness, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by an independent probe: a slot that replaced the sandbox (it could not be tidied: the server had
    crashed) stopped the witness from its thread while another slot's look knocked at the dead server. That
    look then failed with an AttributeError (no session to close), the slot crashed and its worker died."""
    def knock_while_replaced() -> None:
        witness.stop()  # what the other slot's replacement does meanwhile
        raise SandboxGone("the server takes no new session: the database system is in recovery mode")

    monkeypatch.setattr(witness, "knock", knock_while_replaced)
    with pytest.raises(SandboxGone, match="recovery mode"):
        witness.observe(["crm"], through_postmaster=True)
    with pytest.raises(SandboxGone, match="closed"):
        witness.observe(["crm"])


def test_names_are_data_not_sql(witness: Witness) -> None:
    """Database names travel as a parameter: quotes and commas in one change nothing."""
    assert witness.observe(['x", "crm', "it's,{odd}"]).databases == ""


@pytest.mark.docker
def test_killed_paused_and_crashed_servers_are_caught(sandbox_image: str) -> None:
    with DockerSandbox(sandbox_image, "sandbox", run_id="pytest-witness", owner_pid=os.getpid()) as sb:
        assert sb.endpoint is not None
        cid = sb.container_id()
        assert cid is not None
        # A backend killed -9 inside: the postmaster restarts every session (crash recovery).
        with Witness(sb.endpoint.local_dsn()) as w:
            w.observe(["crm"])
            with psycopg.connect(sb.dsn("postgres"), autocommit=True) as victim:
                row = victim.execute("SELECT pg_backend_pid()").fetchone()
                assert row is not None
                subprocess.run(["docker", "exec", cid, "sh", "-c", f"kill -9 {row[0]}"], check=True,
                               capture_output=True)
            with pytest.raises(SandboxGone):
                for _ in range(50):  # the restart takes a moment to reach our session
                    w.observe(["crm"])
                    time.sleep(0.1)
        # Frozen: the socket stays open, nothing answers.
        _wait_login(sb)
        with Witness(sb.endpoint.local_dsn(), answer_seconds=1.0) as w:
            w.observe(["crm"])
            subprocess.run(["docker", "pause", cid], check=True, capture_output=True)
            try:
                t0 = time.monotonic()
                with pytest.raises(SandboxGone, match="in time"):
                    w.observe(["crm"])
                assert time.monotonic() - t0 < 5
                with pytest.raises(SandboxGone, match="closed"):  # never reused after half a conversation
                    w.observe(["crm"])
            finally:
                subprocess.run(["docker", "unpause", cid], check=True, capture_output=True)
        # Killed outright.
        with Witness(sb.endpoint.local_dsn()) as w:
            w.observe(["crm"])
            subprocess.run(["docker", "kill", cid], check=True, capture_output=True)
            with pytest.raises(SandboxGone):
                w.observe(["crm"])


@pytest.mark.docker
def test_a_crash_is_seen_through_the_postmaster_before_it_reaches_every_session(sandbox_image: str) -> None:
    """The postmaster signals its sessions one by one after a crash; one of them held (SIGSTOP) keeps it
    in its crash handling, where any new connection is refused before a password is asked for: a failed
    record's check sees the crash then, whichever sessions have heard of it."""
    with DockerSandbox(sandbox_image, "sandbox", run_id="pytest-witness", owner_pid=os.getpid()) as sb:
        assert sb.endpoint is not None
        cid = sb.container_id()
        assert cid is not None

        def signal(sig: str, pid: int) -> None:
            subprocess.run(["docker", "exec", cid, "sh", "-c", f"kill -{sig} {pid}"], check=True, capture_output=True)

        with Witness(sb.endpoint.local_dsn()) as w, psycopg.connect(sb.dsn("postgres"), autocommit=True) as held, \
                psycopg.connect(sb.dsn("postgres"), autocommit=True) as victim:
            w.observe(["crm"], through_postmaster=True)
            signal("STOP", held.pgconn.backend_pid)  # the postmaster waits for it (5 s, then SIGKILL)
            try:
                signal("KILL", victim.pgconn.backend_pid)
                # the server's own words depend on where in its crash handling the knock lands ("in recovery
                # mode", or the connection closed as the postmaster resets): either is a server taking none
                with pytest.raises(SandboxGone, match=r"takes no new session"):
                    for _ in range(50):  # the postmaster's own wake-up after the death
                        w.knock()  # needs no session of the witness's own
                        time.sleep(0.02)
                with pytest.raises(SandboxGone, match="takes no new session"):
                    w.observe(["crm"], through_postmaster=True)
            finally:
                signal("CONT", held.pgconn.backend_pid)

def _wait_login(sb: Sandbox) -> None:
    for _ in range(100):
        try:
            with psycopg.connect(sb.dsn("postgres"), connect_timeout=2):
                return
        except psycopg.OperationalError:
            time.sleep(0.1)
    raise AssertionError("the server did not come back")
