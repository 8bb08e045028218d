"""The docker sandbox: a container from the sandbox image, via testcontainers.

Ryuk (testcontainers' reaper) needs a registry pull, so it is off; containers carry labels
instead and `remove_stale` clears those of crashed runs. Ports bind to 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import replace

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

import docker
import docker.types
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.models.containers import Container
from loguru import logger
from requests.exceptions import ConnectionError, ReadTimeout
from testcontainers.core.container import DockerContainer

from runner.config import environment
from runner.errors import SandboxBootError
from runner.sandbox.base import (
    LABEL,
    SOCKET_PORT,
    TMPFS_PATH,
    Endpoint,
    Launched,
    Sandbox,
    logs_in,
    new_password,
    wait_connectable,
)
from runner.sandbox.owner import ORPHAN_SECONDS, dir_owner, is_stale, owned_dir, owner_identity
from runner.sandbox.server_log import SERVER_LOG_SETTINGS, server_args
from runner.sandbox.tenancy import ADMIN_ROLE


def engine_address() -> str:
    return environment().docker_host


def engine_is_local() -> bool:
    """Whether the engine runs on this machine, so a directory it bind-mounts is one this process sees."""
    return engine_address().startswith("unix://")


# What a sandbox may do (docs/security.md): the server runs as `postgres` from the image's first line and
# needs no capability at all; it may not gain privileges (setuid binaries); its processes are bounded
# (one per session, plus the server's own and a margin), so a runaway harness cannot fork-bomb the host;
# its root filesystem is read-only: it writes only its socket directory, /tmp and its data directory,
# each a mount of its own (the image's entrypoint copies the data directory there).
CONFINED = {"cap_drop": ["ALL"], "security_opt": ["no-new-privileges:true"], "read_only": True}
WRITABLE_TMPFS = {"/var/run/postgresql": "size=1m", "/tmp": "size=16m"}
DISK_PATH = "/var/lib/sandbox-disk"  # an empty volume of the container's own: the data directory on disk
PIDS_BESIDE_SESSIONS = 64
# A run's container stops itself once no session of the runner's (the steward's, held while a worker uses
# the sandbox) has been open for this long (the entrypoint's lease): nothing of a run killed all at once,
# its janitor included (its cgroup killed), runs on. The next run's sweep removes what is left.
LEASE_SECONDS = 30

SOCKET_MOUNT = "/run/sandbox-socket"  # where a container's extra Unix socket directory is mounted
SOCKET_PREFIX = "pgsr-socket-"  # the host directories holding them, under the temporary directory


def remove_socket_dir(path: str | None) -> None:
    """Remove a host socket directory this project made (by its name under the temporary directory)."""
    if (
        path
        and os.path.dirname(path) == tempfile.gettempdir()
        and os.path.basename(path).startswith(SOCKET_PREFIX)
    ):
        shutil.rmtree(path, ignore_errors=True)


def engine_answers() -> bool:
    try:
        client = docker.from_env(timeout=5)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except DockerException:
        return False


class DockerSandbox(Sandbox):
    kind = "docker"

    def __init__(
        self,
        image: str,
        user: str,
        *,
        run_id: str,
        owner_pid: int,
        memory: str = "256m",
        cpus: float = 1.0,
        keep: bool = False,
        name_hint: str = "w",
        boot_timeout: float = 30.0,
        tmpfs: bool = False,
        connections: int = 100,
        network: str = "bridge",
    ) -> None:
        super().__init__()
        self.image, self.user, self.run_id, self.owner_pid = image, user, run_id, owner_pid
        self.memory, self.cpus, self.keep, self.boot_timeout, self.tmpfs = (
            memory,
            cpus,
            keep,
            boot_timeout,
            tmpfs,
        )
        self.connections = connections
        # A kept container (`runner debug`) outlives the run and its directory would be left behind:
        # one conversation does not need the speed.
        self.socket = engine_is_local() and not keep
        # none: no network at all, not even a route to this machine; reached through the socket alone.
        # auto: none where the socket can be had (an engine on this machine, no kept sandbox), else bridge.
        self.offline = network == "none" or (network == "auto" and self.socket)
        if self.offline and not self.socket:
            raise SandboxBootError(
                "container_network: none reaches a sandbox through a Unix socket, which needs "
                f"a Docker engine on this machine (DOCKER_HOST is {engine_address()}) and no "
                "kept sandbox: use container_network: bridge"
            )
        self.id = f"{run_id[:8]}-{name_hint}-{uuid.uuid4().hex[:6]}"
        self._container: Container | None = None  # once taken over (start)
        self._client: docker.DockerClient | None = None
        self._socket_home: str | None = None

    def start(self) -> None:
        t0 = time.monotonic()
        launched = self.launched or self.launch()
        self.launched = None  # taken: a later start() of this object (there is none) would launch anew
        self._take(launched)
        self.boot_seconds = time.monotonic() - t0
        logger.debug("{} ready in {:.2f}s", self.describe(), self.boot_seconds)

    def launch(self) -> Launched:
        """Create and start the container, without waiting for its server: where it may run ahead of
        its worker (the supervisor's Prestart), the server boots while the worker's process is made."""
        password, admin = new_password(), new_password()
        c, _ = self._container_spec(password, admin)
        try:
            # testcontainers would try a registry pull for a missing image; there is none here.
            c.get_docker_client().client.images.get(self.image)
            c.start()
            return Launched(self.id, c.get_wrapped_container().id, password, admin, self._socket_home)
        except BaseException as e:
            with contextlib.suppress(Exception):  # created, then not started: removed with its socket
                c.stop(force=True, delete_volume=True)
            remove_socket_dir(self._socket_home)
            if isinstance(e, ImageNotFound):
                raise SandboxBootError(f"sandbox image {self.image} is missing: run `make image`") from e
            if isinstance(e, DockerException):
                raise SandboxBootError(f"docker could not start the sandbox: {e}") from e
            raise
        finally:
            c.get_docker_client().client.close()

    def _take(self, launched: Launched) -> None:
        """Own a launched container (this process's, or the supervisor's): wait until its server takes a
        login, then settle how to reach it."""
        self.id, self._socket_home = launched.id, launched.socket_home
        try:
            self._client = docker.from_env()
            self._container = self._client.containers.get(launched.container_id)
        except NotFound as e:
            raise SandboxBootError(f"{self.id}: its container was removed before its worker took it") from e
        except DockerException as e:
            raise SandboxBootError(f"docker could not start the sandbox: {e}") from e
        socket_dir = os.path.join(launched.socket_home, "run") if launched.socket_home else None
        if self.offline:  # the socket is all there is: every DSN, the harness's included, names it
            assert socket_dir is not None
            self.endpoint = Endpoint(
                socket_dir, SOCKET_PORT, self.user, launched.password, socket_dir=socket_dir
            )
            wait_connectable(self.endpoint, timeout=self.boot_timeout, is_dead=self._exit_reason)
            self.admin = replace(self.endpoint, user=ADMIN_ROLE, password=launched.admin_password)
            return
        binding = self._container.attrs["NetworkSettings"]["Ports"]["5432/tcp"][0]
        self.endpoint = Endpoint(
            binding["HostIp"] or "127.0.0.1", int(binding["HostPort"]), self.user, launched.password
        )
        wait_connectable(self.endpoint, timeout=self.boot_timeout, is_dead=self._exit_reason)
        if socket_dir is not None:  # ready over TCP (what users get); the socket only where it answers
            local = replace(self.endpoint, socket_dir=socket_dir)
            if logs_in(local.local_dsn()):  # a mount this process cannot see does not answer
                self.endpoint = local
            else:
                logger.debug("{}: no login through the socket in {}; TCP only", self.id, socket_dir)
        self.admin = replace(self.endpoint, user=ADMIN_ROLE, password=launched.admin_password)

    def _container_spec(self, password: str, admin: str) -> tuple[DockerContainer, str | None]:
        """The container as this sandbox runs it (CONFINED, its mounts, its network), not yet started, and
        the host directory of its extra Unix socket, if it has one."""
        owner = owner_identity(self.owner_pid)
        if owner.endswith("/?"):  # the run is gone (a killed supervisor): a container now would be nobody's
            raise SandboxBootError(
                f"{self.id}: the run that owns it (pid {self.owner_pid}) is gone; not starting it"
            )
        labels = {
            LABEL: "1",
            f"{LABEL}.run": self.run_id,
            f"{LABEL}.owner-pid": str(self.owner_pid),
            f"{LABEL}.owner": owner,
            f"{LABEL}.keep": "1" if self.keep else "0",
        }
        c = DockerContainer(self.image).with_env("POSTGRES_PASSWORD", password).with_name(f"pgsr-{self.id}")
        # the runner's superuser: made at start, with this password
        c.with_env("SANDBOX_ADMIN_PASSWORD", admin)
        if not self.keep:  # a run's own: it stops once no session of the runner's has held it for a while
            c.with_env("SANDBOX_LEASE_SECONDS", str(LEASE_SECONDS))
        # the entrypoint hands these to postgres; a kept sandbox (runner debug) logs to its standard error
        logs = [] if self.keep else server_args(SERVER_LOG_SETTINGS)
        c.with_command(" ".join([f"-c max_connections={self.connections}", *logs]))
        if not self.offline:
            # the docker SDK's form: (ip, port)
            c.ports["5432/tcp"] = ("127.0.0.1", None)  # type: ignore[assignment]
        if self.tmpfs:  # the data directory in memory (it counts against the container's memory limit)
            # docker's default mode: 1777
            c.with_env("SANDBOX_TMPFS", TMPFS_PATH).with_tmpfs_mount(TMPFS_PATH)
        for path, options in WRITABLE_TMPFS.items():
            c.tmpfs[path] = options
        c.with_env("SANDBOX_DISK", DISK_PATH)
        socket_dir = None
        if self.socket:
            # The server adds a Unix socket in a directory mounted from here: the runner's queries then
            # skip the engine's port proxy. Its home is this user's alone (0700); the directory itself is
            # open (0777) because the server inside runs as another user. A login there needs the password.
            # a sweep judges one left without
            self._socket_home = owned_dir(f"{SOCKET_PREFIX}{self.id}-", owner)
            socket_dir = os.path.join(self._socket_home, "run")
            os.mkdir(socket_dir)
            os.chmod(socket_dir, 0o777)
            c.with_volume_mapping(socket_dir, SOCKET_MOUNT, "rw").with_env("SANDBOX_SOCKET_DIR", SOCKET_MOUNT)
            labels[f"{LABEL}.socket-home"] = self._socket_home  # a sweep of a crashed run removes it too
        # The image's HEALTHCHECK (for compose and `docker ps`) execs pg_isready through runc every 2 s:
        # a run's sandboxes are probed by the runner itself, and the engine's exec machinery cost more
        # CPU than the probes' answers were worth. A kept sandbox (runner debug) keeps its status.
        health = {} if self.keep else {"healthcheck": {"test": ["NONE"]}}
        c.with_kwargs(
            labels=labels,
            mem_limit=self.memory,
            nano_cpus=int(self.cpus * 1e9),
            shm_size="64m",
            **health,
            **CONFINED,
            pids_limit=self.connections + PIDS_BESIDE_SESSIONS,
            # an anonymous volume (removed with the container): it takes the image's empty,
            # postgres-owned directory as its own, so the server can write there
            mounts=[docker.types.Mount(DISK_PATH, None, type="volume")],
            **({"network_mode": "none"} if self.offline else {}),
        )
        return c, socket_dir

    def data_in_memory(self) -> bool:
        # the entrypoint keeps a data directory too large for the limit on disk
        if not self.tmpfs or self._container is None:
            return False
        return self._container.exec_run(["test", "-d", f"{TMPFS_PATH}/data"]).exit_code == 0

    def raise_memory(self, extra_bytes: int) -> bool:
        if self._container is None:
            return False
        w = self._container
        w.reload()
        new = int(w.attrs["HostConfig"]["Memory"]) + extra_bytes
        w.update(mem_limit=new, memswap_limit=2 * new)  # swap as docker's default: as much as the memory
        self.memory = f"{new // 2**20}m"
        return True

    def _exit_reason(self) -> str | None:
        if self._container is None:
            return "never created"
        try:
            w = self._container
            w.reload()
            if w.status in ("exited", "dead"):
                return f"status {w.status}; logs: {w.logs(tail=20).decode(errors='replace')}"
        except NotFound:
            return "container was removed"
        except DockerException as e:  # e.g. 409: being removed (another slot is replacing it) or dead
            return f"container is going away: {e}"
        return None

    def alive(self) -> bool:
        return self._exit_reason() is None and super().alive()

    def container_id(self) -> str | None:
        return self._container.id if self._container else None

    def stop(self) -> None:
        if self.keep:
            return
        try:
            if self._container is not None:
                try:
                    self._container.remove(force=True, v=True)
                except NotFound:
                    pass
                except DockerException as e:
                    # a 409 "already in progress": the run's end-of-run sweep (or a replacing slot) got there
                    # first
                    going = (
                        isinstance(e, APIError)
                        and e.status_code == 409
                        and "already in progress" in str(e.explanation)
                    )
                    logger.log(
                        "DEBUG" if going else "WARNING", "could not remove container of {}: {}", self.id, e
                    )
                self._container = None
        finally:  # a worker told to stop while removing it (SIGTERM raises) still removes its directory
            if self._client is not None:
                self._client.close()
                self._client = None
            remove_socket_dir(self._socket_home)
            self._socket_home = None


def remove_launched(launched: Launched) -> None:
    """Remove a container launched ahead that no worker took over, and its socket directory."""
    try:
        client = docker.from_env(timeout=30)
        try:
            client.containers.get(launched.container_id).remove(force=True, v=True)
        finally:
            client.close()
    except NotFound:
        pass
    except DockerException as e:  # the run's end-of-run sweep tries again
        logger.warning("could not remove container of {}: {}", launched.id, e)
    remove_socket_dir(launched.socket_home)


def remove_stale(*, run_id: str | None = None, worker: int | None = None) -> int:
    """Remove this project's containers: those of `run_id` (of its `worker` only, if given: one that
    died), or (None) those whose owner run is gone (judged by `owner.is_stale`, never by a bare pid
    another PID namespace may not see).

    Containers started by `runner debug` carry keep=1 and survive the sweep of other runs.
    """
    mine = f"{(run_id or '')[:8]}-w{worker}g"  # how DockerSandbox's ids for the worker's sandboxes begin
    try:
        client = docker.from_env(timeout=30)
    except DockerException:
        return 0
    removed = 0
    try:
        # sparse: no inspect per container, so one removed meanwhile (another run cleaning up) is no error
        ours = client.containers.list(all=True, filters={"label": f"{LABEL}=1"}, sparse=True)
        if run_id is None:
            remove_orphan_socket_dirs({n.lstrip("/") for c in ours for n in c.attrs.get("Names") or ()})
        for c in ours:
            labels = c.attrs.get("Labels") or {}
            if run_id is not None:
                if labels.get(f"{LABEL}.run") != run_id:
                    continue
                if worker is not None and not any(
                    n.startswith(f"/pgsr-{mine}") for n in c.attrs.get("Names") or ()
                ):
                    continue
            else:
                if labels.get(f"{LABEL}.keep") == "1" or not is_stale(
                    labels.get(f"{LABEL}.owner"), float(c.attrs.get("Created") or 0)
                ):
                    continue
            try:
                c.remove(force=True, v=True)
                removed += 1
            except NotFound:
                pass
            except APIError as e:
                if e.status_code != 409:  # 409: another run's sweep is removing it right now
                    raise
                removed += _gone_after(c)
            remove_socket_dir(labels.get(f"{LABEL}.socket-home"))
        # a dead worker's: one killed before its container was made
        if run_id is not None and worker is not None:
            for path, _ in _socket_dirs(mine):
                remove_socket_dir(path)
    finally:
        client.close()
    return removed


def remove_orphan_socket_dirs(names: set[str]) -> int:
    """Remove socket directories whose container is not among `names` (this engine's sandboxes), once
    their run is gone (their owner file) or they are older than ORPHAN_SECONDS: a worker killed between
    making its directory and its container, or a container removed by other means than ours (`docker
    rm`, a wiped engine), leaves one that no label names."""
    removed = 0
    for path, container in _socket_dirs(""):
        if container in names or (owned := dir_owner(path)) is None:
            continue
        owner, made = owned  # no owner: made before directories had one, or just made: judged by age alone
        if (owner is not None and is_stale(owner, made)) or time.time() - made > ORPHAN_SECONDS:
            remove_socket_dir(path)
            removed += 1
    return removed


def _socket_dirs(prefix: str) -> list[tuple[str, str]]:
    """The socket directories of sandbox ids starting with `prefix`, each with its container's name."""
    home = tempfile.gettempdir()
    # mkdtemp's suffix: no '-'
    return [
        (os.path.join(home, entry), "pgsr-" + entry.removeprefix(SOCKET_PREFIX).rsplit("-", 1)[0])
        for entry in os.listdir(home)
        if entry.startswith(SOCKET_PREFIX + prefix)
    ]


def _gone_after(container: Container, timeout: float = 30) -> int:
    """1 once a container another sweep is removing is gone (so a caller may rely on it), else 0."""
    try:
        container.wait(condition="removed", timeout=timeout)
    except NotFound:
        return 1
    except (DockerException, ReadTimeout, ConnectionError) as e:
        logger.warning("container {} still being removed by another run: {}", container.short_id, e)
        return 0
    return 1
