"""The response cache: shared across processes, stable keys across processes and hash seeds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import multiprocess as mp

from runner.cache import ResponseCache
from runner.models.base import Request

REQ = Request("m", "sys", [{"role": "user", "text": "hi"}], [{"name": "t", "description": "d",
                                                               "input_schema": {"type": "object"}}], 0.0, 100)


def _put(directory: str, key: str) -> None:
    ResponseCache(directory).put(key, "p", "m", {"text": "from another process"})


def test_cache_is_shared_across_processes(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=_put, args=(str(tmp_path), "k1"))
    p.start()
    p.join(30)
    assert ResponseCache(tmp_path).get("k1") == {"text": "from another process"}


def _open_together(directory: str, start: Any, errors: Any, i: int) -> None:
    start.wait()
    try:
        with ResponseCache(directory) as c:
            c.put(f"k{i}", "p", "m", {"i": i})
    except Exception as exc:
        errors.put(repr(exc))


def test_many_processes_open_a_new_cache_at_once(tmp_path: Path) -> None:
    """Workers booting together on a cache nobody has created yet (the cause of a "database is locked")."""
    ctx = mp.get_context("spawn")
    for attempt in range(3):
        d = tmp_path / str(attempt)
        start, errors = ctx.Barrier(8), ctx.Queue()
        procs = [ctx.Process(target=_open_together, args=(str(d), start, errors, i)) for i in range(8)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        assert errors.empty(), errors.get()
        with ResponseCache(d) as c:
            assert c.stats()["entries"] == 8


def test_key_is_stable_across_processes_and_hash_seeds() -> None:
    code = ("from runner.models.base import Request;"
            "print(Request('m','sys',[{'role':'user','text':'hi'}],[{'name':'t','description':'d',"
            "'input_schema':{'type':'object'}}],0.0,100).cache_key('anthropic'))")
    keys = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip() for seed in ("1", "2", "99")}
    assert keys == {REQ.cache_key("anthropic")}


def test_key_covers_what_decides_the_answer_and_nothing_else() -> None:
    base = REQ.cache_key("anthropic")
    assert REQ.cache_key("openai") != base
    for change in ({"model": "other"}, {"sampling": {"temperature": 0.5}}, {"max_output_tokens": 5}, {"system": "x"}):
        fields: dict[str, Any] = {**REQ.__dict__, **change}
        assert Request(**fields).cache_key("anthropic") != base


def test_stats_and_clear(tmp_path: Path) -> None:
    c = ResponseCache(tmp_path)
    c.put("a", "anthropic", "m1", {"x": 1})
    c.put("b", "openai", "m2", {"x": 2})
    assert c.stats()["entries"] == 2
    assert c.clear() == 2 and c.get("a") is None
