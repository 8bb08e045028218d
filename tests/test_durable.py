"""Files that survive a crash at any instant (runner/durable.py), and batch mode's journal written with them:
a torn last line never swallows the next, so a batch journaled before a crash is never paid for twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.durable import Log, repair_tail, replace
from runner.gateway.journal import Intent, Journal


def test_an_append_after_a_torn_line_cuts_it_first_and_lands_whole(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_bytes(b'{"n": 1}\n{"n": 2, "tor')  # a crash mid-write
    Log(log).append('{"n": 3}')
    assert log.read_bytes() == b'{"n": 1}\n{"n": 3}\n'
    assert repair_tail(log) == 0  # nothing left to cut


def test_a_torn_file_of_one_line_is_cut_to_nothing(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_bytes(b"no newline at all")
    assert repair_tail(log) == len(b"no newline at all") and log.read_bytes() == b""
    assert repair_tail(tmp_path / "absent") == 0


def test_replace_leaves_the_old_file_or_the_new_one_and_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    replace(path, b"old")
    replace(path, b"new")
    assert path.read_bytes() == b"new" and [p.name for p in tmp_path.iterdir()] == ["manifest.json"]
    with pytest.raises(OSError):  # nowhere to write: raised, nothing left behind
        replace(tmp_path / "gone" / "manifest.json", b"newer")
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"] and path.read_bytes() == b"new"


def test_a_batch_journaled_before_a_torn_line_is_still_pending_after_the_next_append(tmp_path: Path) -> None:
    """Before, the journal skipped a torn line but never cut it: the next append joined it, and the resume,
    reading neither, paid for that batch again."""
    path = tmp_path / "batches.jsonl"
    first = Journal(path)
    first.intend(Intent("i1", "anthropic", "/v1/messages", 0.0, {"r1": "key-1"}))
    first.submitted("i1", "anthropic", "msgbatch_1", {"r1": "key-1"})
    with path.open("ab") as f:
        f.write(b'{"event": "intend", "intent": "i2", "keys": {"r2"')  # killed while journaling the next
    second = Journal(path)  # the resumed gateway
    second.intend(Intent("i3", "openai", "/v1/chat/completions", 0.0, {"r3": "key-3"}))
    second.submitted("i3", "openai", "batch_3", {"r3": "key-3"})
    pending = {batch for _, batch, _ in Journal(path).pending()}
    assert pending == {"msgbatch_1", "batch_3"}
    assert all(line.endswith("}") for line in path.read_text().splitlines())


def test_two_writers_of_one_file_never_publish_a_mix(tmp_path: Path) -> None:
    """Each write has a temporary file of its own: with one fixed name, one writer's rename could publish the
    other's half-written bytes."""
    import threading

    path = tmp_path / "status.json"
    payloads = [bytes([65 + i]) * 200_000 for i in range(4)]
    errors: list[BaseException] = []

    def write(data: bytes) -> None:
        try:
            for _ in range(25):
                replace(path, data, sync=False)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=write, args=(p,)) for p in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and path.read_bytes() in payloads
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]
