"""The user's own interpreter (harness.python) as a resource: one shim process per slot.

The worker speaks the shim's line protocol (runner/harness/shim.py) over pipes. Replies are waited
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
from typing import Any

from runner.resources import Resource, fd_ready

SHIM = Path(__file__).with_name("shim.py")
# Run by path without its directory on sys.path (ours holds modules named base, env, command...).
BOOT = "import runpy, sys; path = sys.argv[1]; sys.argv = sys.argv[1:]; runpy.run_path(path, run_name='__main__')"
POLL_SECONDS = 0.1  # how often a wait for a reply gives the time limit a chance to land


class InterpreterExited(Exception):
    """The harness's interpreter ended (the function killed its process, a crash, a bad venv)."""


class Interpreter(Resource):
    def __init__(self, python: str, env: Mapping[str, str], cwd: Path, log: Callable[[str], None]) -> None:
        self.python, self.env, self.cwd, self.log = python, dict(env), cwd, log
        self.proc: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen([self.python, "-c", BOOT, str(SHIM)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env, cwd=self.cwd,
                                     start_new_session=True)
        self._reader = threading.Thread(target=self._copy_stderr, args=(self.proc,), daemon=True,
                                        name="harness-stderr")
        self._reader.start()

    def _copy_stderr(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.log(line.decode(errors="replace").rstrip("\n"))

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
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
        try:
            proc.stdin.write(json.dumps(msg).encode() + b"\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise InterpreterExited(self._ended(proc)) from None
        fd = proc.stdout.fileno()
        while b"\n" not in self._buffer:
            if not fd_ready(fd, POLL_SECONDS):
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise InterpreterExited(self._ended(proc))
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def _ended(self, proc: subprocess.Popen[bytes]) -> str:
        try:
            code = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return f"the harness's interpreter ({self.python}) stopped answering"
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        return f"the harness's interpreter ({self.python}) ended ({how})"
