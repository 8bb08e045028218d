"""Files that survive a crash at any instant, as databases and journals write them: one way to replace a file
and one way to append to a log, used by every file the runner keeps
(results and their final rewrite, the manifest and reports through results/atomic.py, batch mode's journal,
the progress status).

- `replace(path, data)`: the new bytes into a temporary file beside it, flushed to disk (fsync), renamed over
  the old one, and the directory flushed too: a power cut or a kill leaves the old file or the new one,
  never a truncated or empty file (a rename alone can reach the disk before the data it names).
- `Log(path).append(line)`: one line appended whole; a last line torn by a crash mid-write (no newline at
  its end) is cut off first, so the next line never joins it (the join would be unreadable, and the line
  lost with it: a batch journaled so would be paid again on resume). `sync=True` flushes each line to disk
  before it returns (a journal that must hold a batch before it is submitted).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path


def replace(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Write `data` to `path` atomically and (with `sync`) durably; OSError as the system raised it, nothing
    half-written. Without `sync` (a status file rewritten every second) a crash may leave the old file, never
    a torn one."""
    # a name of its own per write: two writers of one file sharing a temporary name could publish a torn mix
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if sync:
        sync_dir(path.parent)


def sync_dir(directory: Path) -> None:
    """Flush a directory's entries (a rename or a new file in it) to disk."""
    # some file systems take no fsync of a directory: nothing more to do there
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def repair_tail(path: Path) -> int:
    """Cut a torn last line (bytes after the last newline) off the file; returns how many bytes were cut."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    if size == 0:
        return 0
    with path.open("r+b") as f:
        f.seek(max(0, size - 1))
        if f.read(1) == b"\n":
            return 0
        end, chunk = size, 1 << 16
        while end > 0:  # back to the last newline
            start = max(0, end - chunk)
            f.seek(start)
            at = f.read(end - start).rfind(b"\n")
            if at >= 0:
                good = start + at + 1
                break
            end = start
        else:
            good = 0
        f.truncate(good)
        return size - good


class Log:
    """An append-only file of lines, whole lines only (see the module's doc)."""

    def __init__(self, path: Path, *, sync: bool = False) -> None:
        self.path, self.sync = path, sync
        self._repaired = False

    def append(self, line: str) -> None:
        if not line.endswith("\n"):
            line += "\n"
        if not self._repaired:  # once per process: a crash before it left at most one torn line
            repair_tail(self.path)
            self._repaired = True
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            data = memoryview(line.encode())
            end = os.lseek(fd, 0, os.SEEK_END)
            try:
                while data:
                    data = data[os.write(fd, data) :]
                if self.sync:
                    os.fsync(fd)
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, end)  # what got out of a line that did not fit is cut: no torn line
                raise
        finally:
            os.close(fd)
