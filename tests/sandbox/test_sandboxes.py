from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker
import psycopg
import pytest

from runner.errors import SandboxBootError
from runner.sandbox.base import LABEL, Sandbox, socket_dsn
from runner.sandbox.docker import DockerSandbox, remove_stale
from runner.sandbox.external import ExternalSandbox
from runner.sandbox.owner import owner_identity


def _tables(sb: Sandbox) -> set[str]:
    with psycopg.connect(sb.dsn("crm")) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
    return {r[0] for r in rows}


def test_schema_is_there_on_both_backends(any_sandbox: Sandbox) -> None:
    assert {"accounts", "contacts", "opportunities", "quotes", "quote_lines", "cases", "activities"} <= _tables(
        any_sandbox)
    with psycopg.connect(any_sandbox.dsn("atlas")) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == ("atlas",)


def test_wrong_password_is_rejected(any_sandbox: Sandbox) -> None:
    assert any_sandbox.endpoint is not None
    bad = psycopg.conninfo.make_conninfo(any_sandbox.dsn(), password="not-the-password")
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(bad, connect_timeout=5)


@pytest.mark.docker
def test_container_publishes_on_loopback_only_and_is_removed(sandbox_image: str) -> None:
    client = docker.from_env()
    with DockerSandbox(sandbox_image, "sandbox", run_id="pytest-loopback", owner_pid=os.getpid()) as sb:
        cid = sb.container_id()
        assert cid is not None
        ports = client.containers.get(cid).attrs["NetworkSettings"]["Ports"]["5432/tcp"]
        assert {p["HostIp"] for p in ports} == {"127.0.0.1"}
        assert sb.endpoint is not None and sb.endpoint.host == "127.0.0.1"
        assert sb.alive()
    assert not client.containers.list(all=True, filters={"id": cid})


@pytest.mark.docker
def test_each_container_gets_its_own_password(sandbox_image: str) -> None:
    with DockerSandbox(sandbox_image, "sandbox", run_id="pytest-pw", owner_pid=os.getpid()) as a, \
            DockerSandbox(sandbox_image, "sandbox", run_id="pytest-pw", owner_pid=os.getpid()) as b:
        assert a.endpoint and b.endpoint and a.endpoint.password != b.endpoint.password
        cross = psycopg.conninfo.make_conninfo(a.dsn(), password=b.endpoint.password)
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(cross, connect_timeout=5)


@pytest.mark.docker
def test_stale_containers_of_dead_owners_are_removed(sandbox_image: str) -> None:
    client = docker.from_env()
    mine = {"label": f"{LABEL}.run=pytest-stale"}
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    orphan = DockerSandbox(sandbox_image, "sandbox", run_id="pytest-stale", owner_pid=owner.pid)
    orphan.start()
    assert orphan.endpoint is not None and orphan.endpoint.socket_dir is not None
    remove_stale()
    assert client.containers.list(all=True, filters=mine)  # its owner lives: kept
    owner.kill()
    owner.wait()
    assert remove_stale() >= 1
    assert not client.containers.list(all=True, filters=mine)
    assert not os.path.exists(os.path.dirname(orphan.endpoint.socket_dir))  # its socket's directory too


@pytest.mark.docker
def test_the_runner_reaches_a_container_through_its_socket_with_the_password(sandbox_image: str) -> None:
    with DockerSandbox(sandbox_image, "sandbox", run_id="pytest-socket", owner_pid=os.getpid()) as sb:
        e = sb.endpoint
        assert e is not None and e.socket_dir is not None
        home = os.path.dirname(e.socket_dir)
        assert stat.S_IMODE(os.stat(home).st_mode) == 0o700  # only this user reaches the socket
        assert os.path.exists(os.path.join(e.socket_dir, ".s.PGSQL.5432"))
        with psycopg.connect(e.local_dsn("crm"), connect_timeout=5) as conn:
            assert conn.execute("SELECT inet_server_addr()").fetchone() == (None,)  # a Unix socket: no TCP
        with psycopg.connect(e.dsn("crm"), connect_timeout=5) as conn:  # users still get host and port
            assert conn.execute("SELECT inet_server_addr()").fetchone() != (None,)
        for user, password in (("sandbox", "not-the-password"), ("postgres", "")):
            with pytest.raises(psycopg.OperationalError):  # the socket asks for the password, as TCP does
                psycopg.connect(socket_dsn(e.socket_dir, user, password, "crm"), connect_timeout=5)
    assert not os.path.exists(home)


