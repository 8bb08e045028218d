"""The local sandbox's template server: a server that never answers fails its boot with its own log, in the
time allowed (reading a live server's stderr pipe to its end used to hang the boot for good)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from runner.errors import SandboxBootError
from runner.sandbox import local
from runner.sandbox.schema import DatabaseSpec


def test_a_template_server_that_never_answers_fails_with_its_log(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "postgres"
    fake.write_text("#!/bin/sh\necho 'FATAL: stand-in server is stuck' >&2\nexec sleep 600\n")
    fake.chmod(0o755)
    datadir = tmp_path / "data"
    datadir.mkdir()
    monkeypatch.setattr(local, "TEMPLATE_BOOT_SECONDS", 1.0)
    began = time.monotonic()
    with pytest.raises(SandboxBootError, match=r"no answer within 1 s\): FATAL: stand-in server is stuck"):
        local._load_schema(bindir, datadir, None, DatabaseSpec())
    assert time.monotonic() - began < 60  # the stand-in sleeps 600 s: its end was not waited for
    assert not (datadir / "tmp-sock").exists()
