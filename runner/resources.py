"""What every resource shares: `with` starts it, leaving stops it, and a failed start still cleans up."""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from runner.errors import RunStopped


def fd_ready(fd: int, timeout: float, *, write: bool = False) -> bool:
    """Whether `fd` can be read (or written) within `timeout` seconds. poll(2), not select(2): a worker with
    hundreds of slots holds more than 1,024 descriptors, and select() refuses any numbered past that
    ("filedescriptor out of range": 672 of 1,024 records of a batch-mode run failed on it)."""
    p = select.poll()
    p.register(fd, select.POLLOUT if write else select.POLLIN)
    return bool(p.poll(max(0.0, timeout) * 1000))


class Resource(ABC):
    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> None:
        """Release everything; safe after a failed or partial start, and safe twice."""

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


PARENT_ENV = "RUNNER_PARENT_PID"
_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
# The backlog of a run's server sockets: calls made before the server serves wait there, as do bursts of a
# run's first calls (bound here, listened on again by aiohttp: serving.py).
BACKLOG = 1024
# `ps -o comm` of a server forked from the forkserver: pgsr-simulator, not a worker
SERVER_COMM_PREFIX = "pgsr-"


def name_process(name: str) -> None:
    """The name `ps` and /proc/PID/comm show (Linux; at most 15 bytes)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def die_with_parent(parent_pid: int, sig: int = signal.SIGTERM, *, via_forkserver: bool = False) -> None:
    """Have the kernel send `sig` to this process when its parent dies, kill -9 included (Linux
    PR_SET_PDEATHSIG), so that no worker or server outlives a supervisor that could not clean up.
    If the parent is already gone, the signal comes now. A process forked by a multiprocessing
    forkserver has that server as its parent, which exits when the supervisor dies (once its children
    let go of it: leave_forkserver): the signal then comes from the server's death, and here
    `parent_pid` must be the server's parent."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the supervisor's own clean-up is all there is
        return
    parent = os.getppid()
    if parent != parent_pid and not (via_forkserver and parent_of(parent) == parent_pid):
        os.kill(os.getpid(), sig)


