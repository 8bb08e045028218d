"""What a harness reads of the config, resolved once at the top (run/job.py, `runner debug`) and handed to
each worker's harnesses whole: never the Config itself, which holds the whole job (sandboxes, the gateway,
the report) and would be read again in every worker.

For every kind: the `harness:` block with its paths resolved against the config's directory (cwd,
pythonpath, env_file, the harness's interpreter), the runs, the databases a sandbox holds, the clouds a
harness's SDKs may call through the gateway, the record id's field, the time limit of one record, and where
the response cache and the warm interpreter's verdicts are kept. For the built-in CRM: the runs whose models
it calls, the ones among them sent through the batch APIs, the telemetry database, and what its model
clients are made with.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from runner.clouds import clouds_used
from runner.config import Config, HarnessBlock, RunSpec, harness_python, resolve_path
from runner.models.settings import ClientSettings, client_settings


@dataclass(frozen=True)
class HarnessSettings:
    block: HarnessBlock  # the config's `harness:` (kind, entrypoint, command, env, chunk, warm...)
    config_dir: Path
    runs: tuple[RunSpec, ...]
    databases: tuple[str, ...]  # "main" first, then the config's extra databases
    clouds: frozenset[str]  # the clouds a harness's SDKs are pointed at the gateway for
    id_field: str | None
    conversation_limit: float  # seconds one record may take
    cache: bool  # the response cache is on
    cache_dir: Path | None  # where it is (None: runner.cache's default)
    python: Path | None  # harness.python as an interpreter's path
    cwd: Path  # where the harness runs (harness.cwd, else the config's directory)
    pythonpath: tuple[Path, ...]
    env_file: Path | None  # harness.env_file, resolved (None: the .env next to the config, if any)
    # the built-in CRM
    model_runs: tuple[RunSpec, ...]
    providers: frozenset[str]  # the providers its agents and teachers call
    batch_runs: frozenset[str]
    telemetry_dsn: str | None
    client: ClientSettings

    @property
    def kind(self) -> str:
        return self.block.kind


def harness_settings(cfg: Config) -> HarnessSettings:
    h = cfg.harness
    return HarnessSettings(
        block=h,
        config_dir=cfg.config_dir,
        runs=tuple(cfg.runs),
        databases=("main", *(cfg.database.extra_databases if cfg.database else ())),
        clouds=frozenset(clouds_used(cfg)),
        id_field=cfg.id_field,
        conversation_limit=cfg.conversation_limit(),
        cache=cfg.cache,
        cache_dir=cfg.cache_dir,
        python=harness_python(cfg),
        cwd=resolve_path(cfg, h.cwd) if h.cwd else cfg.config_dir,
        pythonpath=tuple(resolve_path(cfg, p) for p in h.pythonpath),
        env_file=resolve_path(cfg, h.env_file) if h.env_file else None,
        model_runs=tuple(cfg.model_runs()),
        providers=frozenset(cfg.providers_called()),
        batch_runs=frozenset(cfg.batch_runs()),
        telemetry_dsn=cfg.telemetry_dsn,
        client=client_settings(cfg),
    )
