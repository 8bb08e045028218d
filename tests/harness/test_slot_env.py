"""Per-slot environment: each thread reads its own slot's variables through os.environ."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from runner.proc.slot_env import install, set_slot_env


def test_each_thread_reads_its_own_values_and_the_c_level_ones_name_the_problem() -> None:
    code = f"""
import os, sys, threading
sys.path.insert(0, {str(os.getcwd())!r})
from runner.proc.slot_env import UNSET, install, set_slot_env
install({{"DB_NAME"}})
seen = {{}}
def slot(n):
    set_slot_env({{**os.environ, "DB_NAME": f"app__s{{n}}", "ONLY_HERE": str(n)}})
    for _ in range(200):
        assert os.environ["DB_NAME"] == f"app__s{{n}}" and os.getenv("DB_NAME") == f"app__s{{n}}"
    seen[n] = (os.environ.get("ONLY_HERE"), "ONLY_HERE" in os.environ, dict(os.environ)["DB_NAME"])
ts = [threading.Thread(target=slot, args=(n,)) for n in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
assert seen == {{n: (str(n), True, f"app__s{{n}}") for n in range(4)}}, seen
assert os.environ["DB_NAME"] == UNSET  # the main thread has no slot
import subprocess
out = subprocess.run(["sh", "-c", "echo $DB_NAME"], capture_output=True, text=True).stdout.strip()
assert out == UNSET, out  # what reads the C environment is told, not sent to another slot's database
print("ok")
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "ok", p.stdout + p.stderr


def test_install_keeps_os_environ_a_working_mapping() -> None:
    # in this process too: the class swap must leave every other use of os.environ intact
    install(set())
    os.environ["RUNNER_TEST_VAR"] = "x"
    assert os.environ.get("RUNNER_TEST_VAR") == "x" and "RUNNER_TEST_VAR" in os.environ
    del os.environ["RUNNER_TEST_VAR"]
    results: list[str | None] = []
    t = threading.Thread(target=lambda: (set_slot_env({"RUNNER_TEST_VAR": "slot"}),
                                         results.append(os.environ.get("RUNNER_TEST_VAR"))))
    t.start()
    t.join()
    assert results == ["slot"] and os.environ.get("RUNNER_TEST_VAR") is None  # the slot's alone


def test_slot_threads_never_write_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Other threads read the environment from C (libpq's getenv) at any time, and setenv beside getenv is
    not safe: only the worker's main thread writes it, once, before the slot threads start. Before, a
    slot thread wrote every variable of its overlay the process lacked."""
    install({"RUNNER_SLOT_DB"})  # the main thread, before the threads: parks the per-slot keys
    writers: list[str] = []
    real = os.putenv
    monkeypatch.setattr(os, "putenv", lambda k, v: (writers.append(threading.current_thread().name), real(k, v)))
    seen: dict[int, tuple[bool, str | None, bool]] = {}

    def slot(n: int) -> None:
        set_slot_env({**os.environ, "RUNNER_SLOT_DB": f"db{n}", "RUNNER_SLOT_ONLY": str(n)})
        install({"RUNNER_SLOT_DB"})  # a harness re-attaching after a sandbox replacement: nothing to write
        seen[n] = ("RUNNER_SLOT_ONLY" in os.environ, os.environ.copy().get("RUNNER_SLOT_ONLY"),
                   "RUNNER_SLOT_ONLY" in list(os.environ))

    threads = [threading.Thread(target=slot, args=(n,), name=f"slot-{n}") for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert writers == []
    assert seen == {n: (True, str(n), True) for n in range(3)}  # `in`, copy() and iteration see the overlay
    del os.environ["RUNNER_SLOT_DB"]


def test_a_parked_variable_a_slot_lacks_is_absent_for_it() -> None:
    """A variable parked for the slots (the gateway's key, say) that one slot's environment does not set is
    not there for it: reading through to the parked value would hand a harness a key it was never given
    (the helpdesk's judge turned itself on and called a URL named UNSET)."""
    install({"RUNNER_SLOT_KEY"})
    seen: list[tuple[str | None, bool, bool]] = []

    def slot() -> None:
        set_slot_env({"RUNNER_OTHER": "x"})
        seen.append((os.getenv("RUNNER_SLOT_KEY"), "RUNNER_SLOT_KEY" in os.environ,
                     "RUNNER_SLOT_KEY" in os.environ.copy()))

    t = threading.Thread(target=slot)
    t.start()
    t.join()
    assert seen == [(None, False, False)]
    del os.environ["RUNNER_SLOT_KEY"]