def dies_with_parent(argv: list[str], sig: str = "TERM") -> list[str]:
    """argv run so that it gets `sig` when the thread that started it ends (its worker killed with SIGKILL):
    util-linux's setpriv sets PR_SET_PDEATHSIG and execs it. Not a `preexec_fn`: that runs Python in the
    child between fork and exec, which can deadlock when the parent has threads (a worker's slots are).
    Without setpriv, argv as it is."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", sig, "--", *argv] if setpriv else argv


# A process group's leader that dies with its starter, taking the whole group with it: on SIGTERM (its
# parent's death, setpriv) it kills every process of its group, the command and whatever that started.
_LEASH = 'trap "kill -KILL 0" TERM; "$@" <&0 & wait $!; exit $?'


@contextlib.contextmanager
def registered(leader: int) -> Iterator[None]:
    """While a leashed group runs: its leader named in the run's temporary directory (run/home.py), so
    that a janitor cleaning up after a run killed at once can end it."""
    mark = Path(tempfile.gettempdir()) / "leash" / str(leader)
    with contextlib.suppress(OSError):
        mark.parent.mkdir(exist_ok=True)
        mark.touch()
    try:
        yield
    finally:
        mark.unlink(missing_ok=True)


def leashed(argv: list[str]) -> list[str]:
    """argv run under a shell that leads its process group (start it with start_new_session=True) and kills
    the group when the process that started it dies, kill -9 included: a user's CLI and its children end
    with their worker, within milliseconds, not when their chunk would have. Its exit status is argv's
    (a signal's death: 128 + the signal)."""
    return dies_with_parent(["/bin/sh", "-c", _LEASH, "leash", *argv])


def leave_forkserver() -> None:
    """In a process forked by a multiprocess forkserver: close our copy of the server's "alive" pipe.

    Every child of a forkserver holds that pipe's write end (so that it could start processes through
    the server too), and the server exits only once every holder has closed it. A worker starts none;
    while it held the pipe, a supervisor's kill -9 left the server waiting for its workers and a worker
    idle on its task queue waiting for the server's death (PR_SET_PDEATHSIG, see die_with_parent):
    both lived on. Without our copy the server exits with the supervisor, and the signal comes."""
    from multiprocess import forkserver

    server = forkserver._forkserver  # private, but the one place multiprocess keeps that descriptor
    fd, server._forkserver_alive_fd = server._forkserver_alive_fd, None
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def parent_of(pid: int) -> int | None:
    """A live process's parent pid, from /proc (None if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def stop_process(
    proc: subprocess.Popen[Any] | None, *, sig: int = signal.SIGINT, timeout: float = 10.0
) -> None:
    """Ask a child to stop (SIGINT: PostgreSQL's fast shutdown, aiohttp's clean exit), then kill it."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class ServerProcess(Resource):
    """A `python -m runner ...` server child that prints 'listening on URL' once it serves
    (simulator, gateway).

    Given `listen` (host, port; port 0 = any free one), this process binds the socket and the child inherits
    it: the URL is known at once, and a client that calls before the child serves waits in the socket's
    backlog instead of being refused. With `wait=False` the start does not wait for the child's word
    either: a run's workers start while its servers import (~0.5 s of CPU each), and `alive()` holds it to
    its boot timeout later."""

    name = "server"
    program = [sys.executable, "-m", "runner"]

    def __init__(
        self,
        args: list[str],
        *,
        boot_timeout: float = 30.0,
        log_path: str | None = None,
        listen: tuple[str, int] | None = None,
        wait: bool = True,
        env: dict[str, str] | None = None,
    ) -> None:
        self.args, self.boot_timeout, self.listen, self.wait = args, boot_timeout, listen, wait
        # for the process alone, beside this one's environment (never on its command line)
        self.env = env or {}
        self.log_path = log_path or os.path.join(
            tempfile.gettempdir(), f"pgsandbox-{self.name}-{os.getpid()}.log"
        )
        self.url = ""
        self.starts = 0
        self._proc: Any = None  # subprocess.Popen, or a ForkedServer
        self._booting: float | None = None  # when a start whose word has not come yet began
        self._said = b""
        self._failed: str | None = None

    def on_socket(self, fd: int) -> list[str]:
        """The arguments that have it serve on the inherited listening socket `fd` (the runner's servers'
        hidden option)."""
        return ["--listen-fd", str(fd)]

    def alive(self) -> bool:
        if self._proc is None or self._proc.poll() is not None:
            return False
        if self._booting is not None:
            try:
                self._confirm(block=False)
            except RunStopped as e:
                self._failed = str(e)
                return False
        return True

    def exit_description(self) -> str:
        if self._failed:
            return self._failed
        code = self._proc.returncode if self._proc is not None else None
        if code is not None and code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exit code {code}"

    def restart(self) -> None:
        """Start it again, waiting for its word: one given `listen` on the same port, so its clients keep
        their URL; raises RunStopped if it cannot come back."""
        self.stop()
        self.wait = True
        self.start()

    def start(self) -> None:
        self.starts += 1
        self._failed, self._said = None, b""
        sock = self._bind() if self.listen is not None else None
        try:
            extra: list[str] = []
            if sock is not None:
                # a restart binds it again
                self.listen = (self.listen[0], sock.getsockname()[1])  # type: ignore[index]
                self.url = f"http://{self.listen[0]}:{self.listen[1]}"
                extra = self.on_socket(sock.fileno())
            self._proc = self.spawn(extra, sock)
        finally:
            if sock is not None:  # the child's alone: if it dies, callers are refused (and retry), not held
                sock.close()
        self._booting = time.monotonic()
        if self.wait or sock is None:
            self._confirm(block=True)

    def _bind(self) -> socket.socket:
        assert self.listen is not None
        try:
            return socket.create_server(self.listen, backlog=BACKLOG)
        except OSError as e:  # a port of the config's that something else holds
            raise RunStopped(
                f"the {self.name} cannot listen on {self.listen[0]}:{self.listen[1]}: {e}"
            ) from e

    def spawn(self, extra: list[str], sock: socket.socket | None) -> Any:
        """The server's process: Popen, or what stands for one (stdout: where it says it listens)."""
        # stderr to a file: a pipe nobody reads would block the server once it fills. A restart appends,
        # so the log still holds the last words of the one that died.
        with open(self.log_path, "w" if self.starts == 1 else "a") as log:
            # Ctrl-C goes to the supervisor, which stops us last
            return subprocess.Popen(
                [*self.program, *self.args, *extra],
                stdout=subprocess.PIPE,
                stderr=log,
                env={**os.environ, **self.env, "PYTHONUNBUFFERED": "1", PARENT_ENV: str(os.getpid())},
                pass_fds=(sock.fileno(),) if sock is not None else (),
                start_new_session=True,
            )

    def _confirm(self, *, block: bool) -> None:
        """Read its first line: done once it says it listens; RunStopped if it said something else, exited
        or kept silent past its boot timeout (`block`: wait for that; else only look)."""
        assert self._proc is not None and self._proc.stdout is not None and self._booting is not None
        fd = self._proc.stdout.fileno()
        deadline = self._booting + self.boot_timeout
        while b"\n" not in self._said:
            left = deadline - time.monotonic()
            if not fd_ready(fd, left if block else 0):
                if left > 0 and not block:
                    return
                break
            chunk = os.read(fd, 4096)
            if not chunk:  # it exited
                break
            self._said += chunk
        line = self._said.decode(errors="replace").split("\n", 1)[0]
        if b"\n" in self._said and line.startswith("listening on "):
            if self.listen is None:  # else the URL is the socket's, known since it was bound
                self.url = line.split("listening on ", 1)[1].strip()
            self._booting = None
            return
        with open(self.log_path) as log:
            err = log.read()[-1500:]
        said = f"it said {line.strip()!r}" if line.strip() else f"no word in {self.boot_timeout:g}s"
        raise RunStopped(f"the {self.name} did not start ({said}): {err}")

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def stop(self) -> None:
        stop_process(self._proc, sig=getattr(self._proc, "stop_signal", signal.SIGINT))
        self._proc = None


class ForkedServer:
    """A server forked from the run's forkserver (engine/forkserver.py) instead of started afresh: the SDK
    modules it loaded for the workers are the server's too. The parts of a Popen that ServerProcess and
    stop_process use; `stdout` is where it says it listens."""

    # Stopped with SIGTERM, not SIGINT: one stopped before its server set its handlers (a run that
    # stopped at once) then ends silently, where SIGINT printed a KeyboardInterrupt's traceback on the
    # supervisor's terminal (the forkserver's stderr, not yet the server's log). aiohttp takes both.
    stop_signal = signal.SIGTERM

    def __init__(
        self,
        name: str,
        ctx: Any,
        target: str,
        args: tuple[Any, ...],
        log_path: str,
        append: bool,
        listen: socket.socket,
    ) -> None:
        """`target`: "module:function", called as function(listen_fd, *args) in the child (named, not
        passed: the supervisor need not import the server's modules to start it)."""
        said, self._said = socket.socketpair()
        try:
            self.proc = ctx.Process(
                target=_forked_main,
                args=(name, os.getpid(), log_path, append, said, listen, target, args),
                name=name,
                daemon=False,
            )
            self.proc.start()
        finally:
            said.close()  # the child's alone: its death reads as the end of what it says
        self.pid: int = self.proc.pid
        self.stdout = self._said.makefile("rb", buffering=0)

    @property
    def returncode(self) -> int | None:
        code: int | None = self.proc.exitcode
        return code

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self.proc.join(timeout)
        if self.proc.exitcode is None:
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
        self.stdout.close()
        self._said.close()
        return int(self.proc.exitcode)

    def send_signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _forked_main(
    name: str,
    parent: int,
    log_path: str,
    append: bool,
    said: socket.socket,
    listen: socket.socket,
    target: str,
    args: tuple[Any, ...],
) -> None:
    """In a server forked from the forkserver: be what a started one is (its own session, so Ctrl-C goes
    to the supervisor alone; gone with the supervisor; stdout to the supervisor, stderr to its log), then
    serve on `listen`."""
    os.setsid()
    name_process(SERVER_COMM_PREFIX + name)
    die_with_parent(parent, via_forkserver=True)
    leave_forkserver()
    with open(log_path, "a" if append else "w") as log:
        os.dup2(log.fileno(), 2)
    os.dup2(said.fileno(), 1)
    said.close()
    module, _, function = target.partition(":")
    # `listen` stays open meanwhile
    getattr(importlib.import_module(module), function)(listen.fileno(), *args)
