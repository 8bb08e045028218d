"""What a worker's slots read of the config, resolved once at the run's start (run/job.py) and carried in
the worker's spec: a slot never holds the whole Config."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runner.config import Config, RunSpec


@dataclass(frozen=True)
class SlotSettings:
    runs: Mapping[str, RunSpec]  # by name: what each of its tasks is handed
    conversation_limit: float  # seconds a record may take
    max_attempts: int  # a record whose sandbox did not serve it whole runs again until this many
    recreate: bool  # reset: recreate: the slot's databases fresh copies before each chunk
    epochs: int  # trials per record: above 1, the gateway is told which trial a call belongs to


def slot_settings(cfg: Config) -> SlotSettings:
    return SlotSettings(
        runs={r.name: r for r in cfg.runs},
        conversation_limit=cfg.conversation_limit(),
        max_attempts=cfg.max_attempts,
        recreate=cfg.harness.reset == "recreate",
        epochs=cfg.epochs,
    )
