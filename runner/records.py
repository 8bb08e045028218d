"""Records: any JSONL, one JSON object per line, each with an id.

The id (`id_field`, or the first of `id`, `conversation_id` a line has) keys exactly-once,
resume and sharding, so a missing or duplicate id is an error naming file:line. So is what a line
cannot mean as given: bytes that are not UTF-8, a string escape that is no character (a lone
surrogate, which no file or API can carry), nesting deeper than MAX_DEPTH, an id with control
characters (a terminal would obey them when the id is printed). Never a traceback, never a silent
change. A harness may check each record further (`check`); with skip_invalid a bad line goes, with
its reason, to PATH.rejects.jsonl instead of stopping the run. Loading streams the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from runner.errors import DatasetError

DEFAULT_ID_FIELDS = ("id", "conversation_id")
MAX_DEPTH = 256  # nesting of objects and lists in a record (orjson writes 254 levels; real records use a few)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # \ud800 to \udfff, as JSON writes one
Check = Callable[[dict[str, Any]], None]  # raises ValueError with the reason


@dataclass(frozen=True)
class Record:
    id: str
    line: int
    data: dict[str, Any]
    offset: int = 0  # of its line in the file, in bytes (RecordFile reads it there)


def record_id(raw: dict[str, Any], id_field: str | None) -> str:
    fields = (id_field,) if id_field else DEFAULT_ID_FIELDS
    for f in fields:
        v = raw.get(f)
        if isinstance(v, str) and v.strip():
            if _CONTROL.search(v):
                raise ValueError(f"its id {v!r} holds control characters (a terminal would act on them)")
            return v
        if isinstance(v, int) and not isinstance(v, bool):
            return str(v)
    raise ValueError(
        f"no id: the record needs a non-empty string or integer {' or '.join(map(repr, fields))}"
    )


def _depth_and_text(value: Any) -> tuple[int, str | None]:
    """How deep the value nests, and the first string (key or value) holding a lone surrogate: iteratively,
    so no depth is too deep to measure."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            deepest = max(deepest, depth)
            for k, item in v.items():
                if _SURROGATE.search(k):
                    return deepest, k
                stack.append((item, depth + 1))
        elif isinstance(v, list):
            deepest = max(deepest, depth)
            stack.extend((item, depth + 1) for item in v)
        elif isinstance(v, str) and _SURROGATE.search(v):
            return deepest, v
        if deepest > MAX_DEPTH:
            break
    return deepest, None


def _may_nest_or_escape(raw_line: bytes) -> bool:
    """Whether the line could nest past MAX_DEPTH (it takes that many brackets) or hold a lone surrogate (only
    an escape writes one: the bytes themselves were UTF-8): the walk of the parsed record was 40 % of the
    loading of an ordinary dataset, and an ordinary line has neither."""
    return (
        raw_line.count(b"[") + raw_line.count(b"{") > MAX_DEPTH
        or _SURROGATE_ESCAPE.search(raw_line) is not None
    )


def _parse(
    raw_line: bytes, lineno: int, path: Path, id_field: str | None, check: Check | None, offset: int = 0
) -> Record:
    try:
        line = raw_line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DatasetError(
            f"not UTF-8 (byte 0x{raw_line[e.start]:02x} at column {e.start + 1})", path=str(path), line=lineno
        ) from None
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as e:
        raise DatasetError(
            f"not valid JSON ({e.msg} at column {e.colno})", path=str(path), line=lineno
        ) from None
    except RecursionError:
        raise DatasetError(f"nested deeper than {MAX_DEPTH} levels", path=str(path), line=lineno) from None
    if not isinstance(raw, dict):
        raise DatasetError("a line must be one JSON object", path=str(path), line=lineno)
    depth, bad = _depth_and_text(raw) if _may_nest_or_escape(raw_line) else (0, None)
    if depth > MAX_DEPTH:
        raise DatasetError(f"nested deeper than {MAX_DEPTH} levels", path=str(path), line=lineno)
    if bad is not None:
        at = _SURROGATE.search(bad)
        assert at is not None
        raise DatasetError(
            f"a string escape that is no character (\\u{ord(at.group()):04x}, a lone surrogate) "
            f"in {bad[:40]!r}",
            path=str(path),
            line=lineno,
        )
    try:
        rid = record_id(raw, id_field)
        if check is not None:
            check(raw)
    except ValueError as e:
        label = f"record {raw.get(id_field or 'id', raw.get('conversation_id', '?'))!r}: "
        raise DatasetError(label + str(e), path=str(path), line=lineno) from None
    return Record(rid, lineno, raw, offset)


def rejects_path(path: str | Path) -> Path:
    """Where skip_invalid writes a dataset's bad lines, each with its line number and reason."""
    return Path(path).with_suffix(".rejects.jsonl")


