"""The simulator a run forks from its workers' forkserver (which loaded the SDK for them): it serves the
SDKs on the socket the run bound, as strictly as one started afresh, shows as pgsr-simulator, and a killed
one comes back on its address."""

from __future__ import annotations

import os
import signal
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import multiprocess as mp
import openai
import pytest

from runner.config import SimSettings
from runner.models.sim.process import SimServer
from runner.resources import ForkedServer, stop_process


@pytest.fixture(scope="module")
def ctx() -> Iterator[Any]:
    from multiprocess import forkserver

    c = mp.get_context("forkserver")
    c.set_forkserver_preload(["anthropic"])  # what a run's forkserver loads for claude workers
    yield c
    forkserver._forkserver._stop()


def _health(url: str) -> int:
    with urllib.request.urlopen(f"{url}/health", timeout=30) as r:
        return int(r.status)


def test_a_forked_simulator_serves_strictly_under_its_own_name_and_comes_back_where_it_was(
        ctx: Any, tmp_path: Path) -> None:
    log = tmp_path / "simulator.log"
    with SimServer(SimSettings(), log_path=str(log), apis=("anthropic",), fork=ctx) as sim:
        assert _health(sim.url) == 200
        assert Path(f"/proc/{sim.pid}/comm").read_text().strip() == "pgsr-simulator"
        assert os.getsid(sim.pid) == sim.pid  # its own session: the terminal's Ctrl-C is the supervisor's
        # the OpenAI types were not resolved ahead (apis): they are when first asked, as strictly
        client = openai.OpenAI(api_key="k", base_url=f"{sim.url}/v1", max_retries=0)
        with pytest.raises(openai.BadRequestError, match="frobnicate"):
            client.chat.completions.create(model="sim-strong", messages=[{"role": "user", "content": "hi"}],
                                           extra_body={"frobnicate": 1})
        ok = client.chat.completions.create(model="sim-strong", messages=[{"role": "user", "content": "hi"}])
        assert ok.choices[0].message.role == "assistant"
        first, url = sim.pid, sim.url
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while sim.alive():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        with pytest.raises(urllib.error.URLError):  # gone with its socket: refused, not held
            _health(url)
        sim.restart()
        assert sim.pid != first and sim.url == url and _health(url) == 200
    with pytest.raises(urllib.error.URLError):
        _health(url)


def slow_to_start(listen_fd: int) -> None:
    """A server still importing: no signal handler of its own yet."""
    time.sleep(30)


def test_a_forked_server_stopped_while_it_starts_ends_without_a_traceback(ctx: Any, tmp_path: Path) -> None:
    # A run that stops at once (a read-only cache directory, in CI) stopped its simulator while it set up:
    # SIGINT printed a KeyboardInterrupt's traceback on the supervisor's terminal. SIGTERM ends it quietly.
    log = tmp_path / "server.log"
    with socket.create_server(("127.0.0.1", 0)) as listen:
        server = ForkedServer("simulator", ctx, f"{__name__}:slow_to_start", (), str(log), False, listen)
    deadline = time.monotonic() + 30
    while not log.exists():  # its stderr is its log now: what it would print goes there
        assert time.monotonic() < deadline
        time.sleep(0.01)
    stop_process(server, sig=server.stop_signal)
    assert server.returncode == -signal.SIGTERM
    assert "Traceback" not in log.read_text()
