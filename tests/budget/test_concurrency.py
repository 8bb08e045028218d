"""Concurrency split into workers x slots, and a worker handle's slot bookkeeping."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.budget.concurrency import layout, split
from runner.config import load_config


def _cfg(tmp_path: Path, **over: object) -> object:
    data = tmp_path / "d.jsonl"
    data.write_text('{"id": "a"}\n')
    return load_config(None, {"dataset": str(data), **over})


@pytest.mark.parametrize(("c", "cores", "mem", "expect"), [
    (256, 2, 20_000, (4, 64)),  # few workers (a process uses one core), many slots
    (10, 2, 20_000, (4, 3)),  # no more workers than the slots need: 4 x 3 >= 10, not 10 workers
    (3, 8, 20_000, (3, 1)),  # less work than cores: one slot each
    (256, 16, 20_000, (32, 8)),
    (256, 16, 8_000, (5, 52)),  # less memory: fewer workers, more slots
    (256, 16, 3_000, (1, 111)),  # too little for 256 at all: what fits, said so
    (1, 2, 20_000, (1, 1)),
])
def test_split_uses_few_workers_many_slots_within_memory(c: int, cores: int, mem: float, expect: tuple[int, int]
                                                          ) -> None:
    lay = split(c, cores=cores, memory_mib=mem)
    assert (lay.workers, lay.slots) == expect
    assert 0 <= lay.in_flight - c < lay.slots or "memory allows" in lay.why  # no worker with idle slots


def test_layout_lets_workers_or_slots_win_and_never_exceeds_the_work(tmp_path: Path) -> None:
    # (the embedded default config says workers: 4; a concurrency flag re-splits unless -w is given too)
    assert (lambda x: (x.workers, x.slots))(layout(_cfg(tmp_path), items=100)) == (4, 1)  # type: ignore[arg-type]
    lay = layout(_cfg(tmp_path, concurrency=64, workers=2), items=1000)  # type: ignore[arg-type]
    assert (lay.workers, lay.slots) == (2, 32)
    lay = layout(_cfg(tmp_path, concurrency=64, slots=8), items=1000)  # type: ignore[arg-type]
    assert (lay.workers, lay.slots) == (8, 8)
    lay = layout(_cfg(tmp_path, workers=4, slots=16), items=10)  # type: ignore[arg-type]
    assert lay.in_flight >= 10 and lay.slots <= 10 and lay.workers == 1  # 10 records fill one worker's slots
    lay = layout(_cfg(tmp_path, concurrency=64), items=1000, kind="external")  # type: ignore[arg-type]
    assert (lay.workers, lay.slots) == (1, 1)


def test_conversations_that_wait_on_batches_with_their_data_on_disk_are_planned_smaller(tmp_path: Path,
                                                                                       monkeypatch: pytest.MonkeyPatch
                                                                                       ) -> None:
    """1,024 waiting conversations fit this 24 GiB machine's plan (half its memory) at 8 MiB each; at the
    interactive 12 MiB they do not."""
    import runner.budget.concurrency as concurrency

    monkeypatch.setattr(concurrency, "available_mib", lambda: 22_000.0)
    monkeypatch.setattr(concurrency.os, "cpu_count", lambda: 2)
    runs = [{"name": "a", "provider": "anthropic", "model": "claude-sonnet-4-5"}]
    base = {"concurrency": 1024, "runs": runs, "compare_to": "a"}
    waiting = layout(_cfg(tmp_path, **base, container_tmpfs=False, batch={"enabled": True}),  # type: ignore[arg-type]
                     items=4800)
    assert waiting.in_flight >= 1024 and "memory allows" not in waiting.why
    for over in ({"container_tmpfs": True, "batch": {"enabled": True}}, {"container_tmpfs": False}):
        busy = layout(_cfg(tmp_path, **base, **over), items=4800)  # type: ignore[arg-type]
        assert busy.in_flight < 1024 and "memory allows" in busy.why
