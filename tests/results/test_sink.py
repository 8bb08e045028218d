from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from loguru import logger

from runner.errors import OutputInUse
from runner.results.result import Result
from runner.results.sink import OutputLock, ResultSink, read_results, results_path


def _r(rid: str, status: str) -> Result:
    return Result(run="r", record_id=rid, index=0, status=status, started_at="t", finished_at="t",
                  error_kind=None if status == "ok" else "harness_error")


def test_torn_last_line_is_ignored_and_cut_on_resume(tmp_path: Path) -> None:
    sink = ResultSink(tmp_path, ["r"])
    sink.write(_r("a", "ok"))
    sink.write(_r("b", "error"))
    sink.close()
    path = results_path(tmp_path, "r")
    with path.open("a") as f:
        f.write('{"run": "r", "record_id": "c", "sta')
    assert [r.record_id for r in read_results(path)] == ["a", "b"]
    assert ResultSink(tmp_path, ["r"]).standing(rerun_errors=True)[0] == {("r", "a", 1)}
    assert ResultSink(tmp_path, ["r"]).standing(rerun_errors=False)[0] == {("r", "a", 1), ("r", "b", 1)}
    assert path.read_text().endswith("}\n")


def test_a_line_that_is_not_a_result_is_skipped_with_its_line_number(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    path = results_path(tmp_path, "r")
    path.parent.mkdir(parents=True)
    path.write_text(_r("a", "ok").model_dump_json() + "\n" + '{"run": "r"}\n' + _r("b", "ok").model_dump_json() + "\n")
    said: list[str] = []
    handler = logger.add(lambda m: said.append(str(m)), level="WARNING", format="{message}")
    try:
        assert [r.record_id for r in read_results(path)] == ["a", "b"]
    finally:
        logger.remove(handler)
    assert len(said) == 1 and f"{path}:2:" in said[0]  # the file and the line a person opens


def test_finalize_orders_by_dataset_and_keeps_the_newest_attempt(tmp_path: Path) -> None:
    sink = ResultSink(tmp_path, ["r"])
    for cid, status in (("c", "ok"), ("a", "error"), ("b", "ok"), ("a", "ok")):
        sink.write(_r(cid, status))
    assert sink.finalize({"a": 0, "b": 1, "c": 2}) == {"r": 3}
    rows = [json.loads(x) for x in results_path(tmp_path, "r").read_text().splitlines()]
    assert [(r["record_id"], r["status"]) for r in rows] == [("a", "ok"), ("b", "ok"), ("c", "ok")]


def test_finalize_again_with_nothing_written_since_rewrites_nothing_and_counts_once(tmp_path: Path) -> None:
    """The supervisor finalizes as the last result lands, the run's end again: once is the work, the counts
    and errors are the first time's; a result written in between is finalized anew."""
    sink = ResultSink(tmp_path, ["r"])
    order = {"a": 0, "b": 1, "c": 2}
    for cid, status in (("b", "error"), ("a", "ok")):
        sink.write(_r(cid, status))
    assert sink.finalize(order) == {"r": 2}
    path = results_path(tmp_path, "r")
    stamp = path.stat().st_mtime_ns
    assert sink.finalize(order) == {"r": 2} and sink.errors == {"harness_error": 1}
    assert path.stat().st_mtime_ns == stamp
    sink.write(_r("c", "error"))
    assert sink.finalize(order) == {"r": 3} and sink.errors == {"harness_error": 2}
    assert [json.loads(x)["record_id"] for x in path.read_text().splitlines()] == ["a", "b", "c"]


def test_finalize_of_one_result_per_record_reorders_the_lines_as_the_models_would(tmp_path: Path) -> None:
    """The usual case (no rerun to merge) is done on the lines: the same bytes as through the models, and the
    same counts; a torn last line sends it the models' way (which cuts it)."""
    ids = [f"r{i:03d}" for i in range(50)]
    order = {rid: i for i, rid in enumerate(ids)}
    for torn in (False, True):
        out = tmp_path / str(torn)
        sink = ResultSink(out, ["r"])
        for i in (7, 3, 49, 0, *(i for i in range(50) if i not in (7, 3, 49, 0))):  # as they finish
            sink.write(_r(ids[i], "error" if i % 5 == 0 else "ok"))
        sink.close()
        if torn:
            with results_path(out, "r").open("a") as f:
                f.write('{"run": "r", "record_id": "zz", "sta')
        models = sorted(read_results(results_path(out, "r")), key=lambda r: order[r.record_id])
        expected = "".join(json.dumps(r.to_json(), sort_keys=True, separators=(",", ":")) + "\n" for r in models)
        sink = ResultSink(out, ["r"])
        assert sink.finalize(order) == {"r": 50}
        assert sink.errors == {"harness_error": 10} and sink.present["r"] == {(rid, 1) for rid in ids}
        assert results_path(out, "r").read_text() == expected


def test_the_output_lock_refuses_a_second_holder_and_dies_with_its_holder(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from pathlib import Path
        from runner.results.sink import OutputLock
        with OutputLock(Path({str(tmp_path)!r})):
            print("held", flush=True)
            time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    with pytest.raises(OutputInUse, match=f"pid {holder.pid}"), OutputLock(tmp_path):
        pass
    holder.kill()  # kill -9: no clean-up ran, the kernel released the lock
    holder.wait()
    with OutputLock(tmp_path):
        assert (tmp_path / ".lock").read_text().strip() == str(os.getpid())


def test_every_result_is_written_and_read_back_whole_even_what_orjson_refuses(tmp_path: Path) -> None:
    sink = ResultSink(tmp_path, ["r"])
    odd = _r("big", "ok").model_copy(update={"output": {"args": {"n": 10**30}, "ratio": float("nan")},
                                             "metrics": {"m": float("inf")}})
    sink.write(_r("a", "ok"))
    sink.write(odd)
    sink.close()
    back = {r.record_id: r for r in read_results(results_path(tmp_path, "r"))}
    assert set(back) == {"a", "big"}
    assert back["big"].output is not None and back["big"].output["args"]["n"] == 10**30
    lines = results_path(tmp_path, "r").read_text().splitlines()
    assert all(json.loads(line)["record_id"] in back for line in lines)


def test_a_rerun_s_result_keeps_those_it_replaced_across_rewrites(tmp_path: Path) -> None:
    """--lf twice: the first attempt failed, the second failed again, the third passed. Each rewrite keeps one
    line per record, the newest, with every attempt it replaced (oldest first) and their outputs."""
    def attempt(n: int, success: bool) -> Result:
        return _r("a", "ok").model_copy(update={"attempt": n, "success": success, "output": {"try": n}})

    sink = ResultSink(tmp_path, ["r"])
    sink.write(attempt(1, False))
    sink.finalize({"a": 0})
    for n, success in ((2, False), (3, True)):
        sink = ResultSink(tmp_path, ["r"])
        sink.write(attempt(n, success))
        sink.finalize({"a": 0})
    (row,) = read_results(results_path(tmp_path, "r"))
    assert row.attempt == 3 and row.success
    assert [(e.attempt, e.success, e.output) for e in row.earlier] == [(1, False, {"try": 1}), (2, False, {"try": 2})]
