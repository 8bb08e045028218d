"""The report's renderer in a process of its own, warmed while the workers run.

Its first chart starts vl-convert's JavaScript engine: ~0.3 s inside one call that holds the GIL. Warmed
in a thread of the supervisor, that call stalled the supervisor's loop, and every worker waited as long
for its next record (8 workers: 2 worker-seconds of a 400-record run). Here it costs the run a core's
spare time (at a lower priority than the workers), and the report at the end is drawn at once.

    runner -> renderer   an output's directory, one line; the end of stdin: leave
    renderer -> runner   "ok" once that output's report.json and report.html are written, or "error: ..."
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import subprocess
import sys
from pathlib import Path

from runner.resources import dies_with_parent

NICE = 10  # below the workers: it uses only the time they leave


class WarmRenderer:
    """`start` it while the run goes (the supervisor's on_booted), `render` the output at the end; `stop`
    one never asked (safe twice)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        try:
            # it leaves at the end of its stdin, but not while it warms (seconds under load): the kernel ends
            # it with the runner, kill -9 included
            self.proc = subprocess.Popen(
                dies_with_parent([sys.executable, "-m", "runner.report.renderer"], "KILL"),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        except OSError:
            self.proc = None  # the report is drawn in the runner's process at the end, as without it

    def render(self, out: Path) -> str:
        """Have it write `out`'s reports from its files: "ok", or why not (the caller then draws them)."""
        return self.answer() if self.ask(out) else "error: no renderer running"

    def ask(self, out: Path) -> bool:
        """Start it on `out`'s reports (the caller prints its summary meanwhile); False if it cannot be
        asked."""
        proc = self.proc
        if proc is None or proc.stdin is None or proc.poll() is not None:
            self.stop()
            return False
        try:
            proc.stdin.write(f"{out.resolve()}\n")
            proc.stdin.flush()
        except OSError:
            self.stop()
            return False
        return True

    def answer(self) -> str:
        """What it answered to `ask`: "ok", or why not."""
        proc = self.proc
        try:
            if proc is None or proc.stdout is None:
                return "error: no renderer running"
            return proc.stdout.readline().strip() or "error: the renderer ended without an answer"
        except OSError as e:
            return f"error: {e}"
        finally:
            self.stop()

    def stop(self) -> None:
        """Killed, not asked to leave: it has answered, or will not be asked (an interrupted run, a resume
        with nothing new), and its own exit (a JavaScript engine to tear down) is not worth a wait."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def main() -> None:
    # A Ctrl-C at the terminal reaches the whole process group: the runner decides for its helper (it asks for
    # a report, or kills it), and a KeyboardInterrupt's traceback here would only land on the user's terminal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.nice(NICE)
    gc.disable()  # while the imports make their objects: collections meanwhile would only walk them
    from runner.report import html  # noqa: F401 - what drawing the report imports, imported now
    from runner.report.build import write_reports

    gc.enable()
    with contextlib.suppress(Exception):  # a nicety: drawing the first chart starts the engine anyway
        from runner.report.charts import warm_up

        warm_up()
    line = sys.stdin.readline()
    if not line.strip():
        return  # the run ended without asking (interrupted, or nothing to report)
    try:
        write_reports(Path(line.strip()))
        answer = "ok"
    except Exception as e:  # the runner draws them itself, and its error is the one the user sees
        answer = f"error: {type(e).__name__}: {e}"
    sys.stdout.write(answer + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
