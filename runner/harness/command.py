"""The `command` harness: a user's own CLI, run once per chunk of records.

argv is a template: {input} is a JSONL file of the chunk's records, {output} the file the command
writes one JSON object per record into (carrying the record's id), {run} and run parameters and
connection placeholders fill in too. The command runs in its own process group with the
sandbox's connection variables; over its time limit the group is killed. A record missing from
the output (crash, non-zero exit, garbage) becomes an error naming what happened; its output and
error streams go to the worker's log.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from loguru import logger

from runner.harness.base import Harness, Outcome, Task, WorkerInfo
from runner.harness.env import harness_env, render, template_values
from runner.records import record_id
from runner.resources import leashed, registered

TAIL_CHARS = 600


class CommandHarness(Harness):
    def __init__(self, info: WorkerInfo) -> None:
        super().__init__(info)
        self.chunk_size = info.settings.block.chunk
        self.chunks = 0

    def run(self, tasks: list[Task]) -> Iterator[tuple[Task, Outcome]]:
        assert self.sandbox is not None
        hs, run = self.info.settings, tasks[0].run
        self.chunks += 1
        stem = self.info.scratch / f"chunk-{self.chunks}"
        inp, outp = stem.with_suffix(".in.jsonl"), stem.with_suffix(".out.jsonl")
        inp.write_text("".join(json.dumps(t.record) + "\n" for t in tasks), encoding="utf-8")
        outp.unlink(missing_ok=True)
        vals = {**template_values(hs, self.sandbox, run), "input": str(inp), "output": str(outp)}
        argv = [render(a, vals, where="harness.command") for a in hs.block.command or []]
        # a chunk: one trial
        env = harness_env(
            hs,
            self.sandbox,
            run,
            {"input": str(inp), "output": str(outp)},
            gateway=self.gateway_env(run.name),
            epoch=tasks[0].epoch,
        )
        why = self._execute(argv, env, hs.cwd, hs.conversation_limit * len(tasks))
        answers = self._read(outp, tasks)
        for t in tasks:
            got = answers.get(t.record_id)
            yield (
                t,
                Outcome(got)
                if got is not None
                else Outcome.failed(f"the command wrote no result for this record ({why})"),
            )
        inp.unlink(missing_ok=True)
        outp.unlink(missing_ok=True)

    def _execute(self, argv: list[str], env: dict[str, str], cwd: Path, timeout: float) -> str:
        """Run to the end or the time limit; say how it ended (for records it did not answer)."""
        logger.info("command: {}", " ".join(argv))
        try:
            # its own process group, which dies with this worker (leashed): no chunk runs on, paid for, after
            # it
            proc = subprocess.Popen(
                leashed(argv),
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as e:
            return f"it could not start: {e}"
        try:
            with registered(proc.pid):
                out, _ = proc.communicate(timeout=timeout)
            why = f"exit code {proc.returncode}"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            why = f"killed after the time limit of {timeout:g}s"
        except BaseException:  # the worker's own time limit or shutdown: leave nothing running
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        text = out.decode(errors="replace")
        for line in text.splitlines():
            logger.info("command| {}", line)
        tail = text.strip()[-TAIL_CHARS:]
        return f"{why}; last output: {tail}" if tail and proc.returncode else why

    def _read(self, path: Path, tasks: list[Task]) -> dict[str, dict[str, Any]]:
        wanted = {t.record_id for t in tasks}
        found: dict[str, dict[str, Any]] = {}
        if not path.exists():
            return found
        id_field = self.info.settings.id_field
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                rid = record_id(obj, id_field) if isinstance(obj, dict) else None
            except (json.JSONDecodeError, ValueError) as e:
                logger.warning("{}:{}: not a result line ({}): {}", path.name, n, e, line[:200])
                continue
            if rid not in wanted:
                logger.warning("{}:{}: a result for {!r}, which this chunk did not hold", path.name, n, rid)
                continue
            found[rid] = obj
        return found
