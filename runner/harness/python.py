"""The `python` harness: a user's function, `fn(record: dict, ctx) -> dict`, called once per record
(or `fn(record, **params)`: an existing function runs as written, see `calling`).

By default (`isolation: process`) each slot runs its records in a process of its own, the shim
(runner/proc/shim.py) in the runner's interpreter or in `harness.python`, forked from the run's warm
interpreter where the harness's imports allow it: module globals, first-use caches, the working directory,
os.environ, signal handlers and crashes are the slot's, as in the harness's own CLI that runs records one
after another. A slot process that dies under a record loses only that record: it is discarded and run
again (SlotProcessDied, judged as a lost sandbox is), never charged to a neighbour.

`isolation: thread` is the older, opt-in shape (docs/harness.md says what slots then share): the function
is imported inside the worker (after `pythonpath:` entries go first on sys.path, and after the connection
variables are in os.environ, so a module that reads DB_HOST at import sees the sandbox) and each slot is a
thread of it; with `harness.python`, a worker's slots are threads of one shim (proc/hosted.py). An
exception becomes this record's error with its traceback.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loguru import logger

from runner.errors import SlotProcessDied
from runner.harness.base import Database, Harness, Outcome, SandboxInfo, Task, WorkerInfo
from runner.harness.env import harness_env, marked_env, per_slot_keys
from runner.harness.settings import HarnessSettings
from runner.proc.hosted import Hosted, Hosts
from runner.proc.interpreter import Interpreter, InterpreterExited
from runner.proc.shim import calling, load_entrypoint
from runner.proc.slot_env import install, set_slot_env
from runner.proc.warm import WarmInterpreter, known_refusal, marker, verdict_key


def isolated(hs: HarnessSettings) -> bool:
    """Each slot a process of its own (the default), not a thread of a shared interpreter."""
    return hs.kind == "python" and hs.block.isolation == "process"


def slot_python(hs: HarnessSettings) -> Path | None:
    """The interpreter a slot's process runs: harness.python, else the runner's own (isolation: process);
    None where slots are threads of the worker."""
    if hs.python is not None:
        return hs.python
    return Path(sys.executable) if isolated(hs) else None


def warm_interpreter(hs: HarnessSettings) -> WarmInterpreter | None:
    """The run's warm interpreter (proc/zygote.py), for a python harness whose slots are processes: every
    slot's shim is forked from it with the harness's libraries imported once. None where an earlier run's
    refused for the same interpreter, load and installed packages: each slot's interpreter then starts at
    once, instead of after a warm one has imported everything only to refuse again."""
    python = slot_python(hs)
    if hs.kind != "python" or python is None or not hs.block.warm:
        return None
    verdicts = _verdicts(hs)
    if (why := known_refusal(verdicts, verdict_key(str(python), _load(hs)))) is not None:
        logger.info(
            "harness interpreter: no warm one ({}, an earlier run found; it is asked again once the "
            "virtualenv's packages change): each worker's interpreter imports its libraries itself",
            why,
        )
        return None
    mark = marker()
    return WarmInterpreter(str(python), marked_env(hs, mark), hs.cwd, _load(hs), mark, verdicts)


def _verdicts(hs: HarnessSettings) -> Path:
    from runner.cache import DEFAULT_DIR

    return Path(hs.cache_dir or DEFAULT_DIR)


def _load(hs: HarnessSettings) -> dict[str, Any]:
    """What the shim's `load` (and the warm interpreter) needs: where the entrypoint is found."""
    return {
        "entrypoint": hs.block.entrypoint,
        "cwd": str(hs.cwd),
        "pythonpath": [str(p) for p in hs.pythonpath],
    }


_labels: dict[int, str] = {}  # per slot of this worker, the record its hosted thread runs (for its lines)


def _slot_log(n: int, line: str) -> None:
    logger.info("harness {} | {}", _labels.get(n, "-") if n >= 0 else "-", line)


def _quietly(load: Any, msg: dict[str, Any]) -> None:
    """A load ahead of the sandbox: what fails here fails again, and is said, when a slot attaches."""
    with contextlib.suppress(Exception):
        load(msg)


def _stay() -> None:
    """Hold this slot's thread where it is, for good: its thread in the harness's interpreter still runs the
    record it was cut from, on this slot's databases, so nothing more may run here. The worker's watch finds
    the slot stuck past its limit and retires the worker, which ends the interpreter with it."""
    while True:
        with contextlib.suppress(BaseException):
            time.sleep(60)


@dataclass(frozen=True)
class Context:
    """What the function gets beside the record."""

    run: str
    params: Mapping[str, Any]
    worker: int
    attempt: int
    record_id: str
    db: Database
    databases: Mapping[str, Database]
    env: Mapping[str, str]
    scratch: Path
    logger: Any
    epoch: int = 1  # which trial of the record (config epochs), 1 without

    def dsn(self, database: str | None = None) -> str:
        return (self.databases[database] if database else self.db).dsn()


