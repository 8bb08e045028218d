"""What a user's harness sees: every spelling of the sandbox's connection, templates, .env, calling."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runner.config import Config
from runner.errors import ConfigError
from runner.harness.base import Database, SandboxInfo
from runner.harness.env import check_templates, connection_env, harness_env, render
from runner.harness.python import Context, calling
from runner.harness.settings import harness_settings

SB = SandboxInfo("sb", {"app": Database("127.0.0.1", 5555, "u", "p@ss/w", "app"),
                        "atlas": Database("127.0.0.1", 5555, "u", "p@ss/w", "atlas")}, "app")


def _cfg(tmp_path: Path, **kw: Any) -> Config:
    data = {"dataset": "x", "config_dir": str(tmp_path), "harness": {"kind": "command", "command": ["x", "{input}",
                                                                                                     "{output}"]},
            "runs": [{"name": "r1", "params": {"model": "m1", "n": 3}, "env": {"RUN_MODEL": "{model}"}}]}
    data.update(kw)
    return Config.model_validate(data)


def test_every_common_spelling_points_at_the_sandbox() -> None:
    env = connection_env(SB)
    assert env["DB_HOST"] == env["POSTGRES_HOST"] == env["PGHOST"] == "127.0.0.1"
    assert env["DB_PORT"] == env["POSTGRES_PORT"] == env["PGPORT"] == "5555"
    assert env["DB_NAME"] == env["POSTGRES_DB"] == env["PGDATABASE"] == "app"
    assert env["DB_PASSWORD"] == env["POSTGRES_PASSWORD"] == env["PGPASSWORD"] == "p@ss/w"
    assert env["DATABASE_URL"] == "postgresql://u:p%40ss%2Fw@127.0.0.1:5555/app"  # quoted: it parses back
    assert env["ATLAS_DATABASE_URL"].endswith("/atlas") and "APP_DATABASE_URL" not in env


def test_a_sandbox_without_network_is_named_by_its_socket_in_every_spelling(tmp_path: Path) -> None:
    """container_network: none: the host is the socket's directory, which libpq takes as a host; the URL
    carries it as a parameter (a path cannot stand where host:port does)."""
    import psycopg

    sock = Database("/tmp/pgsr-socket-x/run", 5432, "u", "p@ss/w", "app")
    env = connection_env(SandboxInfo("sb", {"app": sock}, "app"))
    assert env["DB_HOST"] == env["PGHOST"] == "/tmp/pgsr-socket-x/run"
    parsed = psycopg.conninfo.conninfo_to_dict(env["DATABASE_URL"])
    assert parsed == {"user": "u", "password": "p@ss/w", "dbname": "app", "host": "/tmp/pgsr-socket-x/run",
                      "port": "5432"}
    assert psycopg.conninfo.conninfo_to_dict(sock.dsn())["host"] == "/tmp/pgsr-socket-x/run"
    user = _cfg(tmp_path)
    crm = user.model_copy(update={"harness": user.harness.model_copy(update={"kind": "crm"})})
    assert (crm.sandbox_network(), user.sandbox_network()) == ("auto", "bridge")
    assert user.model_copy(update={"container_network": "none"}).sandbox_network() == "none"


def test_layers_dotenv_then_harness_then_run_then_the_sandbox_wins(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".env").write_text("DB_HOST=laptop\nFROM_DOTENV=1\nALREADY_SET=dotenv\nSHARED=dotenv\n")
    monkeypatch.setenv("ALREADY_SET", "process")
    cfg = _cfg(tmp_path, harness={"kind": "command", "command": ["x", "{input}", "{output}"],
                                  "env": {"SHARED": "harness", "ATLAS": "{dsn:atlas}", "DB_HOST": "harness"}})
    env = harness_env(harness_settings(cfg), SB, cfg.runs[0])
    assert env["FROM_DOTENV"] == "1" and env["ALREADY_SET"] == "process"  # python-dotenv never overrides
    assert env["SHARED"] == "harness" and env["RUN_MODEL"] == "m1" and "dbname=atlas" in env["ATLAS"]
    assert env["DB_HOST"] == "127.0.0.1"  # the sandbox wins over .env and env:


def test_unknown_placeholders_fail_at_start_naming_where(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"runs.r1.env.X: unknown placeholder \{modle\}"):
        check_templates(harness_settings(_cfg(tmp_path, runs=[{"name": "r1", "params": {"model": "m"},
                                                             "env": {"X": "{modle}"}}])))
    assert render("{run}-{n}", {"run": "r", "n": "3"}, where="w") == "r-3"


def _ctx(params: dict[str, Any]) -> Context:
    return Context(run="r", params=params, worker=0, attempt=1, record_id="a", db=SB.db, databases=SB.databases,
                   env={}, scratch=Path("."), logger=None)


def test_an_existing_function_is_called_the_way_it_is_written() -> None:
    def with_ctx(record: dict[str, Any], ctx: Any) -> Any:
        return record["id"], ctx.run

    def with_params(conversation: dict[str, Any], *, model: str, temperature: float = 0.0) -> Any:
        return conversation["id"], model, temperature

    def with_both(record: dict[str, Any], model: str = "", ctx: Any = None) -> Any:
        return model, ctx.worker

    def with_kwargs(record: dict[str, Any], **kw: Any) -> Any:
        return sorted(kw)

    params = {"model": "m", "unused": 1}
    assert calling(with_ctx)({"id": "a"}, _ctx(params)) == ("a", "r")
    assert calling(with_params)({"id": "a"}, _ctx(params)) == ("a", "m", 0.0)
    assert calling(with_both)({"id": "a"}, _ctx(params)) == ("m", 0)
    assert calling(with_kwargs)({"id": "a"}, _ctx(params)) == ["model", "unused"]