def iter_records(
    path: str | Path,
    *,
    id_field: str | None = None,
    check: Check | None = None,
    skip_invalid: bool = False,
    rejects: str | Path | None = None,
    rejected: list[tuple[int, str]] | None = None,
) -> Iterator[Record]:
    """Yield records in file order; raise DatasetError on the first bad line unless skip_invalid.
    `rejected`: the skipped lines' (number, reason) are appended there, so no caller drops them unsaid."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError("no such records file", path=str(path))
    seen: dict[str, int] = {}
    to = Path(rejects) if rejects else rejects_path(path)
    rejects_file: TextIO | None = None
    try:
        with path.open("rb") as f:
            offset = 0
            for lineno, line in enumerate(f, 1):
                at, offset = offset, offset + len(line)
                if not line.strip():
                    continue
                try:
                    rec = _parse(line, lineno, path, id_field, check, at)
                except DatasetError as e:
                    if not skip_invalid:
                        raise
                    if rejected is not None:
                        rejected.append((lineno, str(e)))
                    if rejects_file is None:
                        rejects_file = to.open("w", encoding="utf-8")
                    text = line.decode("utf-8", "backslashreplace").rstrip("\n")  # as it is, bytes escaped
                    rejects_file.write(json.dumps({"line": lineno, "reason": str(e), "text": text}) + "\n")
                    continue
                if rec.id in seen:
                    raise DatasetError(
                        f"duplicate id {rec.id!r} (first on line {seen[rec.id]})", path=str(path), line=lineno
                    )
                seen[rec.id] = lineno
                yield rec
    finally:
        if rejects_file is not None:
            rejects_file.close()


def load_records(path: str | Path, **kw: Any) -> dict[str, Record]:
    """id -> record, in file order."""
    return {r.id: r for r in iter_records(path, **kw)}


@dataclass(frozen=True)
class RecordSource:
    """Where a worker reads the records it runs: the dataset, the field naming each, and whether invalid
    lines are skipped (the supervisor has read and checked them all, and reported the bad ones)."""

    path: Path
    id_field: str | None
    skip_invalid: bool

    def open(self, offsets: Mapping[str, tuple[int, int]] | None = None) -> RecordFile:
        return RecordFile(self.path, offsets, id_field=self.id_field, skip_invalid=self.skip_invalid)


class RecordFile:
    """A dataset's records read where they are, one when it is asked for: a worker is handed where each
    record's line starts (the supervisor read and checked them all), so it parses only the records it runs,
    as it runs them, not the whole file at its boot (the seeds' 1,200 conversations took ~0.3 s of CPU in
    each of 4 workers, on the first records' way; a million would take minutes). Without those offsets it
    reads the file once to find them; the same if a record is no longer where it was
    (a node's own copy of the file, its lines in another order). Safe from the slots' threads
    (each read opens the file)."""

    def __init__(
        self,
        path: str | Path,
        offsets: Mapping[str, tuple[int, int]] | None = None,
        *,
        id_field: str | None = None,
        skip_invalid: bool = False,
    ) -> None:
        self.path, self.id_field = Path(path), id_field
        if offsets is None:
            offsets = record_offsets(
                iter_records(self.path, id_field=id_field, skip_invalid=skip_invalid, rejects=os.devnull)
            )
        self.offsets = offsets
        self._lock = threading.Lock()

    def __getitem__(self, record_id: str) -> Record:
        rec = self._at(record_id)
        if rec is None:  # its lines moved (a node's copy of the file, written otherwise): found again, once
            with self._lock:
                if self._at(record_id) is None:
                    self.offsets = record_offsets(
                        iter_records(self.path, id_field=self.id_field, skip_invalid=True, rejects=os.devnull)
                    )
            rec = self._at(record_id)
        if rec is None:  # its results would not be of its record
            raise DatasetError(
                f"changed since the run started: record {record_id!r} is no longer in it", path=str(self.path)
            )
        return rec

    def _at(self, record_id: str) -> Record | None:
        """The record on its line, if that line still holds it."""
        if record_id not in self.offsets:
            return None
        offset, lineno = self.offsets[record_id]
        with self.path.open("rb") as f:
            f.seek(offset)
            line = f.readline()
        try:
            rec = _parse(line, lineno, self.path, self.id_field, None, offset)
        except DatasetError:
            return None
        return rec if rec.id == record_id else None

    def __contains__(self, record_id: object) -> bool:
        return record_id in self.offsets

    def __len__(self) -> int:
        return len(self.offsets)


def record_offsets(records: Iterable[Record]) -> dict[str, tuple[int, int]]:
    """Where each record's line starts, and its number: what a RecordFile of them reads."""
    return {r.id: (r.offset, r.line) for r in records}


def file_hash(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
