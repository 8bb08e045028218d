"""`runner debug`: one conversation, one sandbox, the transcript live; the database left running."""

from __future__ import annotations

import contextlib
import json
import shlex
import threading
import time
from typing import Any

from rich.console import Console

from runner.config import Config, resolve_mode
from runner.errors import ConfigError
from runner.harness import build_result, reading
from runner.harness.base import Outcome, Task
from runner.harness.crm import db
from runner.harness.crm.agents import telemetry
from runner.harness.crm.dataset import iter_conversations
from runner.harness.crm.episode import Expectations, run_episode
from runner.harness.crm.harness import DATABASE
from runner.models.client import make_client
from runner.models.settings import client_settings
from runner.report.explain import explain_result
from runner.results.result import now_iso, share_metrics
from runner.run.debug_harness import debug_record, kept_sandbox, run_named
from runner.sandbox.base import Sandbox


def _short(obj: Any, n: int = 400) -> str:
    s = obj if isinstance(obj, str) else json.dumps(obj, default=str)
    return s if len(s) <= n else s[:n] + " ..."


def _said(part: dict[str, Any]) -> list[str]:
    """A step's calls as `name(args)`, or its text reply."""
    calls = [f"[yellow]{c['name']}[/]({_short(c['args'], 300)})" for c in part.get("calls") or []]
    return calls or [f"says: {part.get('text') or '(nothing)'}"]


def _atlas_step(console: Console, d: dict[str, Any]) -> None:
    """Every Atlas step: what the student proposed, the teacher's verdict, and what was run or said."""
    console.print(
        f"[bold magenta]student[/] step {d['step'] + 1} proposes: " + "; ".join(_said(d["proposed"]))
    )
    if d["verdict"] == "revise":
        console.print(f"[bold blue]teacher[/] revises: {d.get('guidance') or '(no guidance)'}")
    else:
        console.print("[bold blue]teacher[/] approves")
    console.print("[bold]runs[/] -> " + "; ".join(_said(d["executed"])))


def _printer(console: Console) -> Any:
    def emit(kind: str, d: dict[str, Any]) -> None:
        if kind == "user":
            console.rule(f"turn {d['turn'] + 1}")
            console.print(f"[bold cyan]user[/]  {d['text']}")
        elif kind == "model":
            tag = " [dim](cached)[/]" if d["cached"] else ""
            if d["tool_calls"]:
                for name, args in d["tool_calls"]:
                    console.print(f"[bold magenta]model[/]{tag} -> [yellow]{name}[/]({_short(args, 300)})")
            else:
                console.print(f"[bold magenta]model[/]{tag}  {d['text']}")
        elif kind == "tool":
            mark = "[green]ok[/]" if d["ok"] else "[red]error[/]"
            console.print(f"   {mark} {_short(d['result'] if d['ok'] else d['error'])}")
        elif kind == "atlas":
            _atlas_step(console, d)
        elif kind == "step_limit":
            console.print(f"[red]step limit ({d['limit']}) reached in turn {d['turn'] + 1}[/]")
        elif kind == "scores":
            pass  # explained once the episode is over (runner/report/explain.py), as `runner show` does

    return emit


def stop_command(sb: Sandbox) -> str:
    if sb.kind == "docker":
        return f"docker rm -f -v pgsr-{sb.id}"  # -v: its data volume too
    if sb.kind == "local":
        pid = getattr(sb, "pid", lambda: None)()
        data = getattr(sb, "_dir", None)
        # the server writes its shutdown checkpoint after the signal: its files are removed once it has exited
        return (
            f"kill {pid} && while kill -0 {pid} 2>/dev/null; do sleep 0.1; done && "
            f"rm -rf {shlex.quote(str(data))}"
        )
    return "(external database: nothing to stop)"


def debug(cfg: Config, conversation_id: str, run_name: str | None, console: Console) -> Sandbox:
    if cfg.harness.kind != "crm":  # a user's harness: its record, its way
        return debug_record(cfg, conversation_id, run_name, console, stop_command)
    conv = next((c for c in iter_conversations(cfg.dataset) if c.id == conversation_id), None)
    if conv is None:
        raise ConfigError(f"no conversation {conversation_id!r} in {cfg.dataset}")
    spec = run_named(cfg, run_name)
    sb, kind = kept_sandbox(cfg, DATABASE)
    mode = resolve_mode(cfg)
    console.print(
        f"[bold]{conv.id}[/] ({conv.difficulty}; {', '.join(conv.tags)}) with run [bold]{spec.name}[/] "
        f"({spec.agent}, {spec.model}) on {'the simulator' if mode == 'sim' else 'the real API'}, "
        f"{kind} sandbox"
    )
    sb.start()
    with contextlib.ExitStack() as stack:
        sim_url = None
        if mode == "sim":
            from runner.models.sim.process import SimServer

            sim_url = stack.enter_context(SimServer(cfg.simulator)).url
        cache = None
        if cfg.cache:
            from runner.cache import DEFAULT_DIR, ResponseCache

            cache = ResponseCache(cfg.cache_dir or DEFAULT_DIR)
        clients = client_settings(cfg)
        agent = make_client(spec.model_ref(), clients, sim_url=sim_url, limiter=None, cache=cache)
        teacher = (
            make_client(spec.teacher, clients, sim_url=sim_url, limiter=None, cache=cache)
            if spec.teacher
            else None
        )
        crm = stack.enter_context(db.connect(sb.dsn("crm")))
        atlas = stack.enter_context(db.connect(sb.dsn("atlas")))
        telemetry.ensure_schema(atlas)
        started = (now_iso(), time.monotonic())
        writer = telemetry.Writer(atlas, None, threading.Lock())
        output, usage = run_episode(
            conv,
            spec,
            crm=crm,
            telemetry_out=writer,
            agent=agent,
            teacher=teacher,
            expectations=Expectations(),
            emit=_printer(console),
        )
    console.rule("outcome")
    # read as a run reads it (success_field, metrics), then said as `runner show` says it
    r = build_result(Task(0, spec, conv.id, {}, 1), Outcome(output, usage=usage), 0, started, reading(cfg))
    explain_result(console, spec.name, r, share_metrics([r]), steps=False)
    console.rule("sandbox left running")
    console.print("the database holds the conversation's final state.")
    assert sb.endpoint is not None
    console.print(f"connect:  psql {shlex.quote(sb.dsn('crm'))}", soft_wrap=True)
    console.print(f"stop:     {stop_command(sb)}", soft_wrap=True)
    return sb
