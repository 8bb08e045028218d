"""Server children: a silent one fails its start at the boot timeout (it used to block in readline),
and a child asked to die with its parent does, even when the parent is killed with SIGKILL (a
forkserver's child too, idle on its queue). A server given a socket the run bound has its address at
once: its first callers wait in the backlog while it starts, and its silence is judged later."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from runner.errors import RunStopped
from runner.resources import ServerProcess
from tests.runs import alive


class Silent(ServerProcess):
    name = "silent server"
    program = [sys.executable, "-c", "import time; time.sleep(60)"]


class Talker(ServerProcess):
    name = "talker"
    program = [sys.executable, "-c", "print('listening on http://127.0.0.1:1', flush=True); import time; "
                                     "time.sleep(60)"]


def test_a_server_that_never_answers_fails_at_its_boot_timeout() -> None:
    t = time.monotonic()
    with pytest.raises(RunStopped, match=r"silent server did not start \(no word in 1s\)"), \
            Silent([], boot_timeout=1.0):
        pass
    assert time.monotonic() - t >= 1.0  # it gave the server its whole boot timeout (a lower bound: load only adds)


def test_a_server_that_answers_gives_its_url() -> None:
    with Talker([], boot_timeout=10) as s:
        assert s.url == "http://127.0.0.1:1"


def test_a_child_that_asked_to_die_with_its_parent_dies_with_a_killed_parent() -> None:
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c",
            "import os, time; from runner.resources import die_with_parent; die_with_parent(%d); time.sleep(60)"
            % os.getpid()])
        print(child.pid, flush=True)
        time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    time.sleep(1.0)  # the child has imported and called prctl
    assert alive(child)
    assert _gone_after_killing(parent, child)


def test_a_forkserver_child_idle_on_its_queue_dies_with_a_killed_parent() -> None:
    """A worker waiting for work when the supervisor was killed lived on (found in CI under load):
    it held the forkserver's "alive" pipe, so the server, whose death would have signalled it, waited
    for it."""
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import os, time
        import multiprocess as mp

        def child(supervisor, q):
            from runner.resources import die_with_parent, leave_forkserver
            die_with_parent(supervisor, via_forkserver=True)
            leave_forkserver()
            q.get()  # idle, as a worker between two assignments

        if __name__ == "__main__":
            ctx = mp.get_context("forkserver")
            q = ctx.Queue()
            p = ctx.Process(target=child, args=(os.getpid(), q))
            p.start()
            print(p.pid, flush=True)
            time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        time.sleep(1.5)  # the child has called prctl and let go of the server
        assert alive(child)
        assert _gone_after_killing(parent, child)
    finally:
        parent.kill()
        if alive(child):
            os.kill(child, signal.SIGKILL)


def _gone_after_killing(parent: subprocess.Popen[str], child: int) -> bool:
    """kill -9 of `parent`; whether `child` is gone within 10 s."""
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(child)


def test_fd_ready_takes_descriptors_past_1024() -> None:
    """A worker with hundreds of slots holds more than 1,024 descriptors; select() refused them and 672 of
    1,024 records of a batch-mode run failed ("filedescriptor out of range in select()")."""
    import resource

    from runner.resources import fd_ready

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    r, w = os.pipe()
    high = [os.dup2(r, 1500), os.dup2(w, 1501)]
    try:
        assert fd_ready(1501, 0, write=True)
        assert not fd_ready(1500, 0.01)
        os.write(1501, b"x")
        assert fd_ready(1500, 0)
    finally:
        for fd in (r, w, *high):
            os.close(fd)


class Gated(ServerProcess):
    """Serves HTTP on the socket it inherits once the file named by its first argument exists."""

    name = "gated server"
    program = [sys.executable, "-c", textwrap.dedent("""
        import http.server, os, socket, sys, time
        gate, fd = sys.argv[1], int(sys.argv[3])
        while not os.path.exists(gate):
            time.sleep(0.02)
        print("listening on http://ignored", flush=True)
        class Hello(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200); self.end_headers(); self.wfile.write(b"hello")
        server = http.server.HTTPServer(("127.0.0.1", 0), Hello, bind_and_activate=False)
        server.socket.close()
        server.socket = socket.socket(fileno=fd)
        server.serve_forever()
    """)]

    def on_socket(self, fd: int) -> list[str]:
        return ["--fd", str(fd)]


def test_a_server_given_a_socket_has_its_address_at_once_and_its_first_callers_wait_for_it(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    with Gated([str(gate)], listen=("127.0.0.1", 0), wait=False, boot_timeout=60) as s:
        assert s.url.startswith("http://127.0.0.1:") and s.url != "http://ignored"  # the bound port, not its word
        answers: list[bytes] = []
        caller = threading.Thread(target=lambda: answers.append(urllib.request.urlopen(s.url, timeout=60).read()))
        caller.start()  # connects now: held in the backlog, neither refused nor answered
        caller.join(0.5)
        assert not answers and s.alive()
        gate.touch()
        caller.join(60)
        assert answers == [b"hello"]
        assert s.alive()  # its word read: booted


def test_a_server_not_waited_for_that_stays_silent_is_dead_at_its_boot_timeout(tmp_path: Path) -> None:
    with Gated([str(tmp_path / "never")], listen=("127.0.0.1", 0), wait=False, boot_timeout=0.5) as s:
        deadline = time.monotonic() + 30
        while s.alive():
            assert time.monotonic() < deadline, "still alive long past its boot timeout"
            time.sleep(0.05)
        assert "gated server did not start (no word in 0.5s)" in s.exit_description()


def test_a_server_whose_port_is_taken_says_which_server_and_port(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(RunStopped, match=rf"the gated server cannot listen on 127\.0\.0\.1:{port}: .*in use"), \
                Gated([str(tmp_path / "gate")], listen=("127.0.0.1", port)):
            pass
