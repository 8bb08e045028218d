"""A run's container stops itself once no session of the runner's has held it for LEASE_SECONDS (the
entrypoint's lease): a run killed all at once, its janitor too, leaves no server running."""

from __future__ import annotations

import os
import time

import docker
import psycopg
import pytest

from runner.sandbox import docker as docker_sandbox
from runner.sandbox.docker import DockerSandbox

pytestmark = [pytest.mark.docker, pytest.mark.slow]

LEASE = 10  # seconds; the entrypoint looks every 5


def _status(cid: str) -> str:
    client = docker.from_env()
    try:
        return str(client.containers.get(cid).status)
    finally:
        client.close()


def test_a_sandbox_stops_once_the_runners_session_is_gone(sandbox_image: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(docker_sandbox, "LEASE_SECONDS", LEASE)
    with DockerSandbox(sandbox_image, "sandbox", run_id="pytest-lease", owner_pid=os.getpid()) as sb:
        cid, admin = sb.container_id(), sb.admin
        assert cid is not None and admin is not None
        with psycopg.connect(admin.local_dsn(), connect_timeout=10):  # the steward's session: the lease held
            time.sleep(LEASE + 6)
            assert _status(cid) == "running"
        # a harness's own sessions are no lease: only the runner's (pgsr_admin) keep the server
        with psycopg.connect(sb.dsn(), connect_timeout=10):
            deadline = time.monotonic() + LEASE + 30
            while _status(cid) == "running" and time.monotonic() < deadline:
                time.sleep(0.5)
            assert _status(cid) == "exited"
        logs = docker.from_env().containers.get(cid).logs().decode(errors="replace")
        assert "its run is gone; stopping" in logs


def test_a_kept_sandbox_holds_no_lease(sandbox_image: str) -> None:
    sb = DockerSandbox(sandbox_image, "sandbox", run_id="pytest-lease-kept", owner_pid=os.getpid(), keep=True)
    spec, _ = sb._container_spec("pw", "admin-pw")
    assert "SANDBOX_LEASE_SECONDS" not in spec.env  # `runner debug`'s container is the user's to stop
    plain = DockerSandbox(sandbox_image, "sandbox", run_id="pytest-lease", owner_pid=os.getpid())
    spec, _ = plain._container_spec("pw", "admin-pw")
    assert spec.env["SANDBOX_LEASE_SECONDS"] == str(docker_sandbox.LEASE_SECONDS)
    docker_sandbox.remove_socket_dir(plain._socket_home)
