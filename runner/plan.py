"""Config + record ids -> work items with stable ids; resume skips what is already done."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass

from runner.config import Config


@dataclass(frozen=True)
class WorkItem:
    id: int
    run: str
    record_id: str
    index: int  # position in the dataset: results are finally written in this order
    epoch: int = 1  # which trial of the record (epochs: each record run N times as independent items)


def in_shard(record_id: str, shard: tuple[int, int] | None) -> bool:
    """Stable across machines and Python hash seeds: sha256, not hash()."""
    if shard is None:
        return True
    i, n = shard
    return int.from_bytes(hashlib.sha256(record_id.encode()).digest()[:8], "big") % n == i - 1


def in_scope(cfg: Config, record_ids: Iterable[str]) -> list[tuple[int, str]]:
    """(position, id) of the records this output holds: the shard's, the first `limit` of them."""
    ids = [(i, c) for i, c in enumerate(record_ids) if in_shard(c, cfg.shard)]
    return ids[: cfg.limit] if cfg.limit is not None else ids


def make_plan(
    cfg: Config,
    record_ids: Iterable[str],
    done: Set[tuple[str, str, int]] = frozenset(),
    chosen: Set[tuple[str, str]] | Set[str] | None = None,
    work: Mapping[str, float] | None = None,
) -> list[WorkItem]:
    """Interleaved run x record items, so every run progresses together; with epochs, every record's first
    trial before any second one (an output stopped halfway holds whole passes over the records).

    `index` is the position in the whole dataset, so shards merge back into dataset order. `done`: (run,
    record, epoch) already there. `chosen`: only these records (ids), or only these (run, record) pairs;
    None: all. `work`: how long each record is foreseen to take (its model calls): the longest start first,
    so that the job's last records are short ones (a job's end waits for its slowest record; the longest
    first is the classic rule that keeps that tail short); records the same length keep dataset order.
    """
    items: list[WorkItem] = []
    scope = in_scope(cfg, record_ids)  # its --limit chose the first K of the dataset, whatever the order
    if work:
        scope = sorted(scope, key=lambda pair: -work.get(pair[1], 0.0))
    for epoch in range(1, cfg.epochs + 1):
        for index, cid in scope:
            for run in cfg.runs:
                if (run.name, cid, epoch) not in done and (
                    chosen is None or cid in chosen or (run.name, cid) in chosen
                ):
                    items.append(WorkItem(len(items), run.name, cid, index, epoch))
    return items


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard takes i/n, e.g. 2/3 (got {text!r})") from None
    if not 1 <= i <= n:  # 0/3 would select no record at all, and say nothing
        raise ValueError(
            f"--shard i/n counts from 1: i in 1..{n} (got {text!r}; a Kubernetes "
            "JOB_COMPLETION_INDEX counts from 0, so pass $((JOB_COMPLETION_INDEX + 1))/n)"
        )
    return i, n
