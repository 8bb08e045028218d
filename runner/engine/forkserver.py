"""The process local workers are forked from: a clean process of the runner's (no threads, no clients),
started once per run, that imports the worker's modules and the harness's SDKs first, so that each
worker starts with them in pages shared with the others instead of importing them again (importing
`anthropic` alone is ~0.9 s of CPU). Started as early as the config is known: its imports then run
while the supervisor checks the dataset, launches sandboxes and starts the simulator."""

from __future__ import annotations

from typing import Any

import multiprocess as mp

from runner.config import Config
from runner.worker.main import preload


def context(cfg: Config) -> Any:
    """The forkserver start method, preloading what this config's workers import (with the collector
    paused meanwhile: engine/preload_begin.py)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["runner.engine.preload_begin", *preload(cfg), "runner.engine.preload_end"])
    return ctx


def warm(cfg: Config) -> None:
    """Start the forkserver now, for a local run that may have records to run; at once (a second call
    finds it running)."""
    from multiprocess import forkserver

    if cfg.executor == "local":
        context(cfg)
        forkserver.ensure_running()


def preloaded(cfg: Config) -> set[str]:
    """The modules the forkserver of this config's run imports for its workers."""
    return set(preload(cfg))
