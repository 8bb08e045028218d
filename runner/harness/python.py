"""The `python` harness: a user's function, `fn(record: dict, ctx) -> dict`, called once per record
(or `fn(record, **params)`: an existing function runs as written, see `calling`).

The entrypoint is imported inside the worker (after `pythonpath:` entries go first on sys.path,
so a checkout works uninstalled, and after the connection variables are in os.environ, so a
module that reads DB_HOST at import sees the sandbox). An exception becomes this record's error
with its traceback; a function that kills its process is a worker death (requeued, bounded).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loguru import logger

from runner.config import resolve_path
from runner.harness.base import Database, Harness, Outcome, SandboxInfo, Task
from runner.harness.env import harness_env, per_slot_keys
from runner.harness.slot_env import install, set_slot_env


@dataclass(frozen=True)
class Context:
    """What the function gets beside the record."""

    run: str
    params: Mapping[str, Any]
    worker: int
    attempt: int
    record_id: str
    db: Database
    databases: Mapping[str, Database]
    env: Mapping[str, str]
    scratch: Path
    logger: Any

    def dsn(self, database: str | None = None) -> str:
        return (self.databases[database] if database else self.db).dsn()


def calling(fn: Callable[..., Any]) -> Callable[[dict[str, Any], Context], Any]:
    """Call fn the way it is written: fn(record, ctx), fn(record, **params), or fn(record).

    A harness's existing function (e.g. `run_conversation(conv, *, model, provider)`) runs as it
    is: run parameters fill the keyword parameters they name, `ctx` goes to a parameter of that name
    or to a second positional one.
    """
    params = inspect.signature(fn).parameters
    takes_all = any(p.kind is p.VAR_KEYWORD for p in params.values())
    positional = [p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    ctx_positional = len(positional) >= 2 and positional[1].name not in ("ctx", "context") and \
        positional[1].default is inspect.Parameter.empty
    ctx_name = next((n for n in ("ctx", "context") if n in params), None)

    def call(record: dict[str, Any], ctx: Context) -> Any:
        kwargs = {k: v for k, v in ctx.params.items() if takes_all or (k in params and k != ctx_name)}
        if ctx_name:
            kwargs[ctx_name] = ctx
        elif ctx_positional:
            return fn(record, ctx, **kwargs)
        return fn(record, **kwargs)

    return call


def load_entrypoint(spec: str) -> Callable[..., Any]:
    module, _, name = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise RuntimeError(f"cannot load harness entrypoint {spec}: {type(e).__name__}: {e}") from e
    if not callable(fn):
        raise RuntimeError(f"harness entrypoint {spec} is not callable")
    return fn


class PythonHarness(Harness):
    def attach(self, sandbox: SandboxInfo) -> None:
        super().attach(sandbox)
        cfg = self.info.cfg
        if self.info.slots > 1:  # slots run in threads of one process: each reads its own variables
            install(per_slot_keys(cfg, sandbox))
        # Environment first: a harness module may read its settings at import time.
        self._export(harness_env(cfg, sandbox, cfg.runs[0], gateway=self.gateway_env(cfg.runs[0].name)))
        for p in reversed(cfg.harness.pythonpath):
            path = str(resolve_path(cfg, p))
            if path not in sys.path:
                sys.path.insert(0, path)
        os.chdir(resolve_path(cfg, cfg.harness.cwd) if cfg.harness.cwd else cfg.config_dir)
        assert cfg.harness.entrypoint is not None
        self.fn = calling(load_entrypoint(cfg.harness.entrypoint))

    def run(self, tasks: list[Task]) -> Iterator[tuple[Task, Outcome]]:
        assert self.sandbox is not None
        for task in tasks:
            env = harness_env(self.info.cfg, self.sandbox, task.run, gateway=self.gateway_env(task.run.name))
            self._export(env)
            ctx = Context(run=task.run.name, params=task.run.params, worker=self.info.worker, attempt=task.attempt,
                          record_id=task.record_id, db=self.sandbox.db, databases=self.sandbox.databases, env=env,
                          scratch=self.info.scratch, logger=logger.bind(record=task.record_id, run=task.run.name))
            yield task, self._call(task, ctx)

    def _export(self, env: dict[str, str]) -> None:
        if self.info.slots > 1:
            set_slot_env(env)
        else:
            os.environ.update(env)

    def _call(self, task: Task, ctx: Context) -> Outcome:
        try:
            out = self.fn(dict(task.record), ctx)
        except Exception:
            tb = traceback.format_exc(limit=-12)
            logger.warning("harness raised on {}:{}\n{}", task.run.name, task.record_id, tb)
            return Outcome.failed(tb.strip())
        if not isinstance(out, dict):
            return Outcome.failed(f"the harness returned {type(out).__name__}, not a dict")
        return Outcome(out)
