"""bench.all's targets table: a partial re-run replaces its rows, whichever values met this time."""

from __future__ import annotations

from bench.all import _merged_targets

DOC = """### Targets at a glance

| target | measured |  |
|---|---|---|
| throughput ≥ 0.9·W x the seeds' design, W = 1, 2 | 1.00x, 1.90x | met |
| same, W = 4 | 3.1x (target 3.6x) | **missed** (see its section) |
| with slots: throughput ≥ 0.9·C x the seeds' design, C = 1, 2 | 1.00x, 1.89x | met |
| same, C = 4 | 3.0x (target 3.6x) | **missed** (see its section) |
| same, C = 8 | 6.0x (target 7.2x) | **missed** (see its section) |
| CPU per conversation ≤ 15 ms | 37 ms | **missed** (see its section) |
_Re-measured 2026-11-20 with `x`._

### Next section
"""

PART = """Targets at a glance

| target | measured |  |
|---|---|---|
| with slots: throughput ≥ 0.9·C x the seeds' design, C = 1, 2, 4 | 1.00x, 1.89x, 3.70x | met |
| same, C = 8 | 7.0x (target 7.2x) | **missed** (see its section) |
| CPU per conversation ≤ 15 ms | 30 ms | **missed** (see its section) |
| a new target | 1 | met |
"""


def test_a_family_of_rows_is_replaced_whole_where_it_stood_and_other_rows_stay() -> None:
    merged = _merged_targets(DOC, 0, PART).splitlines()
    rows = [line.split("|")[1].strip() for line in merged if line.startswith("| ") and "---" not in line]
    assert rows == ["target", "throughput ≥ 0.9·W x the seeds' design, W = 1, 2", "same, W = 4",
                    "with slots: throughput ≥ 0.9·C x the seeds' design, C = 1, 2, 4", "same, C = 8",
                    "CPU per conversation ≤ 15 ms", "a new target"]
    assert "| same, C = 8 | 7.0x" in "\n".join(merged) and "30 ms" in "\n".join(merged)
    assert not any(line.startswith("_Re-measured") for line in merged)
