"""What a record's output may be (runner/harness/__init__.py): JSON as stored, within the size limit; anything
else ends that record as a harness_error naming why, never its worker."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest

from runner.config import RunSpec
from runner.harness import OUTPUT_LIMIT_BYTES, Reading, build_result, output_problem
from runner.harness.base import Outcome, Task

READING = Reading("ok", {}, {})


def _result(out: dict[str, Any]) -> Any:
    task = Task(1, RunSpec(name="a"), "r1", {"id": "r1"}, 1)
    return build_result(task, Outcome(out), 0, ("2026-12-02T00:00:00Z", time.monotonic()), READING)


@pytest.mark.parametrize(("out", "why"), [
    ({"ok": True, "blob": b"\x00\x01"}, "TypeError: Object of type bytes"),
    ({"ok": True, "score": math.nan}, "ValueError: Out of range float values"),
    ({"ok": True, "seen": {1, 2}}, "TypeError: Object of type set"),
    ({"ok": True, "text": "\ud800"}, "UnicodeEncodeError"),
])
def test_an_output_json_cannot_store_as_it_is_is_the_record_s_error(out: dict[str, Any], why: str) -> None:
    r = _result(out)
    assert r.status == "error" and r.error_kind == "harness_error" and why in (r.error or ""), r
    assert "cannot be stored as JSON" in (r.error or "")
    json.dumps(r.to_json(), allow_nan=False)  # the result itself is stored whole


def test_an_output_over_the_size_limit_is_the_record_s_error_and_one_at_it_is_kept() -> None:
    pad = len(json.dumps({"ok": True, "t": ""}))
    at_limit = {"ok": True, "t": "x" * (OUTPUT_LIMIT_BYTES - pad)}
    assert output_problem(at_limit) is None and _result(at_limit).success is True
    over = {"ok": True, "t": "x" * (OUTPUT_LIMIT_BYTES - pad + 1)}
    r = _result(over)
    assert r.status == "error" and "over the limit of 4 MiB" in (r.error or "") and r.output is None


def test_the_size_limit_is_documented() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "harness.md").read_text()
    assert f"{OUTPUT_LIMIT_BYTES >> 20} MiB" in doc
