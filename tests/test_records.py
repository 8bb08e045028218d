"""Records: any JSONL; the id keys everything, so a missing or duplicate one names file:line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.errors import DatasetError
from runner.records import RecordFile, iter_records, load_records, record_offsets


def _file(tmp_path: Path, *lines: str) -> Path:
    p = tmp_path / "r.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_the_id_is_id_or_conversation_id_or_the_named_field(tmp_path: Path) -> None:
    p = _file(tmp_path, '{"id": "a"}', '{"conversation_id": "b"}', '{"id": 7}', "")
    assert list(load_records(p)) == ["a", "b", "7"]
    q = _file(tmp_path, '{"key": "x", "id": "ignored"}', '{"key": "y"}')
    assert list(load_records(q, id_field="key")) == ["x", "y"]


@pytest.mark.parametrize(("lines", "message"), [
    (['{"id": "a"}', '{"name": "no id"}'], r"r.jsonl:2: record '\?': no id"),
    (['{"id": "a"}', '{"id": "b"}', '{"id": "a"}'], r"r.jsonl:3: duplicate id 'a' \(first on line 1\)"),
    (['{"id": "a"}', "[1, 2]"], r"r.jsonl:2: a line must be one JSON object"),
    (['{"id": "a"', '{"id": "b"}'], r"r.jsonl:1: not valid JSON"),
    (['{"id": ""}'], r"r.jsonl:1: .*no id"),
])
def test_bad_lines_name_file_and_line(tmp_path: Path, lines: list[str], message: str) -> None:
    with pytest.raises(DatasetError, match=message):
        load_records(_file(tmp_path, *lines))


def test_a_harness_check_runs_on_every_line_and_skip_invalid_puts_bad_ones_aside(tmp_path: Path) -> None:
    def check(raw: dict[str, object]) -> None:
        if "turns" not in raw:
            raise ValueError("turns: field required")

    p = _file(tmp_path, '{"id": "a", "turns": []}', '{"id": "b"}', '{"id": "c", "turns": []}')
    with pytest.raises(DatasetError, match=r"r.jsonl:2: record 'b': turns: field required"):
        load_records(p, check=check)
    rejected: list[tuple[int, str]] = []
    assert list(load_records(p, check=check, skip_invalid=True, rejected=rejected)) == ["a", "c"]
    assert [n for n, _ in rejected] == [2]  # handed to the caller too, to say
    rejects = [json.loads(x) for x in p.with_suffix(".rejects.jsonl").read_text().splitlines()]
    assert rejects[0]["line"] == 2 and "field required" in rejects[0]["reason"]


def test_records_keep_their_line_and_data(tmp_path: Path) -> None:
    rec = next(iter_records(_file(tmp_path, "", '{"id": "a", "x": {"y": 1}}')))
    assert rec.line == 2 and rec.data == {"id": "a", "x": {"y": 1}}


def test_a_record_file_reads_each_record_where_the_supervisor_found_it(tmp_path: Path) -> None:
    p = tmp_path / "r.jsonl"
    p.write_bytes('{"id": "a", "x": 1}\n\n{"id": "b", "text": "caf\u00e9 \u2014"}\r\n{"id": "c"}'.encode())
    offsets = record_offsets(iter_records(p))
    records = RecordFile(p, offsets)
    assert [records[i].data for i in ("c", "b", "a")] == [{"id": "c"}, {"id": "b", "text": "café —"},
                                                        {"id": "a", "x": 1}]
    assert records["b"].line == 3 and "b" in records and "z" not in records and len(records) == 3
    assert RecordFile(p)["c"].offset == offsets["c"][0]  # without offsets it finds them itself
    # the lines in another order (a node's copy of the file): each record found where it is now
    p.write_text('{"id": "b"}\n{"id": "a", "x": 1}\n{"id": "c"}\n')
    assert records["a"].data == {"id": "a", "x": 1} and records["a"].line == 2 and records["b"].data == {"id": "b"}
    # a record no longer in it: an error naming it, not another record's data
    p.write_text('{"id": "b"}\n{"id": "c"}\n')
    with pytest.raises(DatasetError, match=r"r.jsonl: changed since the run started: record 'a' is no longer in it"):
        records["a"]


@pytest.mark.parametrize(("value", "number", "note"), [
    (1, 1.0, None), (0.5, 0.5, None), (True, 1.0, None), (None, None, None),
    ("1.0", 1.0, "read from a string"), ("0.75", 0.75, "read from a string"), (" 0 ", 0.0, "read from a string"),
    ("true", 1.0, "read from a string"), ("False", 0.0, "read from a string"), ("pass", 1.0, "read from a string"),
    ("n/a", None, "not a number: 'n/a'"), ([1], None, "not a number: [1]"),
])
def test_scores_are_read_as_harnesses_write_them(value: object, number: float | None, note: str | None) -> None:
    from runner.results.result import read_score

    assert read_score(value) == (number, note)


def test_a_string_that_says_failure_is_a_failure() -> None:
    """bool("0.0") and bool("false") are True in Python: a success field written as a string must not be."""
    from runner.results.result import as_success

    assert as_success("0.0") == (False, "read from a string")
    assert as_success("false") == (False, "read from a string")
    assert as_success("1") == (True, "read from a string")
    assert as_success(0) == (False, None)


@pytest.mark.parametrize(("data", "message"), [
    (b'{"id": "a"}\n{"id": "b", "x": ' + b"[" * 200_000 + b"]" * 200_000 + b"}\n", r"r\.jsonl:2: nested deeper than"),
    (b'{"id": "a", "x": ' + b"[" * 300 + b"]" * 300 + b"}\n", r"r\.jsonl:1: nested deeper than 256 levels"),
    (b'{"id": "a"}\n{"id": "b", "t": "caf\xe9"}\n', r"r\.jsonl:2: not UTF-8 \(byte 0xe9 at column 22\)"),
    (b'{"id": "a", "t": "x\\ud800y"}\n', r"r\.jsonl:1: a string escape that is no character \(\\ud800"),
    (b'{"id": "a\\u001b[31mred"}\n', r"r\.jsonl:1: .*holds control characters"),
    (b'{"id": "a\\u009b31m"}\n', r"r\.jsonl:1: .*holds control characters"),
])
def test_what_a_line_cannot_mean_as_given_is_refused_naming_file_and_line(tmp_path: Path, data: bytes,
                                                                        message: str) -> None:
    """Never a traceback (a RecursionError, a UnicodeDecodeError), never a silent change (bytes replaced, a lone
    surrogate carried on to fail later), never a terminal's escape code printed as an id."""
    p = tmp_path / "r.jsonl"
    p.write_bytes(data)
    with pytest.raises(DatasetError, match=message) as e:
        list(iter_records(p))
    assert "\n" not in str(e.value) and "\x1b" not in str(e.value) and len(str(e.value)) < 300


def test_skip_invalid_keeps_an_undecodable_line_as_it_was_with_its_bytes_escaped(tmp_path: Path) -> None:
    p = tmp_path / "r.jsonl"
    p.write_bytes(b'{"id": "a"}\n{"id": "b", "t": "caf\xe9"}\n')
    rejected: list[tuple[int, str]] = []
    assert [r.id for r in iter_records(p, skip_invalid=True, rejected=rejected)] == ["a"]
    assert rejected[0][0] == 2 and "not UTF-8" in rejected[0][1]
    kept = json.loads((tmp_path / "r.rejects.jsonl").read_text())
    assert kept["line"] == 2 and kept["text"] == '{"id": "b", "t": "caf\\xe9"}'
