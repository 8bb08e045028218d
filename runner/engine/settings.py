"""What the supervisor's loop reads of the config, resolved once at the run's start (run/job.py): the
engine never holds the whole Config."""

from __future__ import annotations

from dataclasses import dataclass

from runner.config import Config


@dataclass(frozen=True)
class EngineSettings:
    conversation_limit: float  # seconds a record may take: its alarm's, and the base of its overdue deadline
    shutdown_grace_seconds: float  # what records in flight get to finish after a Ctrl-C or SIGTERM
    maxfail: int | None = None  # -x / --maxfail N: results that failed, were cut or erred before it stops


def engine_settings(cfg: Config) -> EngineSettings:
    return EngineSettings(
        conversation_limit=cfg.conversation_limit(),
        shutdown_grace_seconds=cfg.shutdown_grace_seconds,
        maxfail=cfg.maxfail,
    )
