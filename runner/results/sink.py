"""Results on disk: one JSONL file per run and the resume index (the manifest beside them: manifest.py).

Only the supervisor writes here. Each line is flushed as it arrives; a torn last line (a crash
mid-write) is cut off on resume. finalize() rewrites each file in record order, one line per
record: the newest attempt, carrying those a rerun replaced (`earlier`). Lines are Result records
(runner/results/result.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import orjson
from loguru import logger
from pydantic import ValidationError

from runner.durable import repair_tail, replace
from runner.errors import OutputInUse, OutputUnwritable
from runner.results.result import RESULT_VERSION, Result, outcome


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """OSError (read-only file system, disk full, permissions) as a run-stopping error naming the path."""
    try:
        yield
    except OSError as e:
        raise OutputUnwritable(path, e) from e


def results_path(out: Path, run: str) -> Path:
    return out / "results" / f"{run}.jsonl"


def read_results(path: Path, *, repair: bool = False) -> list[Result]:
    """All complete lines; with repair, a torn tail is cut off the file."""
    if not path.exists():
        return []
    data = path.read_bytes()
    good_end = data.rfind(b"\n") + 1
    rows = []
    for n, line in enumerate(data[:good_end].splitlines(), 1):
        if line.strip():
            try:
                rows.append(Result.model_validate_json(line))
            except ValidationError as e:
                logger.warning(
                    "{}:{}: skipping a line that is not a result ({})",
                    path,
                    n,
                    e.errors()[0]["msg"] if e.errors() else e,
                )
    if good_end < len(data):
        logger.warning("{}: ignoring a torn last line ({} bytes)", path, len(data) - good_end)
        if repair:
            repair_tail(path)
    return rows


class OutputLock:
    """One run per output directory. An flock, so the kernel releases it when its holder dies, even
    by kill -9: two runs on one --out would otherwise append to files the other one is rewriting
    at its end, and both would report complete with results lost."""

    def __init__(self, out: Path) -> None:
        self.path = out / ".lock"
        self._fd: int | None = None

    def __enter__(self) -> OutputLock:
        with writing(self.path):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise OutputInUse(
                f"{self.path.parent} is in use by another run (pid {holder}): wait for it to end, "
                "or give this run another --out"
            ) from None
        self._fd = fd
        with writing(self.path):  # who holds it, for the message the next run prints
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing releases the lock
            self._fd = None


class ResultSink:
    def __init__(self, out: Path, runs: list[str]) -> None:
        self.out = out
        self.runs = runs
        with writing(out / "results"):
            (out / "results").mkdir(parents=True, exist_ok=True)
        self._files: dict[str, IO[str]] = {}
        self.errors: Counter[str] = Counter()
        self.present: dict[str, set[tuple[str, int]]] = {}  # finalize: the trials each run's file holds
        # what `standing` read: each run's latest results (the forecast's)
        self.seen: dict[str, list[Result]] = {}
        # finalize's (order, counts), if still so
        self._final: tuple[dict[str, int], dict[str, int]] | None = None

    def latest(self, run: str) -> dict[tuple[str, int], Result]:
        """A run's newest result per record trial (a rerun's line comes after the one it replaces), with the
        results it replaced under `earlier`."""
        out: dict[tuple[str, int], Result] = {}
        for r in read_results(results_path(self.out, run), repair=True):
            out[r.trial] = r.replacing(out[r.trial]) if r.trial in out else r
        return out

    def standing(self, *, rerun_errors: bool) -> tuple[set[tuple[str, str, int]], set[tuple[str, str, int]]]:
        """One read of every run's results (4,800 take ~1.4 s): the (run, record, epoch) to skip, recorded
        successfully or recorded at all unless rerun_errors; and those whose latest result failed, was cut
        or ended in an error (`--lf`)."""
        done: set[tuple[str, str, int]] = set()
        failed: set[tuple[str, str, int]] = set()
        for run in self.runs:
            latest = self.latest(run)
            self.seen[run] = list(latest.values())
            for (rid, epoch), r in latest.items():
                if r.ok or not rerun_errors:
                    done.add((run, rid, epoch))
                if outcome(r) in ("failure", "cut", "error"):
                    failed.add((run, rid, epoch))
        return done, failed

    def write(self, result: Result) -> None:
        """Append one line; if it cannot be written whole (disk full), cut what got out and raise
        OutputUnwritable, so the file never holds a torn line and every line in it is a result."""
        path = results_path(self.out, result.run)
        self._final = None
        with writing(path):
            f = self._files.get(result.run)
            if f is None:
                f = self._files[result.run] = path.open("a", encoding="utf-8")
            end = f.tell()
            try:
                f.write(_line(result))
                f.flush()
            except OSError:
                self._files.pop(result.run, None)
                with contextlib.suppress(OSError):
                    f.close()  # its buffer cannot be flushed either
                with contextlib.suppress(OSError):
                    os.truncate(path, end)
                raise

    def finalize(self, order: dict[str, int]) -> dict[str, int]:
        """Rewrite each run's file in dataset order, newest attempt per conversation
        (those it replaced kept in it); return counts. `errors` then holds the failed results by error kind
        (counted here, while the rows are read). Again, with nothing written since
        (the supervisor finalizes as the last result lands, while its workers shut down): the same counts,
        nothing rewritten."""
        if self._final is not None and self._final[0] is order:
            return dict(self._final[1])
        self.close()
        self.errors.clear()
        counts = {}
        for run in self.runs:
            path = results_path(self.out, run)
            if (fast := _in_order(path, order)) is not None:  # each record trial once: its lines, reordered
                lines, trials, errors = fast
                self.errors.update(errors)
                self.present[run] = trials
                with writing(path):
                    replace(path, b"".join(lines))
                counts[run] = len(lines)
                continue
            latest = self.latest(run)
            rows = sorted(
                latest.values(), key=lambda r: (order.get(r.record_id, 1 << 30), r.record_id, r.epoch)
            )
            self.errors.update(Counter(str(r.error_kind) for r in rows if not r.ok))
            self.present[run] = set(latest)
            # whole or not at all (durable.replace): if it cannot be written, the file as appended stays,
            # complete, in arrival order
            with writing(path):
                replace(path, "".join(_line(r) for r in rows).encode())
            counts[run] = len(rows)
        self._final = (order, dict(counts))
        return counts

    def close(self) -> None:
        for f in list(self._files.values()):
            f.close()
        self._files.clear()


def _in_order(
    path: Path, order: dict[str, int]
) -> tuple[list[bytes], set[tuple[str, int]], Counter[str]] | None:
    """A run's result lines in dataset order, with the trials they hold and their errors by kind, where every
    line is a whole result of this version and each record trial has one: the usual case, done on the lines
    as written (the seeds' job: 73 MB, 4,800 results, parsed into models took ~5 s after its last record).
    None otherwise (a rerun's result to merge with the one it replaced, a line of an older version or a torn
    one): the caller goes through the models."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], set(), Counter()
    if data and not data.endswith(b"\n"):
        return None
    keyed: list[tuple[tuple[int, str, int], bytes]] = []
    errors: Counter[str] = Counter()
    for line in data.splitlines(keepends=True):
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(row, dict) or row.get("version") != RESULT_VERSION:
            return None
        rid, epoch = str(row.get("record_id")), int(row.get("epoch", 1))
        keyed.append(((order.get(rid, 1 << 30), rid, epoch), line))
        if row.get("status") != "ok":
            errors[str(row.get("error_kind"))] += 1
    trials = {(rid, epoch) for (_, rid, epoch), _ in keyed}
    if len(trials) < len(keyed):
        return None
    keyed.sort(key=lambda k: k[0])
    return [line for _, line in keyed], trials, errors


# orjson: the stdlib's encoder was a fifth of the supervisor's CPU at 64 conversations in flight
# (a result carries its transcript). Keys sorted as before; NaN and infinities become null.
_LINE = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE


def _line(r: Result) -> str:
    data = r.to_json()
    try:
        return orjson.dumps(data, option=_LINE, default=str).decode()
    except TypeError:  # what orjson refuses and the stdlib takes: an integer past 64 bits from a model's args
        return json.dumps(data, sort_keys=True, default=str) + "\n"