@pytest.mark.docker
def test_a_runs_sandboxes_run_no_healthcheck_and_a_kept_one_keeps_the_images(sandbox_image: str) -> None:
    """The image's HEALTHCHECK execs pg_isready through runc every 2 s in every container: CPU the
    runner, which probes its sandboxes itself, has no use for. `runner debug` keeps it for `docker ps`."""
    client = docker.from_env()
    image_check = client.images.get(sandbox_image).attrs["Config"]["Healthcheck"]["Test"]
    assert image_check[0] == "CMD-SHELL" and "pg_isready" in image_check[1]
    with DockerSandbox(sandbox_image, "sandbox", run_id="pytest-health", owner_pid=os.getpid()) as sb:
        config = client.containers.get(f"pgsr-{sb.id}").attrs["Config"]
        assert config["Healthcheck"]["Test"] == ["NONE"]
    kept = DockerSandbox(sandbox_image, "sandbox", run_id="pytest-health", owner_pid=os.getpid(), keep=True)
    try:
        with kept:
            assert client.containers.get(f"pgsr-{kept.id}").attrs["Config"]["Healthcheck"]["Test"] == image_check
    finally:
        client.containers.get(f"pgsr-{kept.id}").remove(force=True, v=True)


def test_kept_containers_and_remote_engines_get_no_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kept container (`runner debug`) outlives the run, and would leave its socket's directory behind;
    a remote engine would mount a directory of its own machine."""
    assert not DockerSandbox("img", "sandbox", run_id="pytest-socket", owner_pid=os.getpid(), keep=True).socket
    monkeypatch.setenv("DOCKER_HOST", "tcp://10.0.0.9:2376")
    assert not DockerSandbox("img", "sandbox", run_id="pytest-socket", owner_pid=os.getpid()).socket
    monkeypatch.delenv("DOCKER_HOST")
    assert DockerSandbox("img", "sandbox", run_id="pytest-socket", owner_pid=os.getpid()).socket


@pytest.mark.docker
def test_a_socket_directory_the_server_cannot_write_leaves_tcp(sandbox_image: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A runner inside a container mounts a path the engine creates itself, root's: the server must
    still start (PostgreSQL stops on a socket directory it cannot write), and the runner use TCP."""
    monkeypatch.setattr(os, "chmod", lambda *a, **k: None)  # the directory stays 0755, root's
    with DockerSandbox(sandbox_image, "sandbox", run_id="pytest-socket", owner_pid=os.getpid()) as sb:
        assert sb.endpoint is not None and sb.endpoint.socket_dir is None
        assert sb.endpoint.local_dsn("crm") == sb.endpoint.dsn("crm")
        with psycopg.connect(sb.endpoint.local_dsn("crm"), connect_timeout=5) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)


@pytest.mark.docker
def test_sweeps_racing_on_the_same_stale_containers_all_end_without_error(sandbox_image: str) -> None:
    """Parallel runs each sweep at start: one asked to remove a container another is removing got a
    409 ("removal already in progress") that stopped its run (seen in CI under pytest-xdist)."""
    client = docker.from_env()
    owner = subprocess.Popen([sys.executable, "-c", "pass"])
    dead = owner_identity(owner.pid)
    owner.wait()
    labels = {LABEL: "1", f"{LABEL}.run": "pytest-race", f"{LABEL}.owner": dead}
    for _ in range(6):  # running, so a forced removal takes long enough to be caught midway
        client.containers.run(sandbox_image, entrypoint=["sleep", "300"], labels=labels, detach=True)
    with ThreadPoolExecutor(4) as pool:
        removed = list(pool.map(lambda _: remove_stale(), range(4)))
    assert not client.containers.list(all=True, filters={"label": f"{LABEL}.run=pytest-race"})
    assert max(removed) >= 1


