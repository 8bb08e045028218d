"""Runs a user's `fn(record, ctx)` inside the user's own interpreter (harness.python): stdlib only.

The worker starts `THAT_PYTHON shim.py` and talks to it over the shim's stdin and a copy of its original
stdout, one JSON document per line each way; the harness's own prints and logging go to stderr, which the
worker copies into its log, marked with the record. Nothing of the runner is imported here (this file is
run by path), so the harness's virtualenv needs nothing of ours and may pin whatever SDK versions it likes.

One slot (a worker of one slot):

    worker -> shim   {"op": "load", "entrypoint": "pkg.mod:fn", "pythonpath": [...], "cwd": ..., "env": {...}}
                     {"op": "call", "record": {...}, "ctx": {...}, "env": {...}}
    shim -> worker   {"ok": true} | {"output": {...}} | {"error": "traceback", "kind": "raised" | "load"}
                     and on stderr, after each request's own lines, END_OF_OUTPUT

Every request carries an "id" its reply repeats: a reply to another request (one a child the harness forked
wrote late, a line the harness wrote to the reply pipe itself) is never taken for this one's.

A worker's K slots (HOST_ENV set): one shim hosts them all, each slot a thread of it, so the harness's
libraries are imported once per worker, not once per slot. Every request and reply carries its "slot";
"load" comes once, with "per_slot" (the variables that differ between slots: each slot thread reads its
own through a slot-aware os.environ, runner/proc/slot_env.py); a "call" runs on its slot's thread;
{"op": "cut", "slot": k} raises SlotCut in slot k's thread (the worker's time limit) and answers
{"slot": k, "cut": true} once the thread let go of the record, or false if it did not within CUT_SECONDS
(blocked in C: the worker then retires, as with a thread of its own). What a slot's thread prints is marked
with SLOT_MARK and its slot, and its END_OF_OUTPUT carries its slot too.

`calling` is shared with the in-process kind, so both call a function the same way.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import logging
import os
import queue
import select
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

END_OF_OUTPUT = b"\x00pgsr: end of output\n"  # on stderr after each request's own lines
LEASH_ENV = "RUNNER_LEASH_PID"  # the worker this shim serves: the shim's process group ends with it
HOST_ENV = "RUNNER_SHIM_HOST"  # set: this shim hosts all its worker's slots, one thread each
SLOT_MARK = b"\x01pgsr-slot "  # a hosted slot's printed line starts with this, its slot and a space
CUT_SECONDS = 2.0  # how long a cut slot's thread has to let go of its record


def calling(fn: Callable[..., Any]) -> Callable[[dict[str, Any], Any], Any]:
    """Call fn the way it is written: fn(record, ctx), fn(record, **params), or fn(record).

    A harness's existing function (e.g. `run_conversation(conv, *, model, provider)`) runs as it
    is: run parameters fill the keyword parameters they name, `ctx` goes to a parameter of that name
    or to a second positional one.
    """
    params = inspect.signature(fn).parameters
    takes_all = any(p.kind is p.VAR_KEYWORD for p in params.values())
    positional = [p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    ctx_positional = (
        len(positional) >= 2
        and positional[1].name not in ("ctx", "context")
        and positional[1].default is inspect.Parameter.empty
    )
    ctx_name = next((n for n in ("ctx", "context") if n in params), None)

    def call(record: dict[str, Any], ctx: Any) -> Any:
        kwargs = {k: v for k, v in ctx.params.items() if takes_all or (k in params and k != ctx_name)}
        if ctx_name:
            kwargs[ctx_name] = ctx
        elif ctx_positional:
            return fn(record, ctx, **kwargs)
        return fn(record, **kwargs)

    return call


def load_entrypoint(spec: str) -> Callable[..., Any]:
    module, _, name = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise RuntimeError(f"cannot load harness entrypoint {spec}: {type(e).__name__}: {e}") from e
    if not callable(fn):
        raise RuntimeError(f"harness entrypoint {spec} is not callable")
    return fn


class Database:
    """One database of the slot, as the in-process kind's ctx.db has it."""

    def __init__(self, host: str, port: int, user: str, password: str, name: str) -> None:
        self.host, self.port, self.user, self.password, self.name = host, port, user, password, name

    def __repr__(self) -> str:
        return f"Database(host={self.host!r}, port={self.port}, user={self.user!r}, name={self.name!r})"

    def dsn(self) -> str:
        def q(v: object) -> str:
            return "'" + str(v).replace("\\", "\\\\").replace("'", "\\'") + "'"

        return (
            f"host={q(self.host)} port={self.port} user={q(self.user)} password={q(self.password)} "
            f"dbname={q(self.name)}"
        )

    def url(self) -> str:
        return (
            f"postgresql://{quote(self.user, safe='')}:{quote(self.password, safe='')}"
            f"@{self.host}:{self.port}"
            f"/{quote(self.name, safe='')}"
        )


