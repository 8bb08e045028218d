"""The environment a user's harness sees: its own settings, pointed at the worker's private sandbox.

Layers, later wins: the runner's environment, the `.env` file (python-dotenv rules: it never
overrides a variable already set), the harness's `env:`, the run's `env:`, and last the
connection variables, in every spelling harnesses read, so the sandbox always wins.
Templates: {host} {port} {user} {password} {database} {dsn} {url}, {dsn:NAME} {url:NAME} for any
database, {run} and each run parameter ({model}, ...), {python}
(harness.python if set, else the runner's interpreter).
"""

from __future__ import annotations

import os
import string
import sys
from collections.abc import Mapping

from dotenv import dotenv_values

from runner.config import RunSpec
from runner.errors import ConfigError
from runner.harness.base import Database, SandboxInfo, gateway_env
from runner.harness.settings import HarnessSettings


def connection_env(sb: SandboxInfo) -> dict[str, str]:
    """DB_*, POSTGRES_*, PG*, DATABASE_URL, and <NAME>_DATABASE_URL for each other database."""
    db = sb.db
    env = {
        "DB_HOST": db.host,
        "DB_PORT": str(db.port),
        "DB_USER": db.user,
        "DB_PASSWORD": db.password,
        "DB_NAME": db.name,
        "POSTGRES_HOST": db.host,
        "POSTGRES_PORT": str(db.port),
        "POSTGRES_USER": db.user,
        "POSTGRES_PASSWORD": db.password,
        "POSTGRES_DB": db.name,
        "PGHOST": db.host,
        "PGPORT": str(db.port),
        "PGUSER": db.user,
        "PGPASSWORD": db.password,
        "PGDATABASE": db.name,
        "DATABASE_URL": db.url(),
    }
    for name, other in sb.databases.items():
        if name != sb.main:
            env[f"{name.upper()}_DATABASE_URL"] = other.url()
    return env


def per_slot_keys(hs: HarnessSettings, sb: SandboxInfo) -> set[str]:
    """Variables whose value depends on the slot (its databases) or the run (its env:): with slots in
    threads, the process-wide value of these would be some other slot's (runner/proc/slot_env.py)."""
    keys = {"DB_NAME", "POSTGRES_DB", "PGDATABASE"} | {
        k for k in connection_env(sb) if k.endswith("DATABASE_URL")
    }
    for run in hs.runs:
        keys |= run.env.keys()
    return keys | {"RUNNER_RUN", "RUNNER_EPOCH"}


def marked_env(hs: HarnessSettings, mark: str) -> dict[str, str]:
    """The environment of the run's warm interpreter (proc/zygote.py): a record's, with `mark` for every
    value that differs between slots (its databases, the gateway's URLs and keys, the run): a library
    that keeps one at import is then found out, instead of handing every slot a value that is none's."""
    dbs = {n: Database(mark, 1, mark, mark, mark) for n in hs.databases}
    gateway = {k: mark for k in gateway_env("http://h", "r", 0, token=mark, clouds=hs.clouds)}
    return {
        **harness_env(hs, SandboxInfo("warm", dbs, "main"), hs.runs[0], gateway=gateway),
        "RUNNER_RUN": mark,
        "RUNNER_EPOCH": "1",
    }


def template_values(hs: HarnessSettings, sb: SandboxInfo, run: RunSpec) -> dict[str, str]:
    db = sb.db
    vals = {
        "host": db.host,
        "port": str(db.port),
        "user": db.user,
        "password": db.password,
        "database": db.name,
        "dsn": db.dsn(),
        "url": db.url(),
        "python": str(hs.python or sys.executable),
    }
    for name, other in sb.databases.items():
        vals[f"dsn:{name}"] = other.dsn()
        vals[f"url:{name}"] = other.url()
    return {**vals, **run.template_values()}


def render(template: str, values: Mapping[str, str], *, where: str) -> str:
    """Fill {placeholders}; an unknown one is a config error naming it and where it is."""
    out = []
    for literal, field, spec, conv in string.Formatter().parse(template):
        out.append(literal)
        if field is None:
            continue
        key = f"{field}:{spec}" if spec else field
        if key not in values or conv:
            known = ", ".join(sorted(k for k in values if ":" not in k))
            raise ConfigError(
                f"unknown placeholder {{{key}}} (known: {known}, dsn:NAME, url:NAME)", where=where
            )
        out.append(values[key])
    return "".join(out)


def dotenv_file(hs: HarnessSettings) -> dict[str, str]:
    """The .env next to the config (or harness.env_file): variables the process does not already have."""
    path = hs.env_file or hs.config_dir / ".env"
    if not path.is_file():
        if hs.env_file:
            raise ConfigError("env_file not found", where=str(path))
        return {}
    return {k: v for k, v in dotenv_values(path).items() if v is not None and k not in os.environ}


def harness_env(
    hs: HarnessSettings,
    sb: SandboxInfo,
    run: RunSpec,
    extra: Mapping[str, str] = {},
    *,
    gateway: Mapping[str, str] = {},
    epoch: int = 1,
) -> dict[str, str]:
    """The whole environment for one record of `run` (a full copy: subprocesses get exactly this)."""
    vals = {**template_values(hs, sb, run), **extra}
    env = {**os.environ, **dotenv_file(hs)}
    for k, v in hs.block.env.items():
        env[k] = render(v, vals, where=f"harness.env.{k}")
    for k, v in run.env.items():
        env[k] = render(v, vals, where=f"runs.{run.name}.env.{k}")
    env.update(connection_env(sb))
    env.update(gateway)
    env["RUNNER_RUN"] = run.name
    env["RUNNER_EPOCH"] = str(epoch)  # which trial of the record (config epochs), 1 without
    return env


def check_templates(hs: HarnessSettings) -> None:
    """Fail at start, not in a worker, on a placeholder that no record could fill."""
    dbs = {n: Database("h", 1, "u", "p", n) for n in hs.databases}
    fake = SandboxInfo("check", dbs, "main")
    for run in hs.runs:
        vals = {**template_values(hs, fake, run), "input": "", "output": ""}
        for k, v in hs.block.env.items():
            render(v, vals, where=f"harness.env.{k}")
        for k, v in run.env.items():
            render(v, vals, where=f"runs.{run.name}.env.{k}")
        for i, arg in enumerate(hs.block.command or []):
            render(arg, vals, where=f"harness.command[{i}]")
