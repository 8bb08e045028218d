"""Loader: file:line errors, --skip-invalid rejects, duplicate ids, generator determinism."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def _has_int_arg(call: dict[str, Any]) -> bool:
    return not call.get("expect_error") and any(isinstance(v, int) and not isinstance(v, bool)
                                                for v in call["args"].values())


def _broken(conv: dict[str, Any], how: str) -> dict[str, Any]:
    """The first conversation of the sample with one thing wrong, as a dataset author would get it wrong."""
    c = json.loads(json.dumps(conv))
    call = next(call for t in c["turns"] for call in t["gold_calls"] if _has_int_arg(call))
    if how == "unknown tool":
        call["tool"] = "delete_everything"
    elif how == "unknown argument":
        call["args"]["colour"] = "blue"
    elif how == "wrong type":
        first = next(k for k, v in call["args"].items() if isinstance(v, int) and not isinstance(v, bool))
        call["args"][first] = "two"
    elif how == "missing account":
        c["seed"]["contacts"] = [{"id": 7, "account_id": 999, "first_name": "Ada", "last_name": "Byron"}]
    elif how == "unknown column":
        c["seed"]["accounts"][0]["shoe_size"] = 42
    c["id"] = f"{c['id']}-{how.replace(' ', '-')}"
    return c


def test_validate_rejects_what_would_fail_at_run_time(tmp_path: Path) -> None:
    """Before, each of these passed `dataset validate` and failed (or was silently dropped) at run time."""
    sample = Path(__file__).resolve().parents[3] / "data" / "crm-sample.jsonl"
    convs = [json.loads(x) for x in sample.read_text().splitlines()]
    base = next(c for c in convs if any(_has_int_arg(call) for t in c["turns"] for call in t["gold_calls"]))
    cases = {"unknown tool": "unknown tool 'delete_everything'", "unknown argument": "colour",
             "wrong type": "valid integer", "missing account": "account_id = 999 points to a accounts row",
             "unknown column": "accounts has no column 'shoe_size'"}
    p = tmp_path / "d.jsonl"
    p.write_text("".join(json.dumps(c) + "\n" for c in [base, *(_broken(base, how) for how in cases)]))
    done = subprocess.run([sys.executable, "-m", "runner", "dataset", "validate", str(p), "--skip-invalid"],
                          capture_output=True, text=True, timeout=60)
    # the bad lines skipped, each named, and the check fails: it found bad lines (before: rc 0, named nowhere)
    assert done.returncode == 1 and "1 valid conversations" in done.stdout, done.stdout + done.stderr
    assert all(f"skipped: {p}:{n}:" in done.stderr for n in range(2, 7)) and "5 bad line(s) skipped" in done.stderr
    rejects = [json.loads(x) for x in p.with_suffix(".rejects.jsonl").read_text().splitlines()]
    assert [r["line"] for r in rejects] == [2, 3, 4, 5, 6]
    for r, (how, says) in zip(rejects, cases.items(), strict=True):
        assert f"{p}:{r['line']}" in r["reason"] and says in r["reason"], (how, r["reason"])
    done = subprocess.run([sys.executable, "-m", "runner", "dataset", "validate", str(p)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and f"{p}:2: " in done.stderr and "Traceback" not in done.stderr
