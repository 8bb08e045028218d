"""Runs a user's `fn(record, ctx)` inside the user's own interpreter (harness.python): stdlib only.

The worker starts `THAT_PYTHON shim.py` once per slot and talks to it over the shim's stdin and a
copy of its original stdout, one JSON document per line each way; the harness's own prints and
logging go to stderr, which the worker copies into its log, marked with the record. Nothing of the
runner is imported here (this file is run by path), so the harness's virtualenv needs nothing of
ours and may pin whatever SDK versions it likes.

    worker -> shim   {"op": "load", "entrypoint": "pkg.mod:fn", "pythonpath": [...], "cwd": ..., "env": {...}}
                     {"op": "call", "record": {...}, "ctx": {...}, "env": {...}}
    shim -> worker   {"ok": true} | {"output": {...}} | {"error": "traceback", "kind": "raised" | "load"}
                     and on stderr, after each request's own lines, END_OF_OUTPUT

`calling` is shared with the in-process kind, so both call a function the same way.
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import os
import select
import signal
import sys
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

END_OF_OUTPUT = b"\x00pgsr: end of output\n"  # on stderr after each request's own lines
LEASH_ENV = "RUNNER_LEASH_PID"  # the worker this shim serves: the shim's process group ends with it


def calling(fn: Callable[..., Any]) -> Callable[[dict[str, Any], Any], Any]:
    """Call fn the way it is written: fn(record, ctx), fn(record, **params), or fn(record).

    A harness's existing function (e.g. `run_conversation(conv, *, model, provider)`) runs as it
    is: run parameters fill the keyword parameters they name, `ctx` goes to a parameter of that name
    or to a second positional one.
    """
    params = inspect.signature(fn).parameters
    takes_all = any(p.kind is p.VAR_KEYWORD for p in params.values())
    positional = [p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    ctx_positional = len(positional) >= 2 and positional[1].name not in ("ctx", "context") and \
        positional[1].default is inspect.Parameter.empty
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
        return f"host={q(self.host)} port={self.port} user={q(self.user)} password={q(self.password)} " \
               f"dbname={q(self.name)}"

    def url(self) -> str:
        return (f"postgresql://{quote(self.user, safe='')}:{quote(self.password, safe='')}@{self.host}:{self.port}"
                f"/{quote(self.name, safe='')}")


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
    """The record's whole environment, as a subprocess would get it (this process is the slot's alone)."""
    os.environ.clear()
    os.environ.update(env)


class Shim:
    def __init__(self) -> None:
        self.fn: Callable[[dict[str, Any], Any], Any] | None = None

    def load(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        _environ(msg["env"])
        for p in reversed(msg["pythonpath"]):
            if p not in sys.path:
                sys.path.insert(0, p)
        os.chdir(msg["cwd"])  # logging is left as the harness sets it up: its lines, its format, its levels
        self.fn = calling(load_entrypoint(msg["entrypoint"]))
        return {"ok": True}

    def call(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        assert self.fn is not None, "call before load"
        _environ(msg["env"])
        out = self.fn(msg["record"], Context(msg["ctx"], msg["env"]))
        if not isinstance(out, dict):
            return {"error": f"the harness returned {type(out).__name__}, not a dict", "kind": "raised"}
        try:
            json.dumps(out)
        except (TypeError, ValueError) as e:
            return {"error": f"the harness's result is not JSON: {e}", "kind": "raised"}
        return {"output": out}

    def answer(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        try:
            return self.load(msg) if msg["op"] == "load" else self.call(msg)
        except Exception:
            tb = traceback.format_exc(limit=-12)
            sys.stderr.write(tb)
            return {"error": tb.strip(), "kind": "load" if msg["op"] == "load" else "raised"}


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
    sys.stdout = sys.stderr
    shim = Shim()
    for line in requests:
        reply = shim.answer(json.loads(line))
        sys.stderr.flush()
        os.write(2, END_OF_OUTPUT)  # what the record printed is all ahead of this: its lines get its mark
        replies.write(json.dumps(reply).encode() + b"\n")
        replies.flush()


if __name__ == "__main__":
    main()
