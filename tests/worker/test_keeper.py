"""The worker's keeper of its sandbox (runner/worker/keeper.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.config import Config
from runner.errors import WorkerClosing
from runner.harness import reading, record_source
from runner.harness.crm.harness import DATABASE as CRM
from runner.harness.settings import harness_settings
from runner.sandbox.settings import sandbox_settings
from runner.worker.keeper import SandboxKeeper
from runner.worker.main import WorkerSpec
from runner.worker.settings import slot_settings
from tests.conftest import TEST_RUN_ID
from tests.runs import containers


class _Inbox:
    def __init__(self) -> None:
        self.sent: list[object] = []

    def put(self, msg: object) -> None:
        self.sent.append(msg)


def _spec(tmp_path: Path, image: str, run_id: str, *, slots: int) -> WorkerSpec:
    cfg = Config.model_validate({"dataset": "x.jsonl", "harness": {"kind": "python", "entrypoint": "m:f"},
                                 "runs": [{"name": "r"}]})
    sandbox = sandbox_settings(cfg, CRM, kind="docker", image=image, run_id=run_id, owner_pid=os.getpid(),
                               slots=slots)
    return WorkerSpec(0, record_source(cfg), sandbox, slot_settings(cfg),
                      harness_settings(cfg), reading(cfg), None, str(tmp_path), str(tmp_path))


@pytest.mark.docker
def test_a_closed_keeper_never_replaces_its_sandbox(tmp_path: Path, sandbox_image: str) -> None:
    """Before, a worker stopped with records running removed its sandbox under them, and each slot that
    met the dead database started a new one ("sandbox ... is gone; starting a new one"), for the end of
    the run's sweep to remove."""
    run_id = f"{TEST_RUN_ID}-closed"
    spec = _spec(tmp_path, sandbox_image, run_id, slots=1)
    inbox = _Inbox()
    keeper = SandboxKeeper(spec, inbox, inline=True)
    try:
        keeper.boot()
        assert len(containers(run_id=run_id)) == 1
        keeper.close()
        assert containers(run_id=run_id) == []
        with pytest.raises(WorkerClosing, match="the worker is stopping"):
            keeper.replace_sandbox("1 record(s) ran while the database stopped answering", keeper.generation)
        assert containers(run_id=run_id) == [] and keeper.sandbox is None and inbox.sent == []
    finally:
        keeper.stop()


@pytest.mark.docker
def test_a_slot_whose_copy_stopped_midway_never_runs_on_it(tmp_path: Path, sandbox_image: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The background copier stopped (a stall, an error) after slot 1's copy was made but before its role
    owned it: a record ran there and met `permission denied`, stored as its own failure (issue 64). Now the
    slot waits for a sandbox whose copies are whole: the one it would use is replaced."""
    from runner.worker import keeper as keeper_module

    spec = _spec(tmp_path, sandbox_image, f"{TEST_RUN_ID}-copies", slots=2)
    real = keeper_module.copy_databases

    def stops_after_copying(endpoint, groups, done=None, *, before=None):  # type: ignore[no-untyped-def]
        real(endpoint, groups, None, before=before)  # made, but never adopted nor settled
        raise OSError("the copier stalled")

    monkeypatch.setattr(keeper_module, "copy_databases", stops_after_copying)
    inbox = _Inbox()
    keeper = SandboxKeeper(spec, inbox, inline=False)
    try:
        keeper.boot()
        first = keeper.sandbox.id if keeper.sandbox else None
        keeper.copy_in_background()
        keeper.wait_copied(1)
        assert keeper.generation == 2 and keeper.sandbox is not None and keeper.sandbox.id != first
        assert [type(m).__name__ for m in inbox.sent] == ["SandboxReplaced"]
        assert "slot 1's databases were not copied and handed over whole" in inbox.sent[0].reason  # type: ignore[attr-defined]
        keeper.wait_copied(1)  # the replacement's are whole: nothing more
        assert keeper.generation == 2
    finally:
        keeper.close()
        keeper.stop()
