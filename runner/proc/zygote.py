"""One warm interpreter per run for harness.python: it imports the libraries the harness imports, then
forks each slot's shim process from itself. Stdlib only, run by path in the user's interpreter.

A slot's interpreter used to import them itself: `openai` alone is ~0.3 s of CPU, paid once per slot
(8 workers: 2.4 CPU-s on the way to the first results). Forked from here, a slot imports only the
harness's own modules, with its own environment set first, as before.

What is imported here is what the harness's own files import at their top level and is not theirs
(`openai`, `psycopg2`; never the harness's package). This process's environment carries a marker in
every variable that differs between slots (DB_HOST, DATABASE_URL, the gateway's URLs, ...): a library
that kept one at import would hand each slot a value that is no slot's, so if the marker is found in
what the imports left behind, or a thread runs here (a fork copies only the forking thread), no slot is
forked from here: each asks, is told why, and starts its own interpreter as before.

A library whose import starts threads of Python's (`threading.Thread.start`: LiteLLM's logging worker, a
telemetry flusher, a pool reaper) no longer costs every slot that import: here each such start is held,
not made (`Held`), and each slot forked from here starts those threads as its first act, so each slot
process has its own, as if it had imported the library itself, and none is shared. A native thread (an
OpenMP or gRPC pool, seen as the kernel counts threads) cannot be held: it still refuses, as does an import
that waits for a thread it started (it would wait for ever here: once threads are held and the imports
spend no CPU for STALLED_SECONDS, it is cut and refused; imports burn CPU all the way).

    python zygote.py FD MARKER    FD: a listening Unix socket; stdin: {"entrypoint", "pythonpath", "cwd"},
                                  then its end stops this process
    stdout: one line, {"preloaded": [...], "refused": reason or null, "seconds": s}
    on FD, per slot:     -> {"env", "cwd"} + its stdin, stdout, stderr (SCM_RIGHTS)
                         <- {"pid": n}, later {"exit": wait status} | {"refused": reason}
"""

from __future__ import annotations

import array
import ast
import contextlib
import gc
import importlib
import json
import os
import selectors
import signal
import socket
import sys
import threading
import time
import traceback
import types
from pathlib import Path
from typing import Any

MAX_FILES = 400  # the harness's own files read for their imports: a bound, not a limit anyone meets
STALLED_SECONDS = (
    2.0  # imports that spend no CPU this long while threads are held: one waits on a held thread
)
TICK_SECONDS = 0.25
FDS = 3  # a slot's stdin, stdout and stderr
STARTUP = ("PYTHON",)  # variables the interpreter reads as it starts: a fork cannot take others


def _statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """A module's statements that run on import: its body and the blocks of its if/try/with, not its
    functions' or classes' bodies."""
    out: list[ast.stmt] = []
    for node in body:
        out.append(node)
        for block in ("body", "orelse", "finalbody"):
            if isinstance(node, ast.If | ast.Try | ast.With) and block in node._fields:
                out += _statements(getattr(node, block))
        if isinstance(node, ast.Try):
            for handler in node.handlers:
                out += _statements(handler.body)
    return out


def imported_names(source: str, module: str, is_package: bool) -> list[str]:
    """Dotted names a module's top level imports (relative ones made absolute)."""
    names: list[str] = []
    package = module if is_package else module.rpartition(".")[0]
    for node in _statements(ast.parse(source).body):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[: len(parts) - node.level + 1] if node.level > 1 else parts
                base = ".".join(p for p in (*parts, base) if p)
            if base and base != "__future__":
                names.append(base)
                names += [f"{base}.{a.name}" for a in node.names if a.name != "*"]
    return names


