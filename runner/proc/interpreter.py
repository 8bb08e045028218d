"""The user's own interpreter (harness.python) as a resource: one shim process per slot, forked from the
run's warm interpreter where it will (proc/warm.py), else started afresh.

The worker speaks the shim's line protocol (runner/proc/shim.py) over pipes. Replies are waited
for in short selects, so the slot's time limit (SIGALRM, or the exception the worker raises into a
slot's thread) lands between them; the interrupted process is then killed with its whole group,
since it is midway through a record, and the next record starts a fresh one. What the harness prints
or logs arrives on the shim's stderr and goes to the worker's log, marked with the record.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any, Protocol

from loguru import logger

from runner.proc.shim import END_OF_OUTPUT, LEASH_ENV
from runner.proc.warm import BOOT, fork_from
from runner.resources import Resource, fd_ready

SHIM = Path(__file__).with_name("shim.py")
POLL_SECONDS = 0.1  # how often a wait for a reply gives the time limit a chance to land
# How long a reply waits for the lines printed before it (they travel on stderr, read by another thread):
# a process that printed past its pipe's end is not waited for longer.
OUTPUT_WAIT_SECONDS = 1.0


class InterpreterExited(Exception):
    """The harness's interpreter ended (the function killed its process, a crash, a bad venv)."""


class Process(Protocol):
    """A slot's shim process: a Popen, or one forked by the run's warm interpreter (proc/warm.py)."""

    pid: int
    stdin: IO[bytes] | None
    stdout: IO[bytes] | None
    stderr: IO[bytes] | None

    def wait(self, timeout: float | None = None) -> int: ...


class Interpreter(Resource):
    def __init__(
        self,
        python: str,
        env: Mapping[str, str],
        cwd: Path,
        log: Callable[[str], None],
        *,
        warm: str | None = None,
    ) -> None:
        self.python, self.env, self.cwd, self.log, self.warm = python, dict(env), cwd, log, warm
        self.proc: Process | None = None
        self._buffer = b""
        self._asked = 0  # requests sent: the next one's id, which its reply repeats
        self._reader: threading.Thread | None = None
        self._output_read = threading.Event()  # END_OF_OUTPUT seen: every line of the request is logged

    def start(self) -> None:
        """Forked from the run's warm interpreter (its libraries imported once for every slot), or, without
        one that will, started afresh. Either ends with this worker (shim.py's leash)."""
        self.env[LEASH_ENV] = str(os.getpid())
        if self.warm is not None:
            self.proc = fork_from(self.warm, self.env, self.cwd, self._cold)
        if self.proc is None:
            self.proc = subprocess.Popen(
                [self.python, "-c", BOOT, str(SHIM)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )
        self._reader = threading.Thread(
            target=self._copy_stderr, args=(self.proc,), daemon=True, name="harness-stderr"
        )
        self._reader.start()

    def _cold(self, why: str) -> None:
        logger.debug("harness interpreter started afresh, not forked from the warm one: {}", why)

    def _copy_stderr(self, proc: Process) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            end = line.endswith(END_OF_OUTPUT)  # after a last line left without its newline, too
            if end:
                line = line[: -len(END_OF_OUTPUT)]
            if line:
                self.log(line.decode(errors="replace").rstrip("\n"))
            if end:
                self._output_read.set()

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # a fork not yet its own group leader
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(proc.pid, signal.SIGKILL)
        for stream in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
        proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=2)

    def ask(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        """Send one request and wait for its reply (interruptible between short waits)."""
        proc = self.proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        self._output_read.clear()
        asked = self._next_id()
        try:
            proc.stdin.write(json.dumps({**msg, "id": asked}).encode() + b"\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise InterpreterExited(self._ended(proc)) from None
        fd = proc.stdout.fileno()
        while True:
            while b"\n" not in self._buffer:
                if not fd_ready(fd, POLL_SECONDS):
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise InterpreterExited(self._ended(proc))
                self._buffer += chunk
            line, _, self._buffer = self._buffer.partition(b"\n")
            try:
                reply = json.loads(line)
            except ValueError:
                reply = None
            if isinstance(reply, dict) and reply.pop("id", None) == asked:
                break
            # a late reply to a request given up on (a cut record's), or a line not the shim's
            logger.debug(
                "harness interpreter: a line on its reply pipe not for request {}: {!r}", asked, line[:200]
            )
        # its lines logged under its record's mark, not the next's
        self._output_read.wait(OUTPUT_WAIT_SECONDS)
        return reply

    def _next_id(self) -> str:
        """A new request's id: unique in this worker (its pid) for this interpreter's life."""
        self._asked += 1
        return f"{os.getpid()}-{self._asked}"

    def _ended(self, proc: Process) -> str:
        try:
            code = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return f"the harness's interpreter ({self.python}) stopped answering"
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        return f"the harness's interpreter ({self.python}) ended ({how})"
