"""A file replaced whole or not at all, as databases write theirs (runner/durable.py: a temporary file beside
it, written and fsynced, renamed over it, the directory fsynced). A reader (a browser on report.html, a resume
on manifest.json) sees the old file or the new one, never half of one, whatever stops the writer: a Ctrl-C,
a full disk, kill -9, a power cut."""

from __future__ import annotations

from pathlib import Path

from runner.durable import replace
from runner.results.sink import writing


def write_atomically(path: Path, data: str | bytes) -> None:
    """`data` to `path` (text as UTF-8). OutputUnwritable naming the path if it cannot be written; the
    temporary file is then removed and `path` left as it was."""
    with writing(path):
        replace(path, data.encode() if isinstance(data, str) else data)
