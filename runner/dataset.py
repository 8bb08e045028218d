"""Conversation records: the JSONL format, its validation, and a streaming loader.

One conversation per line (format described in docs/dataset.md). Loading streams the file, so a
1,200-conversation file costs one record of memory at a time while validating.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from runner.errors import DatasetError

FORMAT_VERSION = 1
SEED_TABLES = ("accounts", "contacts", "opportunities", "quotes", "quote_lines", "cases", "activities")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GoldCall(_Strict):
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    expect_error: bool = Field(False, description="This call is expected to fail (the agent must recover)")


class Turn(_Strict):
    user: str = Field(min_length=1)
    expect: Literal["tools", "clarify", "refuse"] = "tools"
    gold_calls: list[GoldCall] = Field(default_factory=list)

    @model_validator(mode="after")
    def _calls_match_expectation(self) -> Turn:
        if self.expect == "tools" and not self.gold_calls:
            raise ValueError("a turn expecting tools needs gold_calls")
        if self.expect != "tools" and self.gold_calls:
            raise ValueError(f"a turn expecting {self.expect!r} must not have gold_calls")
        return self


class Conversation(_Strict):
    format_version: int = FORMAT_VERSION
    id: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:-]+$")
    description: str = ""
    tags: list[str] = Field(default_factory=list)
    difficulty: Literal["easy", "medium", "hard"] = "medium"
    seed: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)
    turns: list[Turn] = Field(min_length=1)
    expected_state: dict[str, Any] | None = None

    @field_validator("format_version")
    @classmethod
    def _known_version(cls, v: int) -> int:
        if v != FORMAT_VERSION:
            raise ValueError(f"format_version {v} is not supported (this runner reads {FORMAT_VERSION})")
        return v

    @field_validator("seed")
    @classmethod
    def _seed_tables(cls, seed: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
        for table, rows in seed.items():
            if table not in SEED_TABLES:
                raise ValueError(f"seed table {table!r} is not one of {', '.join(SEED_TABLES)}")
            for row in rows:
                ident = row.get("id")
                if not isinstance(ident, int) or not 0 < ident < 1001:
                    raise ValueError(f"seed {table} rows need an integer id in 1..1000 (got {ident!r}): "
                                     "ids from 1001 on belong to records the conversation creates")
        return seed


def _describe(e: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, d['loc'])) or '(record)'}: {d['msg']}" for d in e.errors()[:5])


def iter_conversations(path: str | Path, *, skip_invalid: bool = False, rejects: str | Path | None = None
                       ) -> Iterator[Conversation]:
    """Yield conversations one at a time, in file order.

    A bad line raises DatasetError naming file:line and the reason, unless skip_invalid: then it
    goes, with its reason, to the rejects file (default PATH.rejects.jsonl) and loading goes on.
    Duplicate ids are always an error: results are keyed by id.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetError("no such dataset file", path=str(path))
    seen: dict[str, int] = {}
    rejects_path = Path(rejects) if rejects else path.with_suffix(".rejects.jsonl")
    rejects_file = None
    try:
        with path.open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    try:
                        raw = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise DatasetError(f"not valid JSON ({e.msg} at column {e.colno})", path=str(path),
                                           line=lineno) from None
                    if not isinstance(raw, dict):
                        raise DatasetError("a line must be one JSON object", path=str(path), line=lineno)
                    try:
                        conv = Conversation.model_validate(raw)
                    except ValidationError as e:
                        cid = raw.get("id", "?")
                        raise DatasetError(f"conversation {cid!r}: {_describe(e)}", path=str(path),
                                           line=lineno) from None
                except DatasetError as e:
                    if not skip_invalid:
                        raise
                    if rejects_file is None:
                        rejects_file = rejects_path.open("w", encoding="utf-8")
                    rejects_file.write(json.dumps({"line": lineno, "reason": str(e), "text": line.rstrip("\n")})
                                       + "\n")
                    continue
                if conv.id in seen:
                    raise DatasetError(f"duplicate conversation id {conv.id!r} (first on line {seen[conv.id]})",
                                       path=str(path), line=lineno)
                seen[conv.id] = lineno
                yield conv
    finally:
        if rejects_file is not None:
            rejects_file.close()


def load_conversations(path: str | Path, **kw: Any) -> list[Conversation]:
    return list(iter_conversations(path, **kw))


def file_hash(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_conversations(convs: list[Conversation], path: str | Path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for c in convs:
            f.write(c.model_dump_json(exclude_defaults=False) + "\n")