class Harness:
    """Where the harness's own modules are: its entrypoint's package wherever it is installed, and any
    module under its pythonpath or working directory."""

    def __init__(self, entrypoint: str, roots: list[str]) -> None:
        self.top = entrypoint.partition(":")[0].split(".")[0]
        self.roots = [Path(r) for r in roots]
        self.own: dict[str, list[Path]] = {}  # top-level name -> the directories its files are under

    def places(self, top: str) -> list[Path] | None:
        if top not in self.own:
            found = [r for r in self.roots if (r / f"{top}.py").is_file() or (r / top).is_dir()]
            if not found and top == self.top:
                import importlib.util

                spec = importlib.util.find_spec(top)  # a top-level name: found, not imported
                found = [Path(p).parent for p in (spec.submodule_search_locations or [])] if spec else []
                if spec and spec.origin and not found:
                    found = [Path(spec.origin).parent]
            self.own[top] = found
        return self.own[top] or None

    def file(self, module: str) -> tuple[Path, bool] | None:
        """An own module's source file and whether it is a package, or None (not its own, or no file)."""
        *parents, last = module.split(".")
        for root in self.places(module.split(".")[0]) or []:
            d = root.joinpath(*parents, last)
            if (d / "__init__.py").is_file():
                return d / "__init__.py", True
            if d.with_suffix(".py").is_file():
                return d.with_suffix(".py"), False
        return None


def libraries(entrypoint: str, roots: list[str]) -> list[str]:
    """What the harness's own files import that is not its own, in the order first met."""
    harness = Harness(entrypoint, roots)
    todo, out = [entrypoint.partition(":")[0]], []
    seen: set[str] = set()
    while todo and len(seen) < MAX_FILES:
        module = todo.pop(0)
        if module in seen:
            continue
        seen.add(module)
        if harness.places(module.split(".")[0]) is None:
            out.append(module)
            continue
        found = harness.file(module)
        if found is not None:
            try:
                todo += imported_names(found[0].read_text(encoding="utf-8"), module, found[1])
            except (OSError, SyntaxError, ValueError):
                continue
    return [m for m in out if not any(m.startswith(f"{o}.") for o in out)]


