"""The CRM harness's records: conversations (format in docs/dataset.md), checked line by line.

Generic loading (ids, file:line errors, rejects) is runner.records; this module says what a valid
conversation is, so a bad one stops the run before any worker starts.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from runner.harness.crm.seed_check import check_seed
from runner.harness.crm.tools import TOOLS
from runner.records import iter_records

FORMAT_VERSION = 1
SEED_TABLES = ("accounts", "contacts", "opportunities", "quotes", "quote_lines", "cases", "activities")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GoldCall(_Strict):
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    expect_error: bool = Field(False, description="This call is expected to fail (the agent must recover)")

    @model_validator(mode="after")
    def _a_call_the_tools_accept(self) -> GoldCall:
        """An unknown tool, argument or type would fail only at run time, counted against the model."""
        tool = TOOLS.get(self.tool)
        if tool is None:
            raise ValueError(f"unknown tool {self.tool!r} (the CRM's tools: {', '.join(TOOLS)})")
        if not self.expect_error:  # a call labelled to fail may fail on its arguments, on purpose
            try:
                tool.args.model_validate(self.args)
            except ValidationError as e:
                raise ValueError(f"{self.tool}: {_describe(e)}") from None
        return self


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
                    raise ValueError(
                        f"seed {table} rows need an integer id in 1..1000 (got {ident!r}): "
                        "ids from 1001 on belong to records the conversation creates"
                    )
        check_seed(seed, SEED_TABLES)
        return seed


def _describe(e: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, d['loc'])) or '(record)'}: {d['msg']}" for d in e.errors()[:5])


def check(raw: dict[str, Any]) -> None:
    """A records check: the line is a valid conversation (raises ValueError naming the fields)."""
    try:
        Conversation.model_validate(raw)
    except ValidationError as e:
        raise ValueError(_describe(e)) from None


def iter_conversations(
    path: str | Path,
    *,
    skip_invalid: bool = False,
    rejects: str | Path | None = None,
    rejected: list[tuple[int, str]] | None = None,
) -> Iterator[Conversation]:
    """Yield conversations in file order; a bad line raises DatasetError naming file:line (runner.records)."""
    for rec in iter_records(
        path, id_field="id", check=check, skip_invalid=skip_invalid, rejects=rejects, rejected=rejected
    ):
        yield Conversation.model_validate(rec.data)


def load_conversations(path: str | Path, **kw: Any) -> list[Conversation]:
    return list(iter_conversations(path, **kw))


def write_conversations(convs: list[Conversation], path: str | Path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for c in convs:
            f.write(c.model_dump_json(exclude_defaults=False) + "\n")
