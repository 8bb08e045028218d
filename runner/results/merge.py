"""`runner merge`: shard outputs -> one output, equal to what an unsharded run writes."""

from __future__ import annotations

from pathlib import Path

from runner.errors import ResumeMismatch
from runner.results import manifest
from runner.results.result import Result
from runner.results.sink import ResultSink, read_results


def merge(dirs: list[Path], out: Path) -> dict[str, int]:
    manifests = []
    for d in dirs:
        if not (d / manifest.NAME).exists():
            raise ResumeMismatch(f"{d} has no {manifest.NAME}: not a run output")
        manifests.append(manifest.read(d))
    first = manifests[0]
    for d, m in zip(dirs[1:], manifests[1:], strict=True):
        for key in ("config_fingerprint", "dataset_sha256"):
            if getattr(m, key) != getattr(first, key):
                raise ResumeMismatch(f"{d} was run with another {key} than {dirs[0]}; refusing to merge")
    runs: list[str] = []
    for m in manifests:
        runs += [name for name in m.run_names() if name not in runs]
    order: dict[str, int] = {}  # the indices results carry are positions in the one records file
    sink = ResultSink(out, runs)
    for run in runs:
        rows: dict[tuple[str, int], Result] = {}
        for d in dirs:
            for r in read_results(d / "results" / f"{run}.jsonl"):
                rows[r.trial] = r
                order.setdefault(r.record_id, r.index)
        for r in rows.values():
            sink.write(r)
    counts = sink.finalize(order)
    merged = first.model_copy(
        update={
            "merged_from": [str(d) for d in dirs],
            "shards": [m.shard for m in manifests],
            "counts": counts,
        }
    )
    merged.shard = None  # assigned, so it is written as null: the merge covers every shard
    manifest.write(out, merged)
    return counts