def test_a_container_already_being_removed_is_let_go_quietly_and_another_failure_is_said() -> None:
    """At a run's end its sweep and the workers remove the same containers: the loser's 409 ("removal ...
    is already in progress") is no failure, and said as one it was noise in every stopped run's log."""
    import requests
    from docker.errors import APIError
    from loguru import logger

    def refusal(status: int, words: str) -> APIError:
        response = requests.Response()
        response.status_code = status
        return APIError(f"{status} Client Error", response=response, explanation=words)

    class Container:
        def __init__(self, error: APIError) -> None:
            self.error, self.id = error, "c0ffee"

        def remove(self, **_: Any) -> None:
            raise self.error

    said: list[str] = []
    sink = logger.add(lambda m: said.append(m.record["message"]), level="WARNING")
    try:
        for error in (refusal(409, "removal of container c0ffee is already in progress"),
                      refusal(500, "driver failed removing its root filesystem")):
            sb = DockerSandbox("pgsandbox-runner/none", "sandbox", run_id="pytest-409", owner_pid=os.getpid())
            sb._container = Container(error)
            sb.stop()
            assert sb._container is None
    finally:
        logger.remove(sink)
    assert len(said) == 1 and "driver failed" in said[0], said


@pytest.mark.docker
def test_missing_image_is_a_boot_error() -> None:
    from runner.sandbox.docker import engine_answers

    if not engine_answers():
        pytest.skip("no engine")
    with pytest.raises(SandboxBootError, match="missing"), \
            DockerSandbox("pgsandbox-runner/sandbox:does-not-exist", "sandbox", run_id="pytest-x",
                          owner_pid=os.getpid()):
        pass


def test_external_sandbox_uses_a_running_database(local_sandbox: Sandbox) -> None:
    with ExternalSandbox(local_sandbox.dsn("crm")) as ext:
        assert "accounts" in _tables(ext)
        assert "***" in ext.describe() and ext.endpoint is not None
        assert ext.endpoint.password not in ext.describe()


def test_external_sandbox_unreachable_is_a_boot_error() -> None:
    with pytest.raises(SandboxBootError, match="cannot reach"), \
            ExternalSandbox("host=127.0.0.1 port=1 user=x password=y dbname=crm"):
        pass