class PythonHarness(Harness):
    interpreter: Interpreter | None = None  # harness.python: the slot's process in the user's interpreter
    host: Hosted | None = None  # harness.python with slots: the worker's one process for all of them
    current = "-"  # the record running, for the lines its interpreter prints

    def __init__(self, info: WorkerInfo) -> None:
        super().__init__(info)
        hs = info.settings
        # where the function runs: a shim process of this slot's own (isolation: process, or harness.python
        # with one slot), a thread of the worker's one shim (hosted), or this worker's own thread
        self.own_process = isolated(hs) or (hs.python is not None and info.slots <= 1)
        self.hosted = not self.own_process and hs.python is not None
        if self.hosted and info.slot == 0:
            self._host_ahead()

    def _host_ahead(self) -> None:
        """The worker's hosted interpreter started and loaded now, while its sandbox boots (its imports are
        seconds of CPU for a heavy stack): every value that differs between slots, or is the sandbox's, is a
        marker at load, parked for the slots' own (harness/env.marked_env, proc/slot_env.py)."""
        hs = self.info.settings
        python = hs.python
        assert python is not None
        env = marked_env(hs, marker())
        keys = {k for k in env if k not in os.environ} | {
            "DB_NAME",
            "POSTGRES_DB",
            "PGDATABASE",
            "RUNNER_RUN",
            "RUNNER_EPOCH",
        }
        host = self.host = Hosts.join(
            lambda: Hosted(str(python), env, hs.cwd, _slot_log, warm=self.info.warm)
        )
        msg = {"env": env, "per_slot": sorted(keys), **_load(hs)}
        threading.Thread(target=_quietly, args=(host.load, msg), daemon=True, name="harness-ahead").start()

    def attach(self, sandbox: SandboxInfo) -> None:
        super().attach(sandbox)
        if self.hosted:
            self._hosted(sandbox)
            return
        if self.own_process:
            self._stop_interpreter()  # a new sandbox: a fresh import sees its variables
            self._interpreter()
            return
        self._import(sandbox)

    def before_threads(self, sandbox: SandboxInfo) -> None:
        """Make os.environ slot-aware and park at UNSET every variable a slot sets: here, once, before the
        slot threads start; from a slot thread, writing the environment races other threads reading it
        from C (libpq's getenv). A subprocess or C library that reads a parked variable gets a value naming
        the problem, not another slot's database."""
        hs = self.info.settings
        if self.info.slots <= 1 or self.own_process or self.hosted:
            return
        keys = set(per_slot_keys(hs, sandbox))
        for run in hs.runs:
            keys |= (
                harness_env(hs, sandbox, run, gateway=self.gateway_env(run.name)).keys() - os.environ.keys()
            )
        install(keys)

    def _import(self, sandbox: SandboxInfo) -> None:
        hs = self.info.settings
        if self.info.slots > 1:  # slots run in threads of one process: each reads its own variables
            install(per_slot_keys(hs, sandbox))
        # Environment first: a harness module may read its settings at import time.
        self._export(harness_env(hs, sandbox, hs.runs[0], gateway=self.gateway_env(hs.runs[0].name)))
        for p in reversed(hs.pythonpath):
            if str(p) not in sys.path:
                sys.path.insert(0, str(p))
        os.chdir(hs.cwd)
        assert hs.block.entrypoint is not None
        self.fn = calling(load_entrypoint(hs.block.entrypoint))

    def run(self, tasks: list[Task]) -> Iterator[tuple[Task, Outcome]]:
        assert self.sandbox is not None
        for task in tasks:
            env = harness_env(
                self.info.settings,
                self.sandbox,
                task.run,
                gateway=self.gateway_env(task.run.name),
                epoch=task.epoch,
            )
            if self.host is not None:
                yield task, self._call_hosted(task, env)
                continue
            if self.own_process:
                yield task, self._call_there(task, env)
                continue
            self._export(env)
            ctx = Context(
                run=task.run.name,
                params=task.run.params,
                worker=self.info.worker,
                attempt=task.attempt,
                record_id=task.record_id,
                epoch=task.epoch,
                db=self.sandbox.db,
                databases=self.sandbox.databases,
                env=env,
                scratch=self.info.scratch,
                logger=logger.bind(record=task.record_id, run=task.run.name),
            )
            yield task, self._call(task, ctx)

    # ------------------------------------------------------------------ harness.python: its own interpreter
    def _interpreter(self) -> Interpreter:
        """The slot's shim process, started and loaded (again after one was cut short)."""
        if self.interpreter is not None:
            return self.interpreter
        hs, sb = self.info.settings, self.sandbox
        assert sb is not None
        python = slot_python(hs)
        assert python is not None
        env = harness_env(hs, sb, hs.runs[0], gateway=self.gateway_env(hs.runs[0].name))
        interp = Interpreter(str(python), env, hs.cwd, self._log_line, warm=self.info.warm)
        interp.start()
        try:
            reply = interp.ask({"op": "load", "env": env, **_load(hs)})
        except BaseException:
            interp.stop()
            raise
        if "error" in reply:
            interp.stop()
            raise RuntimeError(
                f"cannot load harness entrypoint {hs.block.entrypoint} in {python}:\n{reply['error']}"
            )
        self.interpreter = interp
        return interp

    def _log_line(self, line: str) -> None:
        logger.info("harness {} | {}", self.current, line)

    def _call_there(self, task: Task, env: dict[str, str]) -> Outcome:
        assert self.sandbox is not None
        self.current = f"{task.run.name}:{task.record_id}"
        try:
            reply = self._interpreter().ask(
                {"op": "call", "record": task.record, "ctx": self._ctx(task), "env": env}
            )
        except InterpreterExited as e:  # the slot's process died under this record: it alone runs again
            self._stop_interpreter()
            raise SlotProcessDied(str(e)) from None
        # the time limit, or the worker stopping: the process is midway through a record
        except BaseException:
            self._stop_interpreter()
            raise
        finally:
            self.current = "-"
        if "error" in reply:
            logger.warning("harness raised on {}:{}\n{}", task.run.name, task.record_id, reply["error"])
            return Outcome.failed(reply["error"])
        return Outcome(reply["output"])

    # ------------------------------------------------------------------ harness.python with slots: hosted
    def _hosted(self, sandbox: SandboxInfo) -> None:
        """The worker's hosted interpreter (proc/hosted.py), joined once and loaded: its environment holds
        every variable that differs between slots parked (proc/slot_env.py), as the in-process kind's."""
        hs = self.info.settings
        base = harness_env(hs, sandbox, hs.runs[0], gateway=self.gateway_env(hs.runs[0].name))
        if self.host is None:
            python = hs.python
            assert python is not None
            self.host = Hosts.join(lambda: Hosted(str(python), base, hs.cwd, _slot_log, warm=self.info.warm))
        self.host.serve(sandbox.id, base)
        self._load_hosted()

    def _load_hosted(self) -> Hosted:
        assert self.host is not None and self.sandbox is not None
        hs, sandbox = self.info.settings, self.sandbox

        def message() -> dict[str, Any]:
            keys = set(per_slot_keys(hs, sandbox))
            for run in hs.runs:
                keys |= (
                    harness_env(hs, sandbox, run, gateway=self.gateway_env(run.name)).keys()
                    - os.environ.keys()
                )
            env = harness_env(hs, sandbox, hs.runs[0], gateway=self.gateway_env(hs.runs[0].name))
            return {"env": env, "per_slot": sorted(keys), **_load(hs)}

        reply = self.host.load(message)
        if "error" in reply:
            raise RuntimeError(
                f"cannot load harness entrypoint {hs.block.entrypoint} in {self.host.python}:\n"
                f"{reply['error']}"
            )
        return self.host

    def _call_hosted(self, task: Task, env: dict[str, str]) -> Outcome:
        assert self.sandbox is not None
        n = self.info.slot
        _labels[n] = f"{task.run.name}:{task.record_id}"
        try:
            host = self._load_hosted()
            reply = host.ask_slot(
                n, {"op": "call", "record": task.record, "ctx": self._ctx(task), "env": env}
            )
        except InterpreterExited as e:
            return Outcome.failed(str(e))
        except BaseException:  # the time limit, or the worker stopping: the slot's thread there is cut
            if self.host is not None and not self.host.cut(n):
                logger.error(
                    "slot {}: its thread in the harness's interpreter did not let go of {} when cut: "
                    "nothing more runs on this slot, and the worker retires",
                    n,
                    _labels[n],
                )
                _stay()
            raise
        finally:
            _labels[n] = "-"
        if "error" in reply:
            logger.warning("harness raised on {}:{}\n{}", task.run.name, task.record_id, reply["error"])
            return Outcome.failed(reply["error"])
        return Outcome(reply["output"])

    def _ctx(self, task: Task) -> dict[str, Any]:
        sb = self.sandbox
        assert sb is not None
        return {
            "run": task.run.name,
            "params": task.run.params,
            "worker": self.info.worker,
            "attempt": task.attempt,
            "record_id": task.record_id,
            "epoch": task.epoch,
            "main": sb.main,
            "scratch": str(self.info.scratch),
            "databases": {
                n: {"host": d.host, "port": d.port, "user": d.user, "password": d.password, "name": d.name}
                for n, d in sb.databases.items()
            },
        }

    def _stop_interpreter(self) -> None:
        interp, self.interpreter = self.interpreter, None
        if interp is not None:
            interp.stop()

    def detach(self) -> None:
        self._stop_interpreter()
        super().detach()

    def close(self) -> None:
        self._stop_interpreter()
        if self.host is not None:
            self.host = None
            Hosts.leave()

    def _export(self, env: dict[str, str]) -> None:
        if self.info.slots > 1:
            set_slot_env(env)
        else:
            os.environ.update(env)

    def _call(self, task: Task, ctx: Context) -> Outcome:
        try:
            out = self.fn(dict(task.record), ctx)
        except Exception:
            tb = traceback.format_exc(limit=-12)
            logger.warning("harness raised on {}:{}\n{}", task.run.name, task.record_id, tb)
            return Outcome.failed(tb.strip())
        if not isinstance(out, dict):
            return Outcome.failed(f"the harness returned {type(out).__name__}, not a dict")
        return Outcome(out)
