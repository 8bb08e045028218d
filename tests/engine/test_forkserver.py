"""The forkserver's processes leave the parent's main module alone: a script that runs a job from Python
has its top level executed once, by itself, not again in the forkserver and each worker."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_script_that_starts_workers_runs_its_top_level_once(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    script = tmp_path / "embed.py"
    script.write_text(textwrap.dedent(f"""
        import os
        with open({str(marks)!r}, "a") as f:  # what a heavy import at the top would cost, per execution
            f.write(f"{{os.getpid()}} {{__name__}}\\n")

        from runner.config import load_config
        from runner.engine import forkserver

        if __name__ == "__main__":
            cfg = load_config({str(ROOT / "configs" / "default.yaml")!r})
            forkserver.warm(cfg)
            ctx = forkserver.context(cfg)
            procs = [ctx.Process(target=os.getpid) for _ in range(2)]
            for p in procs:
                p.start()
            for p in procs:
                p.join(60)
            print([p.exitcode for p in procs])
    """))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[0, 0]"
    # the script itself, and nobody else (without: the forkserver and each worker, as __mp_main__)
    assert [line.split()[1] for line in marks.read_text().splitlines()] == ["__main__"]