def test_a_local_sandbox_whose_port_is_taken_meanwhile_starts_on_another(local_bindir: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Probe-then-bind: another sandbox may take the probed port first. Before, a boot error stopped the run."""
    import socket

    from runner.harness.crm.harness import DATABASE
    from runner.sandbox import local

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        ports = iter([busy])
        real = local._free_port
        monkeypatch.setattr(local, "_free_port", lambda: next(ports, None) or real())
        with local.LocalSandbox(DATABASE) as sb:
            assert sb.endpoint is not None and sb.endpoint.port != busy
            with psycopg.connect(sb.endpoint.dsn("crm")) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)


@pytest.mark.docker
def test_a_sandbox_is_confined_and_its_harness_role_cannot_reach_the_host(sandbox_image: str) -> None:
    """docs/security.md: no capabilities, no privilege gain, bounded processes; the harness's role (never the
    superuser by default) cannot run programs or read the server's files."""
    client = docker.from_env()
    with DockerSandbox(sandbox_image, "sandbox", run_id="pytest-confined", owner_pid=os.getpid(),
                       connections=100) as sb:
        cid = sb.container_id()
        assert cid is not None
        host = client.containers.get(cid).attrs["HostConfig"]
        assert host["CapDrop"] == ["ALL"] and host["SecurityOpt"] == ["no-new-privileges:true"]
        assert host["PidsLimit"] == 100 + 64
        assert host["ReadonlyRootfs"] is True and set(host["Tmpfs"]) == {"/var/run/postgresql", "/tmp"}
        with psycopg.connect(sb.dsn("crm"), autocommit=True) as conn:
            for attempt in ("COPY (SELECT 1) TO PROGRAM 'id'", "COPY (SELECT 1) TO '/tmp/x'",
                            "CREATE TEMP TABLE t (x text); COPY t FROM '/etc/passwd'",
                            "SELECT pg_read_file('/etc/passwd')", "ALTER ROLE sandbox SUPERUSER"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(attempt)
            row = conn.execute("SELECT rolsuper, pg_has_role('pg_read_server_files', 'member'), "
                               "pg_has_role('pg_execute_server_program', 'member') FROM pg_roles "
                               "WHERE rolname = current_user").fetchone()
            assert row == (False, False, False)


def test_a_local_server_started_from_a_thread_runs_no_python_in_its_child_and_dies_with_its_worker(
        tmp_path: Any, local_bindir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Slot threads start replacement sandboxes. A `preexec_fn` runs Python between fork and exec, which can
    deadlock in a process with threads; the server is now started through setpriv --pdeathsig instead, and
    still goes when the process that started it is killed."""
    import threading

    from runner.harness.crm.harness import DATABASE
    from runner.sandbox import local

    seen: list[dict[str, Any]] = []
    real = subprocess.Popen

    def popen(*args: Any, **kw: Any) -> Any:
        seen.append(kw)
        return real(*args, **kw)

    monkeypatch.setattr(local.subprocess, "Popen", popen)
    started: list[int] = []

    def in_a_thread() -> None:
        with local.LocalSandbox(DATABASE) as sb:
            assert sb._proc is not None
            started.append(sb._proc.pid)

    t = threading.Thread(target=in_a_thread)
    t.start()
    t.join(120)
    assert started and seen and all(kw.get("preexec_fn") is None for kw in seen)
    monkeypatch.undo()
    # a worker that started a server and is killed with SIGKILL: the server goes with it
    code = ("import threading, time\n"
            "from runner.harness.crm.harness import DATABASE\n"
            "from runner.sandbox.local import LocalSandbox\n"
            "sb = LocalSandbox(DATABASE)\n"
            "def slot():\n"  # a slot thread lives as long as its worker: the server's parent thread
            "    sb.start(); print(sb._proc.pid, flush=True); time.sleep(120)\n"
            "threading.Thread(target=slot).start(); time.sleep(120)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        server = int((p.stdout.readline() if p.stdout else "").strip())
        os.kill(p.pid, 9)
        p.wait(30)
        for _ in range(300):
            if not os.path.exists(f"/proc/{server}") or "zombie" in _state(server):
                break
            time.sleep(0.1)
        assert not os.path.exists(f"/proc/{server}") or "zombie" in _state(server)
    finally:
        p.kill()


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((line.lower() for line in f if line.startswith("State:")), "")
    except OSError:
        return ""


def _bridge_address() -> str:
    """This machine's address on Docker's default bridge, read from the bridge's own interface: an engine
    may leave `IPAM.Config[].Gateway` out of `docker network inspect` (Debian's 20.10 does)."""
    import fcntl
    import socket
    import struct

    attrs = docker.from_env().networks.get("bridge").attrs
    name = (attrs.get("Options") or {}).get("com.docker.network.bridge.name") or "docker0"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
    return socket.inet_ntoa(packed[20:24])


def _host_listener() -> tuple[Any, str, int]:
    """A TCP listener on this machine's address on Docker's default bridge (where a container's route
    to the host, and out, goes)."""
    import socket

    gateway = _bridge_address()
    s = socket.socket()
    s.bind((gateway, 0))
    s.listen()
    return s, gateway, s.getsockname()[1]


def _reaches(cid: str, host: str, port: int) -> bool:
    probe = f"timeout 3 bash -c 'echo > /dev/tcp/{host}/{port}'"
    return docker.from_env().containers.get(cid).exec_run(["bash", "-c", probe]).exit_code == 0


@pytest.mark.docker
def test_a_sandbox_without_network_is_reached_by_its_socket_alone_and_reaches_nothing(sandbox_image: str) -> None:
    """container_network none: no port, no route out (not even to this machine), every DSN through the
    socket; the data directory on disk (no tmpfs) under the read-only root. The bridge sandbox beside it
    shows the probe would see a route."""
    listener, host, port = _host_listener()
    with listener, DockerSandbox(sandbox_image, "sandbox", run_id="pytest-offline", owner_pid=os.getpid(),
                                 network="none") as sb, \
            DockerSandbox(sandbox_image, "sandbox", run_id="pytest-offline", owner_pid=os.getpid(),
                          network="bridge") as bridged:
        cid, bridged_id = sb.container_id(), bridged.container_id()
        assert cid is not None and bridged_id is not None
        attrs = docker.from_env().containers.get(cid).attrs
        assert attrs["HostConfig"]["NetworkMode"] == "none" and not attrs["NetworkSettings"]["Ports"]
        assert attrs["HostConfig"]["ReadonlyRootfs"] is True
        assert sb.endpoint is not None and sb.endpoint.host.startswith("/")
        with psycopg.connect(sb.dsn("crm"), autocommit=True) as conn:  # writes land (data directory on disk)
            conn.execute("CREATE TABLE scratch AS SELECT generate_series(1, 1000) AS n")
            assert conn.execute("SELECT count(*) FROM scratch").fetchone() == (1000,)
        assert _reaches(bridged_id, host, port)
        assert not _reaches(cid, host, port)
        assert not _reaches(cid, "1.1.1.1", 53)


def test_no_network_needs_the_socket_of_an_engine_on_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://10.0.0.9:2375")
    with pytest.raises(SandboxBootError, match=r"container_network: none .*\(DOCKER_HOST is tcp://10\.0\.0\.9:2375\)"):
        DockerSandbox("img", "sandbox", run_id="x", owner_pid=os.getpid(), network="none")
    assert not DockerSandbox("img", "sandbox", run_id="x", owner_pid=os.getpid(), network="auto").offline


def test_local_sandbox_directories_of_killed_owners_are_swept(local_bindir: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker killed outright takes its server with it but leaves its directory (70 MiB each): the next
    run's sweep removes those whose owner is gone, and leaves a live one's, a kept one's, a fresh one."""
    from runner.harness.crm.harness import DATABASE as CRM
    from runner.sandbox.local import KEEP_FILE, OWNER_FILE, LocalSandbox, remove_stale_local

    state = Path(tempfile.mkdtemp(prefix="pgsr-state-"))  # not pytest's: the server's own user must reach it
    os.chmod(state, 0o755)
    monkeypatch.setenv("RUNNER_STATE_DIR", str(state))
    gone = subprocess.Popen(["sleep", "30"])
    dead_owner = owner_identity(gone.pid)
    gone.kill()
    gone.wait()
    local = state / "local"
    for name, owner, keep, age in (("local-w-dead", dead_owner, False, 0), ("local-w-kept", dead_owner, True, 0),
                                   ("local-w-old", None, False, 7200), ("local-w-new", None, False, 0)):
        (local / name / "data").mkdir(parents=True)
        if owner:
            (local / name / OWNER_FILE).write_text(owner)
        if keep:
            (local / name / KEEP_FILE).touch()
        os.utime(local / name, (time.time() - age, time.time() - age))
    with LocalSandbox(CRM, name_hint="w") as live:  # ours, running
        assert remove_stale_local() == 2
        assert sorted(p.name for p in local.glob("local-*")) == sorted(["local-w-kept", "local-w-new", live.id])
    assert not (local / live.id).exists()  # stopped: its own directory went with it
    shutil.rmtree(state)