class Held:
    """While it is on, `threading.Thread.start` holds the threads the imports start instead of starting them;
    `start_all()` starts them (in a slot forked from here: each its own)."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self._start = threading.Thread.start

    def __enter__(self) -> Held:
        held = self.threads

        def start(thread: threading.Thread) -> None:
            held.append(thread)

        threading.Thread.start = start  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        threading.Thread.start = self._start  # type: ignore[method-assign]

    def start_all(self) -> None:
        for thread in self.threads:
            self._start(thread)


class HeldTooLong(BaseException):
    """The imports stalled with threads held: one waits for a thread it started, which never runs here."""


def preload(names: list[str], started: dict[str, int] | None = None, held: Held | None = None) -> list[str]:
    """Import each (one that fails is left to the slot, which reports it as the harness's own error);
    `started`: filled with the libraries whose import started threads, and how many (the kernel's count, so
    a native pool is seen too, and the threads `held` holds for the slots)."""
    done = []
    for name in names:
        before, before_held = _threads(), len(held.threads) if held is not None else 0
        try:
            importlib.import_module(name)
        except HeldTooLong:
            raise
        except BaseException:  # SystemExit included: a library's import is not ours to stop on
            if held is not None:  # a failed import's threads are not started anywhere: the slot imports it
                del held.threads[before_held:]
            continue
        done.append(name)
        more = _threads() - before + (len(held.threads) - before_held if held is not None else 0)
        if started is not None and more > 0:
            started[name] = more
    return done


# values looked at for the marker (~0.2 s of strings); past it, no fork is vouched for
SEARCH_BUDGET = 2_000_000


class TooMuchToSearch(Exception):
    pass


def kept_marker(modules: list[str], marker: str, budget: int = SEARCH_BUDGET) -> str | None:
    """The first module that kept a slot's variable at import (the marker in a string it holds, in its
    containers, or in its objects' attributes, a few levels down), or None; TooMuchToSearch past
    `budget` values. Each container or object is looked into once. Types are asked of type() alone:
    a lazy proxy (openai's module-level client) answers isinstance() and attributes by loading what it
    stands for."""
    seen: set[int] = set()
    left = [budget]

    def holds(value: Any, depth: int) -> bool:
        left[0] -= 1
        if left[0] < 0:
            raise TooMuchToSearch
        t = type(value)
        if issubclass(t, str):
            return marker in value
        if depth == 0 or issubclass(t, type | types.ModuleType) or callable(value) or id(value) in seen:
            return False
        seen.add(id(value))
        if issubclass(t, dict):
            return any(holds(v, depth - 1) for v in list(dict.values(value))[:1000])
        if issubclass(t, list | tuple | set | frozenset):
            return any(holds(v, depth - 1) for v in list(value)[:1000])
        try:
            attrs = object.__getattribute__(value, "__dict__")
        except Exception:  # no instance dictionary, or one that will not be read
            return False
        return issubclass(type(attrs), dict) and any(
            holds(v, depth - 1) for v in list(dict.values(attrs))[:1000]
        )

    for name in modules:
        module = sys.modules.get(name)
        if module is not None and any(holds(v, 3) for v in list(vars(module).values())):
            return name
    return None


class Zygote:
    def __init__(self, listener: int, marker: str, shim: Any) -> None:
        self.marker, self.shim = marker, shim
        self.refused: str | None = None
        self.started: dict[str, int] = {}  # the libraries whose import started threads, and how many
        self.held = Held()  # the Python threads they started, each slot's to start
        # bound and listening already: slots wait in its backlog
        self.listener = socket.socket(fileno=listener)
        self.children: dict[int, socket.socket] = {}
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.selector = selectors.DefaultSelector()

    def warm(self, spec: dict[str, Any]) -> dict[str, Any]:
        t0 = time.monotonic()
        for p in reversed(spec["pythonpath"]):
            if p not in sys.path:
                sys.path.insert(0, p)
        os.chdir(spec["cwd"])
        before = set(sys.modules)
        cpu = time.process_time()
        gc.disable()  # imports make objects by the hundred thousand: collections meanwhile only walk them
        waited_too_long = False
        last = [time.process_time(), time.monotonic()]  # CPU time last seen advancing, and when

        def tick(*_: object) -> None:
            now_cpu, now = time.process_time(), time.monotonic()
            if now_cpu - last[0] > 0.01 or not self.held.threads:
                last[:] = [now_cpu, now]
            elif now - last[1] > STALLED_SECONDS:
                raise HeldTooLong

        signal.signal(signal.SIGALRM, tick)
        signal.setitimer(signal.ITIMER_REAL, TICK_SECONDS, TICK_SECONDS)
        try:
            # stdout carries the report: a library's print is not
            with contextlib.redirect_stdout(sys.stderr), self.held:
                done = preload(
                    libraries(spec["entrypoint"], [*spec["pythonpath"], spec["cwd"]]), self.started, self.held
                )
        except HeldTooLong:
            waited_too_long, done = True, []
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            gc.freeze()  # a slot's collections then skip them, and leave the pages it shares with the others
            gc.enable()
        self.refused = (
            f"its libraries' imports stalled for {STALLED_SECONDS:g} s with the threads they started held "
            "(one waits on a thread it started)"
            if waited_too_long
            else self.why_not([m for m in sys.modules if m not in before])
        )
        return {
            "preloaded": done,
            "refused": self.refused,
            "seconds": round(time.monotonic() - t0, 3),
            "cpu_seconds": round(time.process_time() - cpu, 3),
            "threads_by": self.started,
            "held_threads": len(self.held.threads),
        }

    def why_not(self, loaded: list[str]) -> str | None:
        """Why no slot may be forked from here, now that `loaded` are imported; None if they may."""
        try:
            kept = kept_marker(loaded, self.marker)
        except TooMuchToSearch:
            return "its libraries hold more than can be searched for a slot's variable"
        if kept is not None:
            return f"module {kept} keeps a slot's variable (DB_HOST, DATABASE_URL, ...) from its import"
        if (threads := _threads()) > 1:
            who = (
                ", ".join(f"{name} ({n})" for name, n in self.started.items()) or "which import is not known"
            )
            return f"its libraries' imports started {threads - 1} thread(s): {who}"
        return None

    def serve(self) -> None:
        self.selector.register(0, selectors.EVENT_READ, "stdin")
        self.selector.register(self.listener, selectors.EVENT_READ, "listener")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "wake")
        while True:
            for key, _ in self.selector.select():
                if key.data == "stdin" and not os.read(0, 4096):
                    return  # the run ended
                if key.data == "listener":
                    self.ask(self.listener.accept()[0])
                elif key.data == "wake":
                    os.read(self.wake_r, 4096)
                    self.reap()

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):  # the slot's worker may be gone: its shim ended with it
                    conn.sendall(json.dumps({"exit": status}).encode() + b"\n")
                conn.close()

    def ask(self, conn: socket.socket) -> None:
        fds = array.array("i")
        data = b""
        try:
            conn.settimeout(10)
            while not data.endswith(b"\n"):
                chunk, ancdata, _, _ = conn.recvmsg(1 << 16, socket.CMSG_SPACE(FDS * fds.itemsize))
                for level, kind, payload in ancdata:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                        fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
                if not chunk:
                    raise OSError("the slot hung up")
                data += chunk
            request = json.loads(data)
            if len(fds) != FDS:
                raise OSError(f"{len(fds)} descriptors, not {FDS}")
            refused = self.refused or self.unlike(request["env"])
            if refused:
                conn.sendall(json.dumps({"refused": refused}).encode() + b"\n")
                conn.close()
                return
            pid = self.fork(request, list(fds), conn)
            self.children[pid] = conn
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        except (OSError, ValueError, KeyError) as e:
            sys.stderr.write(f"zygote: a slot's request failed: {e}\n")
            conn.close()
        finally:
            for fd in fds:
                os.close(fd)

    def unlike(self, env: dict[str, str]) -> str | None:
        """Why a slot with this environment cannot be this process's fork (a variable Python reads only
        as it starts differs), or None."""
        for key in sorted({*env, *os.environ}):
            if key.startswith(STARTUP) and env.get(key) != os.environ.get(key):
                return f"{key} differs from the run's"
        return None

    def fork(self, request: dict[str, Any], fds: list[int], conn: socket.socket) -> int:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid:
            return pid
        code = 1
        try:  # the slot's shim: its own session (killed with its group), descriptors, environment
            os.setsid()
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            self.selector.close()
            self.listener.close()
            for other in (conn, *self.children.values()):
                other.close()
            os.close(self.wake_r)
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            for fd in fds:
                if fd > 2:
                    os.close(fd)
            os.environ.clear()
            os.environ.update(request["env"])
            sys.argv[:] = [str(Path(__file__).with_name("shim.py"))]  # as a slot started afresh has it
            os.chdir(request["cwd"])
            numpy_random = sys.modules.get("numpy.random")
            if numpy_random is not None:  # `random` reseeds itself in a fork; numpy's global state does not
                numpy_random.seed()
            self.held.start_all()  # the threads the libraries' imports started: this slot's own
            self.shim.main()
            code = 0
        except BaseException:  # whatever happens, this copy must not return into the loop
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)


def _threads() -> int:
    """This process's threads, as the kernel counts them: a library's native pool (OpenMP, gRPC) or a
    `_thread` of its own is no `threading.Thread`, and a fork copies none of them either."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _shim() -> Any:
    """shim.py beside this file, as a module (run by path: this directory is not on sys.path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_runner_shim", Path(__file__).with_name("shim.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    # the shim loaded once, here: each slot has it already
    zygote = Zygote(int(sys.argv[1]), sys.argv[2], _shim())
    report = zygote.warm(json.loads(sys.stdin.buffer.readline()))
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()
    zygote.serve()


if __name__ == "__main__":
    main()
