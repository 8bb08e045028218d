"""The run's warm interpreter (runner/proc/warm.py): slots' shims forked from it with their own
environment, and each slot on its own interpreter when a library would make a fork wrong."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.proc.interpreter import Interpreter, InterpreterExited
from runner.proc.warm import WarmInterpreter, marker

HARNESS = '''
import os, sys, threading, time
import decimal  # a library: the warm interpreter imports it once for every slot
{extra}

def run(record, ctx):
    if record.get("exit") is not None:
        os._exit(record["exit"])
    if record.get("sleep"):
        time.sleep(record["sleep"])
    print("hello from", ctx.record_id)
    return {{"db": os.environ["DB_HOST"], "pid": os.getpid(), "ppid": os.getppid(), "sid": os.getsid(0),
            "threads": threading.active_count(), "argv": sys.argv}}
'''


def _harness(tmp_path: Path, extra: str = "", library: str = "") -> Path:
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "toyh.py").write_text(HARNESS.format(extra=extra))
    if library:  # a library outside the harness's own directories, as site-packages would hold it
        (tmp_path / "lib").mkdir()
        (tmp_path / "lib" / "thirdparty.py").write_text(library)
    return tmp_path / "h"


def _env(tmp_path: Path, db_host: str) -> dict[str, str]:
    env = {"PATH": os.environ["PATH"], "DB_HOST": db_host}
    if (tmp_path / "lib").exists():
        env["PYTHONPATH"] = str(tmp_path / "lib")
    return env


@pytest.fixture
def warm(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[WarmInterpreter]:
    extra, library = getattr(request, "param", ("", ""))
    home = _harness(tmp_path, extra, library)
    mark = marker()
    load = {"entrypoint": "toyh:run", "pythonpath": [str(home)], "cwd": str(home)}
    with WarmInterpreter(sys.executable, _env(tmp_path, mark), home, load, mark) as w:
        yield w


def _slot(warm: WarmInterpreter, db_host: str, lines: list[str]) -> Interpreter:
    home = Path(warm.load["cwd"])
    env = _env(home.parent, db_host)
    it = Interpreter(sys.executable, env, home, lines.append, warm=warm.socket)
    it.start()
    assert it.ask({"op": "load", "env": env, **warm.load}) == {"ok": True}
    return it


def _call(it: Interpreter, db_host: str, **record: object) -> dict[str, object]:
    home = Path(it.cwd)
    ctx = {"run": "r", "params": {}, "worker": 0, "attempt": 1, "record_id": "x", "main": "main",
           "scratch": str(home), "databases": {"main": {"host": db_host, "port": 1, "user": "u", "password": "p",
                                                        "name": "d"}}}
    reply = it.ask({"op": "call", "record": record, "ctx": ctx, "env": _env(home.parent, db_host)})
    out: dict[str, object] = reply.get("output", reply)
    return out


def _report(warm: WarmInterpreter) -> dict[str, object]:
    deadline = time.monotonic() + 30
    while not warm.report and time.monotonic() < deadline:
        time.sleep(0.02)
    return warm.report


def test_slots_are_forked_from_it_each_with_its_own_environment_and_session(warm: WarmInterpreter) -> None:
    lines: list[str] = []
    a, b = _slot(warm, "/slot/a", lines), _slot(warm, "/slot/b", lines)
    try:
        assert "decimal" in _report(warm)["preloaded"] and not _report(warm)["refused"]  # type: ignore[operator]
        out_a, out_b = _call(a, "/slot/a"), _call(b, "/slot/b")
        assert warm.proc is not None
        assert out_a["ppid"] == out_b["ppid"] == warm.proc.pid  # forked by it, not started by this process
        assert (out_a["db"], out_b["db"]) == ("/slot/a", "/slot/b")  # each its own, no marker left
        assert out_a["sid"] == out_a["pid"] and out_a["pid"] != out_b["pid"]  # killed with its own group
        assert out_a["threads"] == 1
        assert "hello from x" in lines  # its prints go to its slot's log, all logged by the time it answers
    finally:
        a.stop()
        b.stop()


def test_a_forked_slots_end_is_reported_like_a_started_ones(warm: WarmInterpreter) -> None:
    it = _slot(warm, "/slot/a", [])
    with pytest.raises(InterpreterExited, match="exit code 3"):
        _call(it, "/slot/a", exit=3)
    it.stop()
    it = _slot(warm, "/slot/a", [])
    assert it.proc is not None
    pid = it.proc.pid
    it.stop()  # as a time limit does midway through a record: killed, and its status collected
    assert not Path(f"/proc/{pid}").exists() or "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]


@pytest.mark.parametrize("warm", [
    ("import thirdparty", "import os\nHOST = os.environ.get('DB_HOST')\n"),
    ("import thirdparty", "import os\nclass S:\n    pass\nsettings = S()\n"
                          "settings.url = 'x' + os.environ['DB_HOST']\n"),
    ("import thirdparty", "import _thread, time\n_thread.start_new_thread(time.sleep, (60,))\n"),
    ("import thirdparty", "import threading\nready = threading.Event()\n"
                          "threading.Thread(target=ready.set, daemon=True).start()\nready.wait()\n"),
], indirect=True, ids=["kept-at-import", "kept-in-an-object", "a-thread-threading-does-not-see",
                       "an-import-that-waits-on-its-thread"])
def test_a_library_that_would_make_a_fork_wrong_leaves_each_slot_its_own_interpreter(warm: WarmInterpreter) -> None:
    refused = str(_report(warm)["refused"])
    assert "thirdparty" in refused or "thread" in refused
    it = _slot(warm, "/slot/a", [])
    try:
        out = _call(it, "/slot/a")
        assert out["ppid"] == os.getpid() and out["db"] == "/slot/a"  # started afresh, as without one
    finally:
        it.stop()


@pytest.mark.parametrize("warm", [
    ("import thirdparty", "import threading, time\nSTARTED = []\n"
                          "def flush():\n    STARTED.append(1)\n    time.sleep(600)\n"
                          "for name in ('flusher', 'reaper'):\n"
                          "    threading.Thread(target=flush, daemon=True, name='lib-' + name).start()\n"),
], indirect=True, ids=["two-threads-at-import"])
def test_threads_a_library_starts_at_import_are_each_slot_s_own(warm: WarmInterpreter) -> None:
    """LiteLLM's logging worker, a telemetry flusher: before, every slot then imported everything itself
    (seconds of CPU each). Now the warm interpreter holds the threads the import starts, forks each slot from
    itself, and each slot starts them: its own threads, none shared, the library's import paid once."""
    report = _report(warm)
    assert report["refused"] is None and report["held_threads"] == 2, report
    slots = [_slot(warm, f"/slot/{s}", []) for s in "ab"]
    try:
        outs = [_call(it, f"/slot/{s}") for it, s in zip(slots, "ab", strict=True)]
        for out, s in zip(outs, "ab", strict=True):
            assert out["ppid"] != os.getpid() and out["db"] == f"/slot/{s}"  # forked from the warm one
            assert out["threads"] == 3, out  # its main thread and the library's two, started in it
        assert outs[0]["pid"] != outs[1]["pid"]
    finally:
        for it in slots:
            it.stop()


