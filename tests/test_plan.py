from __future__ import annotations

import os
import subprocess
import sys

import pytest

from runner.config import Config, RunSpec
from runner.plan import in_shard, make_plan, parse_shard


def _cfg(**kw: object) -> Config:
    runs = [RunSpec(name=n, provider="openai", model="m") for n in ("a", "b", "c")]
    return Config.model_validate({"dataset": "x", "runs": runs, **kw})


IDS = [f"conv-{i}" for i in range(100)]


def test_items_interleave_runs_so_all_progress_together() -> None:
    plan = make_plan(_cfg(), IDS)
    assert [w.run for w in plan[:6]] == ["a", "b", "c", "a", "b", "c"]
    assert [w.id for w in plan] == list(range(300))


def test_shards_partition_the_records_stably() -> None:
    parts = [{w.record_id for w in make_plan(_cfg(shard=(i, 3)), IDS)} for i in (1, 2, 3)]
    assert set().union(*parts) == set(IDS) and sum(map(len, parts)) == 100
    assert all(20 < len(p) < 50 for p in parts)
    assert sum(in_shard("conv-7", (i, 3)) for i in (1, 2, 3)) == 1
    assert parse_shard("2/3") == (2, 3) and parse_shard(None) is None


def test_resume_skips_done_pairs_and_index_is_the_dataset_position() -> None:
    plan = make_plan(_cfg(shard=(2, 3)), IDS, done={("a", "conv-0", 1), ("b", "conv-1", 1)})
    assert ("a", "conv-0") not in {(w.run, w.record_id) for w in plan}
    assert all(w.index == IDS.index(w.record_id) for w in plan)


def test_shards_are_the_same_under_every_hash_seed() -> None:
    """CI matrix jobs run in separate interpreters: a shard must not depend on hash randomisation."""
    code = ("from runner.plan import in_shard; "
            "print([i for i in range(40) if in_shard(f'conv-{i}', (2, 3))])")
    seen = {subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": seed},
                           capture_output=True, text=True, check=True).stdout for seed in ("1", "2", "random")}
    assert len(seen) == 1
    assert seen.pop().strip() == str([i for i in range(40) if in_shard(f"conv-{i}", (2, 3))])


@pytest.mark.parametrize("text", ["0/3", "4/3", "-1/3", "1/0"])
def test_a_shard_outside_1_to_n_is_refused_instead_of_selecting_nothing(text: str) -> None:
    with pytest.raises(ValueError, match="counts from 1"):
        parse_shard(text)


def test_epochs_make_n_items_per_record_every_first_trial_before_any_second() -> None:
    plan = make_plan(_cfg(epochs=3), IDS[:4])
    assert len(plan) == 3 * 4 * 3 and len({(w.run, w.record_id, w.epoch) for w in plan}) == len(plan)
    assert [w.epoch for w in plan] == sorted(w.epoch for w in plan)
    assert [w.id for w in plan] == list(range(len(plan)))
    # a resume skips the trials already there, by epoch
    again = make_plan(_cfg(epochs=3), IDS[:4], done={("a", IDS[0], 1), ("a", IDS[0], 2)})
    assert len(again) == len(plan) - 2 and ("a", IDS[0], 3) in {(w.run, w.record_id, w.epoch) for w in again}