class Context:
    """What the function gets beside the record: the same attributes as the in-process kind's."""

    def __init__(self, data: Mapping[str, Any], env: Mapping[str, str]) -> None:
        self.run: str = data["run"]
        self.params: dict[str, Any] = data["params"]
        self.worker: int = data["worker"]
        self.attempt: int = data["attempt"]
        self.record_id: str = data["record_id"]
        self.epoch: int = data.get("epoch", 1)
        self.databases = {n: Database(**d) for n, d in data["databases"].items()}
        self.db: Database = self.databases[data["main"]]
        self.env = dict(env)
        self.scratch = Path(data["scratch"])
        self.logger = logging.getLogger("harness")

    def dsn(self, database: str | None = None) -> str:
        return (self.databases[database] if database else self.db).dsn()


def _environ(env: Mapping[str, str]) -> None:
    """The slot's whole environment, as a process of its own starts with."""
    os.environ.clear()
    os.environ.update(env)


class Shim:
    def __init__(self) -> None:
        self.fn: Callable[[dict[str, Any], Any], Any] | None = None
        self.given: dict[str, str] = {}  # what the runner last set: its next record changes only what differs

    def _record_env(self, env: Mapping[str, str]) -> None:
        """A record's environment over the slot's: only what the runner's values changed since the last record
        (its run, its trial) is written, so what the harness wrote itself stays, as in its own CLI's process
        that runs records one after another."""
        for k in self.given.keys() - env.keys():
            os.environ.pop(k, None)
        for k, v in env.items():
            if self.given.get(k) != v:
                os.environ[k] = v
        self.given = dict(env)

    def load(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        if not msg.get("keep_env"):
            _environ(msg["env"])
            self.given = dict(msg["env"])
        for p in reversed(msg["pythonpath"]):
            if p not in sys.path:
                sys.path.insert(0, p)
        os.chdir(msg["cwd"])  # logging is left as the harness sets it up: its lines, its format, its levels
        self.fn = calling(load_entrypoint(msg["entrypoint"]))
        return {"ok": True}

    def call(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        assert self.fn is not None, "call before load"
        if not msg.get("hosted"):  # a hosted slot's environment is its thread's overlay (SlotHost.set_env)
            self._record_env(msg["env"])
        out = self.fn(msg["record"], Context(msg["ctx"], msg["env"]))
        if not isinstance(out, dict):
            return {"error": f"the harness returned {type(out).__name__}, not a dict", "kind": "raised"}
        try:
            json.dumps(out, allow_nan=False)  # NaN is no JSON: read back, it would be null, silently
        except (TypeError, ValueError, RecursionError) as e:
            return {
                "error": f"the harness's output cannot be stored as JSON: {type(e).__name__}: {e}",
                "kind": "raised",
            }
        return {"output": out}

    def answer(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        try:
            return self.load(msg) if msg["op"] == "load" else self.call(msg)
        # SystemExit too: a module that exits at import (an argparse main, an env guard) fails the load with
        # its traceback, where the process ending would say only its exit code
        except (Exception, SystemExit):
            tb = traceback.format_exc(limit=-12)
            sys.stderr.write(tb)
            return {"error": tb.strip(), "kind": "load" if msg["op"] == "load" else "raised"}


class SlotCut(BaseException):
    """Raised into a hosted slot's thread: its record is past the worker's time limit."""


class _Marked:
    """sys.stdout / sys.stderr for a hosted shim: a slot thread's lines are marked with its slot (the worker
    logs them under that slot's record); the shim's own threads write unmarked."""

    def __init__(self, slots: threading.local, lock: threading.Lock) -> None:
        self.slots, self.lock = slots, lock
        self.pending: dict[int, str] = {}

    def write(self, text: str) -> int:
        slot = getattr(self.slots, "n", -1)
        buf = self.pending.get(slot, "") + text
        *lines, rest = buf.split("\n")
        self.pending[slot] = rest
        if lines:
            self._emit(slot, lines)
        return len(text)

    def _emit(self, slot: int, lines: list[str]) -> None:
        mark = SLOT_MARK + str(slot).encode() + b" " if slot >= 0 else b""
        data = b"".join(mark + line.encode(errors="replace") + b"\n" for line in lines)
        with self.lock:
            os.write(2, data)

    def flush(self) -> None:
        slot = getattr(self.slots, "n", -1)
        if self.pending.get(slot):
            self._emit(slot, [self.pending.pop(slot)])

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return 2


class _Slot(threading.Thread):
    """One hosted slot: runs its calls one after another; `cut` raises SlotCut into the call it runs."""

    def __init__(self, n: int, host: SlotHost) -> None:
        super().__init__(name=f"pgsr-slot-{n}", daemon=True)
        self.n, self.host = n, host
        self.calls: queue.Queue[dict[str, Any]] = queue.Queue()
        self.lock = threading.Lock()
        self.busy = False
        self.idle = threading.Event()
        self.idle.set()

    def run(self) -> None:
        self.host.slots_local.n = self.n
        while True:
            msg = self.calls.get()
            reply: dict[str, Any] | None = None
            try:
                self.host.set_env(msg["env"])
                with self.lock:
                    self.busy = True
                    self.idle.clear()
                try:
                    reply = self.host.shim.answer(msg)
                finally:
                    with self.lock:
                        self.busy = False
            except SlotCut:
                reply = None  # the worker gave up on this record: nothing to answer
            except BaseException:  # whatever the harness raised (SystemExit too), this slot serves on
                reply = {"error": traceback.format_exc(limit=-12), "kind": "raised"}
            if reply is not None:
                reply["id"] = msg.get("id")
            try:
                with contextlib.suppress(SlotCut):
                    sys.stdout.flush()
                    self.host.done(self.n, reply)
            finally:
                self.idle.set()

    def cut(self) -> bool:
        with self.lock:
            if self.busy:
                _raise_in(self.ident or 0, SlotCut)
        return self.idle.wait(CUT_SECONDS)


def _raise_in(thread: int, exc: type[BaseException]) -> None:
    import ctypes

    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), ctypes.py_object(exc))


class SlotHost:
    """A worker's slots in this one process: a thread each; replies written one at a time."""

    def __init__(self, replies: Any) -> None:
        self.replies = replies
        self.shim = Shim()
        self.write = threading.Lock()
        self.slots_local = threading.local()
        self.slots: dict[int, _Slot] = {}
        self.slot_env: Any = None

    def serve(self, requests: Any) -> None:
        for line in requests:
            msg = json.loads(line)
            n = int(msg.get("slot", 0))
            if msg["op"] == "load":
                self.slot_env = _slot_env()
                self.slot_env.install(msg.get("per_slot", []))
                self.slot_env.own(list(os.environ))  # every slot is given a whole record's environment
                self.done(n, {**self.shim.answer({**msg, "keep_env": True}), "id": msg.get("id")})
            elif msg["op"] == "cut":
                slot = self.slots.get(n)
                self.answer({"slot": n, "id": msg.get("id"), "cut": slot.cut() if slot is not None else True})
            else:
                if n not in self.slots:
                    self.slots[n] = _Slot(n, self)
                    self.slots[n].start()
                self.slots[n].calls.put({**msg, "hosted": True})

    def set_env(self, env: dict[str, str]) -> None:
        self.slot_env.set_slot_env(env)

    def done(self, n: int, reply: dict[str, Any] | None) -> None:
        sys.stderr.flush()
        with self.write:
            os.write(2, END_OF_OUTPUT[:-1] + f" {n}".encode() + b"\n")
        if reply is not None:
            self.answer({**reply, "slot": n})

    def answer(self, reply: dict[str, Any]) -> None:
        data = json.dumps(reply).encode() + b"\n"
        with self.write:
            self.replies.write(data)
            self.replies.flush()


def _slot_env() -> Any:
    """runner/proc/slot_env.py beside this file, as a module (stdlib only, run by path as this one is)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_runner_slot_env", Path(__file__).with_name("slot_env.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _leash(worker: int) -> None:
    """End this shim's whole process group (the harness's children too) the moment its worker ends, kill -9
    included, instead of when the record it runs would have: its calls would be paid for nothing.

    The watch is a process of its own, forked before the harness's code is imported: a thread would be one
    more thread in the harness's process (a harness that forks, or counts its threads, would meet it)."""
    try:
        fds = [os.pidfd_open(worker), os.pidfd_open(os.getpid())]
    except OSError:  # gone already (or no pidfd: Linux < 5.3, where the shim ends at its next request)
        if not os.path.exists(f"/proc/{worker}"):
            os.killpg(0, signal.SIGKILL)
        return
    if os.fork():
        for fd in fds:
            os.close(fd)
        return
    try:  # the watch: readable once the worker, or this shim, has ended
        ready, _, _ = select.select(fds, [], [])
        if fds[0] in ready:
            os.killpg(0, signal.SIGKILL)
    finally:
        os._exit(0)


def main() -> None:
    if (worker := os.environ.get(LEASH_ENV, "")).isdigit():
        _leash(int(worker))
    # The protocol keeps the original stdin and stdout to itself; the harness's prints go to stderr.
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    if os.environ.get(HOST_ENV):
        host = SlotHost(replies)
        sys.stdout = sys.stderr = _Marked(host.slots_local, host.write)
        host.serve(requests)
        return
    sys.stdout = sys.stderr
    shim = Shim()
    for line in requests:
        msg = json.loads(line)
        reply = shim.answer(msg)
        sys.stderr.flush()
        os.write(2, END_OF_OUTPUT)  # what the record printed is all ahead of this: its lines get its mark
        replies.write(json.dumps({**reply, "id": msg.get("id")}).encode() + b"\n")
        replies.flush()


if __name__ == "__main__":
    main()
