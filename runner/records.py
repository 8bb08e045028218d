"""Records: any JSONL, one JSON object per line, each with an id.

The id (`id_field`, or the first of `id`, `conversation_id` a line has) keys exactly-once,
resume and sharding, so a missing or duplicate id is an error naming file:line. A harness may
check each record further (`check`); with skip_invalid a bad line goes, with its reason, to
PATH.rejects.jsonl instead of stopping the run. Loading streams the file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from runner.errors import DatasetError

DEFAULT_ID_FIELDS = ("id", "conversation_id")
Check = Callable[[dict[str, Any]], None]  # raises ValueError with the reason


@dataclass(frozen=True)
class Record:
    id: str
    line: int
    data: dict[str, Any]


def record_id(raw: dict[str, Any], id_field: str | None) -> str:
    fields = (id_field,) if id_field else DEFAULT_ID_FIELDS
    for f in fields:
        v = raw.get(f)
        if isinstance(v, str) and v.strip():
            return v
        if isinstance(v, int) and not isinstance(v, bool):
            return str(v)
    raise ValueError(f"no id: the record needs a non-empty string or integer {' or '.join(map(repr, fields))}")


def _parse(line: str, lineno: int, path: Path, id_field: str | None, check: Check | None) -> Record:
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as e:
        raise DatasetError(f"not valid JSON ({e.msg} at column {e.colno})", path=str(path), line=lineno) from None
    if not isinstance(raw, dict):
        raise DatasetError("a line must be one JSON object", path=str(path), line=lineno)
    try:
        rid = record_id(raw, id_field)
        if check is not None:
            check(raw)
    except ValueError as e:
        label = f"record {raw.get(id_field or 'id', raw.get('conversation_id', '?'))!r}: "
        raise DatasetError(label + str(e), path=str(path), line=lineno) from None
    return Record(rid, lineno, raw)


def rejects_path(path: str | Path) -> Path:
    """Where skip_invalid writes a dataset's bad lines, each with its line number and reason."""
    return Path(path).with_suffix(".rejects.jsonl")


def iter_records(path: str | Path, *, id_field: str | None = None, check: Check | None = None,
                 skip_invalid: bool = False, rejects: str | Path | None = None,
                 rejected: list[tuple[int, str]] | None = None) -> Iterator[Record]:
    """Yield records in file order; raise DatasetError on the first bad line unless skip_invalid.
    `rejected`: the skipped lines' (number, reason) are appended there, so no caller drops them unsaid."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError("no such records file", path=str(path))
    seen: dict[str, int] = {}
    to = Path(rejects) if rejects else rejects_path(path)
    rejects_file: TextIO | None = None
    try:
        with path.open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = _parse(line, lineno, path, id_field, check)
                except DatasetError as e:
                    if not skip_invalid:
                        raise
                    if rejected is not None:
                        rejected.append((lineno, str(e)))
                    if rejects_file is None:
                        rejects_file = to.open("w", encoding="utf-8")
                    rejects_file.write(json.dumps({"line": lineno, "reason": str(e), "text": line.rstrip("\n")})
                                       + "\n")
                    continue
                if rec.id in seen:
                    raise DatasetError(f"duplicate id {rec.id!r} (first on line {seen[rec.id]})", path=str(path),
                                       line=lineno)
                seen[rec.id] = lineno
                yield rec
    finally:
        if rejects_file is not None:
            rejects_file.close()


def load_records(path: str | Path, **kw: Any) -> dict[str, Record]:
    """id -> record, in file order."""
    return {r.id: r for r in iter_records(path, **kw)}


def file_hash(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
