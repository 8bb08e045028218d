"""`runner merge`: shard outputs -> one output, equal to what an unsharded run writes."""

from __future__ import annotations

import json
from pathlib import Path

from runner.errors import ResumeMismatch
from runner.results.result import Result
from runner.results.sink import ResultSink, read_results, write_manifest


def merge(dirs: list[Path], out: Path) -> dict[str, int]:
    manifests = []
    for d in dirs:
        m = d / "manifest.json"
        if not m.exists():
            raise ResumeMismatch(f"{d} has no manifest.json: not a run output")
        manifests.append(json.loads(m.read_text()))
    first = manifests[0]
    for d, m in zip(dirs[1:], manifests[1:], strict=True):
        for key in ("config_fingerprint", "dataset_sha256"):
            if m.get(key) != first.get(key):
                raise ResumeMismatch(f"{d} was run with another {key} than {dirs[0]}; refusing to merge")
    runs: list[str] = []
    for m in manifests:
        runs += [r["name"] for r in m.get("runs", []) if r["name"] not in runs]
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
    write_manifest(out, {**first, "shard": None, "merged_from": [str(d) for d in dirs],
                         "shards": [m.get("shard") for m in manifests], "counts": counts})
    return counts