def test_without_the_warm_interpreter_a_slot_starts_its_own(tmp_path: Path) -> None:
    home = _harness(tmp_path)
    env = _env(tmp_path, "/slot/a")
    lines: list[str] = []
    it = Interpreter(sys.executable, env, home, lines.append, warm=str(tmp_path / "gone.sock"))
    it.start()
    try:
        assert it.ask({"op": "load", "env": env, "entrypoint": "toyh:run", "pythonpath": [str(home)],
                       "cwd": str(home)}) == {"ok": True}
        assert _call(it, "/slot/a")["ppid"] == os.getpid()
    finally:
        it.stop()


def test_it_leaves_when_the_run_that_started_it_is_gone(warm: WarmInterpreter) -> None:
    """Its stdin is its lifeline: a supervisor killed outright closes it."""
    _report(warm)
    assert warm.proc is not None and warm.proc.stdin is not None
    warm.proc.stdin.close()
    assert warm.proc.wait(timeout=10) == 0


@pytest.mark.parametrize("warm", [("import thirdparty", "print('a library that talks as it loads')\n")],
                         indirect=True)
def test_a_library_that_prints_as_it_loads_is_preloaded_all_the_same(warm: WarmInterpreter) -> None:
    report = _report(warm)
    assert "thirdparty" in report["preloaded"] and report["refused"] is None  # type: ignore[operator]
    it = _slot(warm, "/slot/a", [])
    try:
        assert warm.proc is not None and _call(it, "/slot/a")["ppid"] == warm.proc.pid
    finally:
        it.stop()


