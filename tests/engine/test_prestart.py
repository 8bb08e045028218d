"""Prestart: each worker's first sandbox launched by the supervisor, taken over by its worker (docker)."""

from __future__ import annotations

import os
from pathlib import Path

import docker
import pytest
from docker.errors import NotFound

from runner.config import Config
from runner.engine.prestart import Prestart
from runner.errors import SandboxBootError
from runner.harness import reading, record_source
from runner.harness.crm.harness import DATABASE as CRM
from runner.harness.settings import harness_settings
from runner.sandbox.base import logs_in
from runner.sandbox.docker import DockerSandbox
from runner.sandbox.settings import sandbox_settings
from runner.worker.keeper import SandboxKeeper
from runner.worker.main import WorkerSpec
from runner.worker.settings import slot_settings
from tests.conftest import TEST_RUN_ID


def _spec(tmp_path: Path, image: str, worker: int, run_id: str) -> WorkerSpec:
    cfg = Config.model_validate({"dataset": "x.jsonl", "harness": {"kind": "python", "entrypoint": "m:f"},
                                 "runs": [{"name": "r"}], "container_tmpfs": True})
    sandbox = sandbox_settings(cfg, CRM, kind="docker", image=image, run_id=run_id, owner_pid=os.getpid(), slots=1)
    return WorkerSpec(worker, record_source(cfg), sandbox, slot_settings(cfg),
                      harness_settings(cfg), reading(cfg), None, str(tmp_path), str(tmp_path))


def _exists(container_id: str) -> bool:
    client = docker.from_env()
    try:
        client.containers.get(container_id)
        return True
    except NotFound:
        return False
    finally:
        client.close()


class _Inbox:
    def put(self, msg: object) -> None:
        pass


def test_a_worker_takes_over_the_sandbox_launched_for_it_and_the_untaken_one_is_removed(
        tmp_path: Path, sandbox_image: str) -> None:
    run_id = f"{TEST_RUN_ID}-pre"
    specs = [_spec(tmp_path, sandbox_image, w, run_id) for w in range(2)]
    with Prestart(specs) as prestart:
        launched = prestart.take(0)
        assert launched is not None and launched.id.startswith(run_id[:8]) and "-w0g1-" in launched.id
        assert "password" not in repr(launched)
        assert prestart.take(0) is None  # taken once
        keeper = SandboxKeeper(WorkerSpec(**{**specs[0].__dict__, "launched": launched}), _Inbox(), inline=True)
        keeper.boot()
        sb = keeper.sandbox
        assert sb is not None and sb.endpoint is not None
        assert sb.id == launched.id and isinstance(sb, DockerSandbox) and sb.container_id() == launched.container_id
        assert logs_in(sb.endpoint.local_dsn("crm"))
        other = prestart._launches[1]
        second = other.result()
    assert not _exists(second.container_id)  # nobody took worker 1's: removed on leaving
    assert second.socket_home is None or not Path(second.socket_home).exists()
    assert _exists(launched.container_id)  # worker 0's is its own now: removed when the worker stops it
    keeper.stop()
    assert not _exists(launched.container_id)


def test_a_launched_sandbox_that_is_gone_gives_way_to_a_fresh_one(tmp_path: Path, sandbox_image: str) -> None:
    run_id = f"{TEST_RUN_ID}-gone"
    spec = _spec(tmp_path, sandbox_image, 0, run_id)
    with Prestart([spec]) as prestart:
        launched = prestart.take(0)
    assert launched is not None
    client = docker.from_env()
    client.containers.get(launched.container_id).remove(force=True, v=True)
    client.close()
    keeper = SandboxKeeper(WorkerSpec(**{**spec.__dict__, "launched": launched}), _Inbox(), inline=True)
    try:
        keeper.boot()
        assert keeper.sandbox is not None and keeper.sandbox.id != launched.id
        assert keeper.sandbox.endpoint is not None and logs_in(keeper.sandbox.endpoint.local_dsn("crm"))
    finally:
        keeper.stop()


def test_a_launch_that_fails_leaves_nothing_and_its_worker_starts_its_own(tmp_path: Path, sandbox_image: str) -> None:
    spec = _spec(tmp_path, "pgsandbox-runner/sandbox:no-such-image", 0, f"{TEST_RUN_ID}-bad")
    box = DockerSandbox(spec.sandbox.image or "", CRM.user, run_id=spec.run_id, owner_pid=os.getpid(), name_hint="w0g1")
    with pytest.raises(SandboxBootError, match="missing"):
        box.launch()
    assert box._socket_home is None or not Path(box._socket_home).exists()
    with Prestart([spec]) as prestart:
        assert prestart.take(0) is None  # said in the log; the worker boots as if no launch had been tried


def test_at_most_one_container_per_core_boots_at_a_time_and_a_launched_one_is_taken_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A launch holds its turn until its server's socket appears; take() waits only for the launch."""
    import threading
    import time

    from runner.engine import prestart as prestart_module
    from runner.sandbox.base import Launched, socket_file

    cores, booting, most = 2, [0], [0]
    lock = threading.Lock()
    monkeypatch.setattr(prestart_module.os, "sched_getaffinity", lambda pid: set(range(cores)))

    def launch(self: DockerSandbox) -> Launched:
        home = tmp_path / self.id
        (home / "run").mkdir(parents=True)
        with lock:
            booting[0] += 1
            most[0] = max(most[0], booting[0])

        def booted() -> None:  # its server's socket, a while after the launch returned
            time.sleep(0.1)
            with lock:
                booting[0] -= 1
            Path(socket_file(str(home / "run"))).touch()

        threading.Thread(target=booted).start()
        return Launched(self.id, f"c-{self.id}", "pw", "admin-pw", str(home))

    monkeypatch.setattr(DockerSandbox, "launch", launch)
    monkeypatch.setattr("runner.sandbox.docker.remove_launched", lambda launched: None)
    specs = [_spec(tmp_path, "img", w, f"{TEST_RUN_ID}-turns") for w in range(6)]
    t0 = time.monotonic()
    with Prestart(specs) as prestart:
        first = prestart.take(0)
        assert first is not None and time.monotonic() - t0 < 0.1  # launched, not yet booted: taken at once
        assert not prestart.launched(5)  # still waiting for its turn
        assert all(prestart.take(w) is not None for w in range(1, 6))
    assert most[0] == cores
    assert time.monotonic() - t0 >= 0.2  # three turns of two
