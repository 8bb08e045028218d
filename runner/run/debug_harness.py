"""`runner debug RECORD_ID` for a user's harness (python or command): one record in one sandbox, run as a
worker runs it (the same environment, the gateway in front of the APIs), its result printed, and the
database left running to inspect.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from runner.config import Config, RunSpec, resolve_mode
from runner.errors import ConfigError
from runner.harness import build_result, database_spec, harness_class, id_field, reading
from runner.harness.base import Task, WorkerInfo, sandbox_info
from runner.harness.settings import harness_settings
from runner.records import load_records
from runner.report.explain import explain_result
from runner.results.result import now_iso, share_metrics
from runner.run.job import model_servers
from runner.sandbox import make_sandbox, resolve_kind
from runner.sandbox.base import Sandbox
from runner.sandbox.schema import DatabaseSpec


def run_named(cfg: Config, name: str | None) -> RunSpec:
    """The config's run of that name (default: the first), or a ConfigError listing them."""
    run = next((r for r in cfg.runs if r.name == name), None) if name else cfg.runs[0]
    if run is None:
        raise ConfigError(f"no run {name!r}; the config has {', '.join(r.name for r in cfg.runs)}")
    return run


def kept_sandbox(cfg: Config, spec: DatabaseSpec) -> tuple[Sandbox, str]:
    """A debug command's sandbox of `spec`, not started, and its kind: made to outlive the command, with a
    port on 127.0.0.1 (the user connects to it afterwards, and removes it with the command printed)."""
    kind = resolve_kind(cfg.sandbox)
    image = None
    if kind == "docker":
        from runner.sandbox.image import ensure_image

        image = ensure_image(spec)
    sb = make_sandbox(
        kind,
        spec,
        image=image,
        run_id="debug",
        owner_pid=os.getpid(),
        name_hint="debug",
        memory=cfg.sandbox_memory(),
        cpus=cfg.container_cpus,
        dsn=cfg.dsn,
        keep=True,
        tmpfs=cfg.container_tmpfs,
    )
    return sb, kind


def debug_record(
    cfg: Config,
    record_id: str,
    run_name: str | None,
    console: Console,
    stop_command: Callable[[Sandbox], str],
) -> Sandbox:
    records = load_records(cfg.dataset, id_field=id_field(cfg), skip_invalid=True, rejects=os.devnull)
    record = records.get(record_id)
    if record is None:
        raise ConfigError(f"no record {record_id!r} in {cfg.dataset}")
    run = run_named(cfg, run_name)
    spec = database_spec(cfg)
    sb, kind = kept_sandbox(cfg, spec)
    console.print(
        f"[bold]{record_id}[/] with run [bold]{run.name}[/] through the {cfg.harness.kind} harness, "
        f"{kind} sandbox"
    )
    sb.start()
    with contextlib.ExitStack() as stack:
        sim, gateway = model_servers(cfg, resolve_mode(cfg), None, stack)
        sim_url, gateway_url = (sim.url if sim else None), (gateway.url if gateway else None)
        scratch = Path(tempfile.mkdtemp(prefix="pgsandbox-debug-"))
        harness = harness_class(cfg.harness.kind)(
            WorkerInfo(0, harness_settings(cfg), scratch, "debug", sim_url=sim_url, gateway_url=gateway_url)
        )
        stack.callback(harness.close)
        harness.attach(sandbox_info(sb, spec))
        task = Task(0, run, record.id, record.data, 1)
        started = (now_iso(), time.monotonic())
        for _, outcome in harness.run([task]):
            console.rule("result")
            if not outcome.error:
                console.print_json(json.dumps(outcome.output, default=str))
            # read as a run reads it (success_field, metrics), then said as `runner show` says it
            r = build_result(task, outcome, 0, started, reading(cfg))
            console.rule("outcome")
            explain_result(console, run.name, r, share_metrics([r]))
    console.rule("sandbox left running")
    console.print(f"connect:  psql '{sb.dsn(spec.name)}'", soft_wrap=True)
    console.print(f"stop:     {stop_command(sb)}", soft_wrap=True)
    console.print(f"scratch:  {scratch}", soft_wrap=True)
    return sb