def test_the_socket_directory_of_a_run_killed_outright_is_swept(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import tempfile

    from runner.proc.warm import HOME_PREFIX, remove_stale_homes
    from runner.sandbox.owner import OWNER_FILE, owner_identity

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    homes = {"dead": owner_identity(gone.pid), "alive": owner_identity(os.getpid())}
    gone.kill()
    gone.wait()
    for name, owner in homes.items():
        (tmp_path / f"{HOME_PREFIX}{name}").mkdir()
        (tmp_path / f"{HOME_PREFIX}{name}" / OWNER_FILE).write_text(owner)
    assert remove_stale_homes() == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{HOME_PREFIX}alive"]


def test_a_refusal_is_remembered_until_the_virtualenvs_packages_change(tmp_path: Path) -> None:
    """The next run does not wait on a warm interpreter that would import everything only to refuse again."""
    import os

    from runner.proc.warm import known_refusal, remember_refusal, verdict_key

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    packages = venv / "lib" / "python3.11" / "site-packages"
    packages.mkdir(parents=True)
    load = {"entrypoint": "pkg:fn", "pythonpath": [], "cwd": "/x"}
    key = verdict_key(str(venv / "bin" / "python"), load)
    assert known_refusal(tmp_path / "cache", key) is None
    remember_refusal(tmp_path / "cache", key, "its libraries' imports started 2 thread(s): heavystack (2)")
    assert known_refusal(tmp_path / "cache", key) == "its libraries' imports started 2 thread(s): heavystack (2)"
    assert verdict_key(str(venv / "bin" / "python"), {**load, "entrypoint": "pkg:other"}) != key
    (packages / "newlib").mkdir()  # a package installed: asked again
    os.utime(packages, ns=(0, 123456789))
    assert verdict_key(str(venv / "bin" / "python"), load) != key


FAKE_SHIM = '''
import json, os, sys
for line in sys.stdin:
    msg = json.loads(line)
    out = sys.stdout
    # what reached the reply pipe before this request's reply: a late reply to an earlier request (a child
    # the harness forked), a line the harness wrote there itself
    out.write(json.dumps({"output": {"who": "an earlier request's"}, "id": "0-0"}) + "\\n")
    out.write("the harness printed this on the reply pipe\\n")
    out.write(json.dumps({"output": {"who": "stray, no id"}}) + "\\n")
    out.write(json.dumps({"output": {"who": "its own", "record": msg["record"]}, "id": msg["id"]}) + "\\n")
    out.flush()
    os.write(2, b"\\x00pgsr: end of output\\n")
'''


def test_a_reply_is_taken_only_for_the_request_it_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Replies carried no request id: a forked child's late reply was stored as the next record's result, and
    a line written to the shim's reply pipe became a sibling's (issue 64)."""
    from runner.proc import interpreter

    fake = tmp_path / "fake_shim.py"
    fake.write_text(FAKE_SHIM)
    monkeypatch.setattr(interpreter, "SHIM", fake)
    it = Interpreter(sys.executable, {"PATH": os.environ["PATH"]}, tmp_path, lambda line: None)
    it.start()
    try:
        for n in range(3):
            reply = it.ask({"op": "call", "record": {"n": n}})
            assert reply == {"output": {"who": "its own", "record": {"n": n}}}
    finally:
        it.stop()
