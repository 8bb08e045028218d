"""The run's warm interpreter for harness.python (runner/proc/zygote.py runs in it): the process the
supervisor starts once, and a slot's shim forked from it.

A slot that cannot be forked from it (no warm interpreter, it refused, it is gone) starts its own
interpreter, as without one: the warm one only saves each slot its libraries' imports.
"""

from __future__ import annotations

import array
import contextlib
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from loguru import logger

from runner.resources import Resource, fd_ready
from runner.sandbox.owner import dir_owner, is_stale, owned_dir, owner_identity

ZYGOTE = Path(__file__).with_name("zygote.py")
HOME_PREFIX = "pgsr-warm-"  # its socket's directory, under the temporary directory
# Run by path without its directory on sys.path (ours holds modules named base, env, command...).
BOOT = (
    "import runpy, sys; path = sys.argv[1]; sys.argv = sys.argv[1:]; "
    "runpy.run_path(path, run_name='__main__')"
)
# A slot waits this long for its fork: the warm interpreter answers once its imports are done (~0.3 s for
# openai, seconds for a heavy stack); one stuck importing is not waited on for ever.
FORK_WAIT_SECONDS = 60.0


# in the response cache's directory: what an earlier run's warm interpreter found
VERDICTS = "warm-refusals.json"


# What the warm interpreter refuses changes with the runner: 2 holds the threads an import starts
# (zygote.Held) where 1 refused them. A refusal remembered under other rules is asked again.
RULES = 2


def verdict_key(python: str, load: Mapping[str, Any]) -> str:
    """What decides whether a warm interpreter would refuse: the interpreter, what it loads, the state of
    its virtualenv's installed packages (a package installed or removed changes its directory), and the rules
    it refuses by."""
    exe = Path(python)
    venv = exe.parent.parent
    packages = sorted(str(p.stat().st_mtime_ns) for p in venv.glob("lib/python*/site-packages") if p.is_dir())
    text = json.dumps(
        [str(exe.resolve()) if exe.exists() else python, dict(load), packages, RULES], sort_keys=True
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def known_refusal(cache_dir: Path, key: str) -> str | None:
    """Why an earlier run's warm interpreter refused for this key (None: none did, or not known)."""
    try:
        found = json.loads((cache_dir / VERDICTS).read_text()).get(key)
    except (OSError, ValueError, AttributeError):
        return None
    return found if isinstance(found, str) else None


def remember_refusal(cache_dir: Path, key: str, why: str) -> None:
    """Kept so that the next run starts each worker's interpreter at once instead of waiting on a warm one
    that will refuse again (its imports are seconds of CPU on the way to the first result)."""
    with contextlib.suppress(OSError, ValueError):
        path = cache_dir / VERDICTS
        known = json.loads(path.read_text()) if path.exists() else {}
        known[key] = why
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
        os.replace(tmp, path)


def marker() -> str:
    """What the warm interpreter's environment holds in place of each slot's values."""
    return f"pgsr-unset-{secrets.token_hex(6)}"


class WarmInterpreter(Resource):
    """The zygote process: started with the run's environment (slot values replaced by `mark`); it leaves
    when its stdin closes (the supervisor gone) or is killed. `socket` is where slots ask for their shim
    ("" if it could not start)."""

    def __init__(
        self,
        python: str,
        env: Mapping[str, str],
        cwd: Path,
        load: Mapping[str, Any],
        mark: str,
        verdicts: Path | None = None,
    ) -> None:
        """`verdicts`: where a refusal is remembered for the next run (proc/warm.py, VERDICTS)."""
        self.python, self.env, self.cwd, self.load, self.mark = python, dict(env), cwd, dict(load), mark
        self.verdicts = verdicts
        self.proc: subprocess.Popen[bytes] | None = None
        self.home: str | None = None
        self.socket = ""
        self.report: dict[str, Any] = {}
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        remove_stale_homes()
        # 0700: only this user reaches the socket
        self.home = owned_dir(HOME_PREFIX, owner_identity(os.getpid()))
        self.socket = os.path.join(self.home, "s")
        # Listening before the process starts: a slot that asks while it is still starting waits in the
        # backlog, and once it is gone (its copy was the last) a slot is refused at once.
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(self.socket)
            listener.listen(128)
            try:
                self.proc = subprocess.Popen(
                    [self.python, "-c", BOOT, str(ZYGOTE), str(listener.fileno()), self.mark],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=self.env,
                    cwd=self.cwd,
                    start_new_session=True,
                    pass_fds=[listener.fileno()],
                )
            except OSError as e:  # each slot then starts its own, and says what is wrong with the interpreter
                logger.debug("no warm harness interpreter: {}", e)
                self.socket = ""
                return
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(self.load).encode() + b"\n")
        self.proc.stdin.flush()
        for target, stream in ((self._read_report, self.proc.stdout), (self._copy_stderr, self.proc.stderr)):
            t = threading.Thread(target=target, args=(stream,), daemon=True, name="warm-interpreter")
            t.start()
            self._threads.append(t)

    def _read_report(self, stream: IO[bytes]) -> None:
        line = stream.readline()
        with contextlib.suppress(ValueError):
            self.report = json.loads(line)
        if self.report.get("refused"):
            if self.verdicts is not None:
                remember_refusal(
                    self.verdicts, verdict_key(self.python, self.load), str(self.report["refused"])
                )
            logger.info(
                "harness interpreter: none is forked from the warm one ({}): each worker's interpreter "
                "imports its libraries itself, {} s of CPU each, once for all its slots (they share it: "
                "runner/proc/hosted.py)",
                self.report["refused"],
                self.report.get("cpu_seconds", "?"),
            )
        elif self.report:
            logger.debug(
                "harness interpreter warm in {} s: {}",
                self.report.get("seconds"),
                ", ".join(self.report.get("preloaded", [])) or "nothing to preload",
            )

    def _copy_stderr(self, stream: IO[bytes]) -> None:
        for line in stream:
            logger.debug("harness interpreter (warm) | {}", line.decode(errors="replace").rstrip("\n"))

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            # Killed, not asked: it holds nothing to save, and its exit (an interpreter with the harness's
            # libraries to tear down) is on the way out of the run. The slots forked from it are their own.
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                with contextlib.suppress(OSError):
                    if stream is not None:
                        stream.close()
            for t in self._threads:
                t.join(timeout=2)
        if self.home is not None:
            shutil.rmtree(self.home, ignore_errors=True)
            self.home = None


