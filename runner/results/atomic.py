"""A file replaced whole or not at all, as databases write theirs: a temporary file beside it, written and
fsynced, renamed over it, the directory fsynced. A reader (a browser on report.html, a resume on
manifest.json) sees the old file or the new one, never half of one, whatever stops the writer: a Ctrl-C,
a full disk, kill -9, a power cut."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from runner.results.sink import writing


def write_atomically(path: Path, data: str | bytes) -> None:
    """`data` to `path` (text as UTF-8). OutputUnwritable naming the path if it cannot be written; the
    temporary file is then removed and `path` left as it was."""
    tmp = path.with_name(f".{path.name}.tmp")
    raw = data.encode() if isinstance(data, str) else data
    with writing(path):
        try:
            with tmp.open("wb") as f:
                f.write(raw)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _sync_dir(path.parent)


def _sync_dir(directory: Path) -> None:
    """The rename itself made durable (a file system that cannot fsync a directory is left as it is)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
