"""One interpreter of the user's (harness.python) for all of a worker's slots: the shim in its host mode
(runner/proc/shim.py), each slot a thread of it.

A worker of K slots used to start K interpreters, each importing the harness's libraries (3-5 s of CPU each
for a stack such as LiteLLM's), and the warm interpreter rightly forks none of them once an import started
a thread: at -c 16 a harness's own venv ran at 1.33 x its sequential CLI, where the same code in the runner's
interpreter ran at 7.58 x. Hosted, a worker imports them once (forked from the warm interpreter where it
may), whatever its slot count: the interpreters a run starts follow its workers, and so its cores.

The worker's slot threads share this process: each `ask`s for its own slot and waits for its own reply in
short waits, so the time limit lands as before. A slot cut short is `cut` in the host (an exception raised
into its thread); a thread that does not let go in time is stuck where nothing reaches it, and its worker
retires as it does for a slot thread of its own (runner/worker/main.py). The process dying (kill -9, a
crash) ends every slot's record in it with InterpreterExited, each once; the next call starts another.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from loguru import logger

from runner.proc.interpreter import POLL_SECONDS, Interpreter, InterpreterExited, Process
from runner.proc.shim import END_OF_OUTPUT, HOST_ENV, SLOT_MARK


class Hosted(Interpreter):
    """The worker's one shim, shared by its slots (`join` / `leave`); started at the first `load`."""

    def __init__(
        self,
        python: str,
        env: Mapping[str, str],
        cwd: Path,
        log: Callable[[int, str], None],
        *,
        warm: str | None = None,
    ) -> None:
        super().__init__(python, {**env, HOST_ENV: "1"}, cwd, lambda line: log(-1, line), warm=warm)
        self.slot_log = log
        self.replies: dict[int, queue.Queue[tuple[int, dict[str, Any] | str]]] = {}  # (generation, reply)
        self.outputs: dict[int, threading.Event] = {}
        self.send_lock = threading.Lock()
        self.start_lock = threading.RLock()  # starts, stops and the reply reader's last word, one at a time
        self.loaded: dict[str, Any] | None = None
        self.generation = 0  # how many processes this one has been: a reply of an earlier one is stale
        self.sandbox: str | None = None  # the sandbox whose values its process was started with
        self.slots_lock = threading.Lock()

    def _slot(self, n: int) -> queue.Queue[tuple[int, dict[str, Any] | str]]:
        with self.slots_lock:  # a slot's thread and the reply reader may both ask first
            if n not in self.replies:
                self.replies[n], self.outputs[n] = queue.Queue(), threading.Event()
            return self.replies[n]

    def stop(self) -> None:
        with self.start_lock:
            super().stop()

    def serve(self, sandbox: str, env: Mapping[str, str]) -> None:
        """The worker's sandbox, and the environment a process of it starts with: a new sandbox (a replaced
        one: its records are lost already) means a new process, whose process-wide values are its."""
        with self.start_lock:
            if self.sandbox is None:  # started ahead of any sandbox (every slot's value parked): it serves on
                self.sandbox = sandbox
            elif sandbox != self.sandbox:
                self.sandbox, self.env = sandbox, {**self.env, **env}
                self.stop()
                self.loaded = None

    def load(self, message: Callable[[], Mapping[str, Any]]) -> dict[str, Any]:
        """Started and loaded once (again after the process ended): the first slot's `load` does it, with the
        load `message()` (made only then: every record asks, and the message reads the run's environment)."""
        with self.start_lock:
            if self.proc is not None and self.loaded is not None:
                return self.loaded
            msg = message()
            self.stop()
            self.start()
            self.generation += 1
            reader = threading.Thread(
                target=self._read_replies,
                args=(self.proc, self.generation),
                daemon=True,
                name="harness-replies",
            )
            reader.start()
            reply = self.ask_slot(0, {**msg, "op": "load"})
            if "error" not in reply:
                self.loaded = reply
            return reply

    def ask_slot(self, n: int, msg: Mapping[str, Any]) -> dict[str, Any]:
        """One request of slot `n`, and its reply (interruptible between short waits)."""
        replies = self._slot(n)
        while not replies.empty():  # a reply the slot stopped waiting for (its record was cut)
            replies.get_nowait()
        self.outputs[n].clear()
        proc, generation = self.proc, self.generation
        if proc is None or proc.stdin is None:
            raise InterpreterExited("the harness's interpreter is not running")
        try:
            with self.send_lock:
                asked = self._next_id()
                proc.stdin.write(json.dumps({**msg, "slot": n, "id": asked}).encode() + b"\n")
                proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):  # ended, or replaced meanwhile (its pipe closed)
            raise InterpreterExited(f"the harness's interpreter ({self.python}) is gone") from None
        while True:
            try:
                made_by, reply = replies.get(timeout=POLL_SECONDS)
            except queue.Empty:
                continue
            if made_by != generation:  # of a process this one replaced: not this request's
                continue
            if isinstance(reply, str):  # the process ended: why, as the reply reader found it
                raise InterpreterExited(reply)
            assert isinstance(reply, dict)
            # a reply to another request (a cut record's, late; a line the harness wrote on the pipe) is
            # not this one's
            if reply.pop("id", None) == asked or (msg.get("op") == "cut" and "cut" in reply):
                break
        self.outputs[n].wait(OUTPUT_WAIT)  # its lines logged under its record's mark, not the next's
        return reply

    def cut(self, n: int) -> bool:
        """Slot n's record is past its time limit: its thread in the host let go of it (True), or is stuck
        where an exception does not reach (False: nothing more may run on that slot)."""
        try:
            return bool(self.ask_slot(n, {"op": "cut"}).get("cut"))
        except InterpreterExited:
            return True  # the process is gone: so is the thread

    def _read_replies(self, proc: Process, generation: int) -> None:
        assert proc.stdout is not None
        # its pipe closed under it: the process is being replaced
        with contextlib.suppress(OSError, ValueError):
            for line in proc.stdout:
                with contextlib.suppress(ValueError):
                    reply = json.loads(line)
                    self._slot(int(reply.pop("slot", 0))).put((generation, reply))
        # Not under start_lock: a load holds it while it waits for this very reply (a process that dies while
        # importing would deadlock the worker: "in flight: 0 of 2" for minutes).
        if self.proc is proc:
            why = self._ended(proc)
            self.loaded = None
        else:
            why = f"the harness's interpreter ({self.python}) was replaced"
        for n in list(self.replies):  # every slot waiting is told
            self._slot(n).put((generation, why))
            self.outputs[n].set()

    def _copy_stderr(self, proc: Process) -> None:
        assert proc.stderr is not None
        end = END_OF_OUTPUT[:-1] + b" "
        for line in proc.stderr:
            if line.startswith(end):
                with contextlib.suppress(ValueError):
                    n = int(line[len(end) :])
                    self._slot(n)
                    self.outputs[n].set()
                continue
            n = -1
            if line.startswith(SLOT_MARK):
                head, _, line = line[len(SLOT_MARK) :].partition(b" ")
                with contextlib.suppress(ValueError):
                    n = int(head)
            if line.strip():
                self.slot_log(n, line.decode(errors="replace").rstrip("\n"))


OUTPUT_WAIT = 1.0  # as Interpreter's: a process that printed past its pipe's end is not waited for longer


class Hosts:
    """The worker's hosted interpreter, shared by its slots' harnesses (one process per worker)."""

    _lock = threading.Lock()
    _host: Hosted | None = None
    _members = 0

    @classmethod
    def join(cls, make: Callable[[], Hosted]) -> Hosted:
        with cls._lock:
            if cls._host is None:
                cls._host = make()
            cls._members += 1
            return cls._host

    @classmethod
    def leave(cls) -> None:
        with cls._lock:
            cls._members -= 1
            host = cls._host
            if cls._members > 0 or host is None:
                return
            cls._host = None
        host.stop()
        logger.debug("harness interpreter of worker {} stopped", os.getpid())
