"""The process local workers are forked from: a clean process of the runner's (no threads, no clients),
started once per run, that imports the worker's modules and the harness's SDKs first, so that each
worker starts with them in pages shared with the others instead of importing them again (importing
`anthropic` alone is ~0.9 s of CPU). Started as early as the config is known: its imports then run
while the supervisor checks the dataset, launches sandboxes and starts the simulator."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from multiprocess import context as mp_context
from multiprocess import popen_forkserver, spawn

from runner.config import Config
from runner.worker.main import preload

_PREPARING = threading.Lock()  # one start at a time swaps in the preparation without __main__


class _Process(mp_context.ForkServerProcess):
    """A process forked from the forkserver that does not run the parent's __main__ again. The spawn-style
    start executes the main module anew in every child (so that what was pickled from it resolves); a worker
    or a server of the runner needs none of it (its target and arguments are the runner's), while a script
    that runs a job from Python paid its top-level imports once more in each worker (the bench's own: 0.24 s
    of CPU a worker on the start's critical path; a script importing torch, seconds)."""

    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        with _without_main():
            return popen_forkserver.Popen(process_obj)


@contextlib.contextmanager
def _without_main() -> Iterator[None]:
    """What a process started meanwhile (and the forkserver itself, if it starts then) is prepared with, less
    the parent's main module."""
    with _PREPARING:
        prepared = spawn.get_preparation_data

        def without_main(name: str) -> dict[str, Any]:
            data: dict[str, Any] = prepared(name)
            for key in ("init_main_from_name", "init_main_from_path", "main_path"):
                data.pop(key, None)
            return data

        spawn.get_preparation_data = without_main
        try:
            yield
        finally:
            spawn.get_preparation_data = prepared


class _Context(mp_context.ForkServerContext):
    Process = _Process


def context(cfg: Config) -> Any:
    """The forkserver start method, preloading what this config's workers import (with the collector
    paused meanwhile: engine/preload_begin.py); its processes leave the parent's __main__ alone."""
    ctx = _Context()
    ctx.set_forkserver_preload(["runner.engine.preload_begin", *preload(cfg), "runner.engine.preload_end"])
    return ctx


def warm(cfg: Config) -> None:
    """Start the forkserver now, for a local run that may have records to run; at once (a second call
    finds it running)."""
    from multiprocess import forkserver

    if cfg.executor == "local":
        context(cfg)
        with _without_main():
            forkserver.ensure_running()


def preloaded(cfg: Config) -> set[str]:
    """The modules the forkserver of this config's run imports for its workers."""
    return set(preload(cfg))
