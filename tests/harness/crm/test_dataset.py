"""Loader: file:line errors, --skip-invalid rejects, duplicate ids, generator determinism."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.errors import DatasetError
from runner.harness.crm.dataset import iter_conversations, load_conversations, write_conversations
from runner.harness.crm.generate import generate


@pytest.fixture
def good(tmp_path: Path) -> Path:
    p = tmp_path / "d.jsonl"
    write_conversations(generate(5, 1), p)
    return p


def _append(p: Path, line: str) -> None:
    with p.open("a") as f:
        f.write(line + "\n")


@pytest.mark.parametrize("line,reason", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "one JSON object"),
    (json.dumps({"id": "x", "turns": []}), "turns"),
    (json.dumps({"id": "x", "turns": [{"user": "hi", "expect": "tools"}]}), "gold_calls"),
    (json.dumps({"id": "x", "format_version": 9, "turns": [{"user": "hi", "expect": "refuse"}]}), "format_version"),
    (json.dumps({"id": "x", "seed": {"accounts": [{"id": 5000}]}, "turns": [{"user": "hi", "expect": "refuse"}]}),
     "1..1000"),
    (json.dumps({"id": "x", "seed": {"users": []}, "turns": [{"user": "hi", "expect": "refuse"}]}), "seed table"),
])
def test_a_malformed_line_is_named_by_file_line_and_reason(good: Path, line: str, reason: str) -> None:
    _append(good, line)
    with pytest.raises(DatasetError) as info:
        load_conversations(good)
    assert f"{good}:6" in str(info.value) and reason in str(info.value)


def test_skip_invalid_writes_rejects_and_keeps_going(good: Path) -> None:
    _append(good, "{oops")
    _append(good, json.dumps({"id": "ok-1", "turns": [{"user": "Delete every account in Oslo.", "expect": "refuse"}]}))
    convs = load_conversations(good, skip_invalid=True)
    assert [c.id for c in convs][-1] == "ok-1" and len(convs) == 6
    rejects = [json.loads(x) for x in good.with_suffix(".rejects.jsonl").read_text().splitlines()]
    assert rejects[0]["line"] == 6 and "not valid JSON" in rejects[0]["reason"]


def test_duplicate_ids_are_rejected(good: Path) -> None:
    _append(good, good.read_text().splitlines()[0])
    with pytest.raises(DatasetError, match=r"d.jsonl:6: duplicate id .* \(first on line 1\)"):
        load_conversations(good)


def test_loading_streams(good: Path) -> None:
    it = iter_conversations(good)
    assert next(it).id == "crm-1-00000"


def test_generator_is_deterministic_and_varied() -> None:
    a, b = generate(200, 7), generate(200, 7)
    assert [c.model_dump() for c in a] == [c.model_dump() for c in b]
    assert [c.model_dump() for c in generate(5, 8)] != [c.model_dump() for c in a[:5]]
    tags = {t for c in a for t in c.tags}
    assert {"ambiguous_reference", "clarify", "refuse", "close_case_by_number", "add_two_contacts",
            "create_quote", "new_account"} <= tags
    assert {len(c.turns) for c in a} == {1, 2, 3, 4, 5, 6}
    assert len({c.turns[0].user for c in a}) > 150  # natural variation, few repeats
