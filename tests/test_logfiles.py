"""Log sinks: a traceback names where it failed, never the values its frames held."""

from __future__ import annotations

import secrets
from pathlib import Path

from loguru import logger

from runner.harness.base import Database
from runner.logfiles import add_log_file
from runner.sandbox.base import Endpoint


def _connect(endpoint: Endpoint, key: str) -> None:
    api_key = key  # noqa: F841 - a local a traceback could show
    raise RuntimeError(f"could not reach {endpoint.host}")


def test_a_traceback_in_the_log_shows_no_secret_it_held(tmp_path: Path) -> None:
    path = tmp_path / "worker.log"
    password, key = secrets.token_hex(8), "sk-ant-" + secrets.token_hex(8)
    sink = add_log_file(path)
    try:
        try:
            _connect(Endpoint("127.0.0.1", 5432, "app", password), key)
        except RuntimeError:
            logger.exception("sandbox failed")
    finally:
        logger.remove(sink)
    text = path.read_text()
    assert "RuntimeError: could not reach 127.0.0.1" in text and "_connect" in text
    assert password not in text and key not in text, text


def test_connection_settings_print_without_their_password() -> None:
    assert "secret" not in repr(Endpoint("h", 1, "u", "secret"))
    shown = repr(Database("h", 1, "u", "secret", "db"))
    assert "secret" not in shown and "'db'" in shown