def remove_stale_homes() -> int:
    """Remove the socket directories of warm interpreters whose run is gone (killed outright: nothing
    else removes them)."""
    removed = 0
    for d in Path(tempfile.gettempdir()).glob(f"{HOME_PREFIX}*"):
        if (owned := dir_owner(str(d))) is not None and is_stale(*owned):  # None: removed meanwhile
            shutil.rmtree(d, ignore_errors=True)
            removed += 1
    return removed


class Forked:
    """A slot's shim forked by the warm interpreter: the parts of a Popen the slot's Interpreter uses.
    Its exit status comes from the warm interpreter, which is its parent."""

    def __init__(self, conn: socket.socket, pid: int, fds: list[int], buffer: bytes = b"") -> None:
        self.conn, self.pid = conn, pid
        self.returncode: int | None = None
        self.stdin: IO[bytes] | None = os.fdopen(fds[0], "wb")
        self.stdout: IO[bytes] | None = os.fdopen(fds[1], "rb")
        self.stderr: IO[bytes] | None = os.fdopen(fds[2], "rb")
        self._buffer = buffer  # what came after its pid: its exit, if it was that quick

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            if b"\n" in self._buffer:
                self.returncode = os.waitstatus_to_exitcode(
                    json.loads(self._buffer.partition(b"\n")[0])["exit"]
                )
                break
            left = 3600.0 if deadline is None else deadline - time.monotonic()
            if left <= 0 or not fd_ready(self.conn.fileno(), left):
                if deadline is not None and time.monotonic() >= deadline:
                    raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
                continue
            chunk = self.conn.recv(4096)
            self._buffer += chunk
            if not chunk:  # the warm interpreter is gone, and with it the status: wait for the process itself
                self.returncode = self._outlived(deadline, timeout)
        self.conn.close()
        return self.returncode

    def _outlived(self, deadline: float | None, timeout: float | None) -> int:
        while True:
            try:  # an orphan's new parent may leave it a zombie a while: that is ended too
                state = Path(f"/proc/{self.pid}/stat").read_text().rpartition(")")[2].split()[0]
            except (OSError, IndexError):
                state = "Z"
            if state in ("Z", "X"):
                return -signal.SIGKILL  # how it ended is unknown; that it ended is not
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
            time.sleep(0.05)


def fork_from(path: str, env: Mapping[str, str], cwd: Path, why_not: Callable[[str], None]) -> Forked | None:
    """A slot's shim forked by the warm interpreter at `path` with this environment, or None (told
    `why_not`): the slot then starts its own."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    (in_r, in_w), (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe(), os.pipe()
    ours, theirs = [in_w, out_r, err_r], [in_r, out_w, err_w]
    buffer = b""
    try:
        conn.settimeout(FORK_WAIT_SECONDS)
        conn.connect(path)
        request = json.dumps({"env": dict(env), "cwd": str(cwd)}).encode() + b"\n"
        conn.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", theirs))])
        while b"\n" not in buffer and (chunk := conn.recv(4096)):
            buffer += chunk
        line, _, buffer = buffer.partition(b"\n")
        reply = json.loads(line or b"{}")
    except (OSError, ValueError) as e:
        reply = {"refused": f"{type(e).__name__}: {e}"}
    finally:
        for fd in theirs:
            os.close(fd)
    if "pid" not in reply:
        why_not(str(reply.get("refused", "the warm interpreter hung up")))
        conn.close()
        for fd in ours:
            os.close(fd)
        return None
    conn.settimeout(None)
    return Forked(conn, int(reply["pid"]), ours, buffer)
