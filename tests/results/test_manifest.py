"""manifest.json: typed, merged over a resumed output's own, refused for another run's output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.errors import ResumeMismatch
from runner.results.manifest import InFlight, Manifest, check, read, write


def test_resuming_into_another_run_is_refused_unless_forced(tmp_path: Path) -> None:
    check(tmp_path, Manifest(**{"config_fingerprint": "A", "dataset_sha256": "D", "shard": None}), force=False)
    with pytest.raises(ResumeMismatch, match="config_fingerprint"):
        check(tmp_path, Manifest(**{"config_fingerprint": "B", "dataset_sha256": "D", "shard": None}), force=False)
    m = check(tmp_path, Manifest(**{"config_fingerprint": "B", "dataset_sha256": "D", "shard": None}), force=True)
    assert m.resumed is True



def test_fewer_or_more_runs_resume_and_a_changed_run_is_named(tmp_path: Path) -> None:
    """Before, `--runs gpt-mini` on an output of four runs was refused with an opaque hash
    (`config_fingerprint was '063b...', now 'b488...'`) that did not say what changed."""
    from runner.config import Config

    def manifest(runs: list[dict[str, object]]) -> Manifest:
        cfg = Config.model_validate({"dataset": "x", "harness": {"kind": "python", "entrypoint": "m:f"},
                                     "runs": runs})
        return Manifest(config_fingerprint=cfg.fingerprint(), config_parts=cfg.fingerprint_parts(),
                        dataset_sha256="D", shard=None, runs=[r.model_dump(mode="json") for r in cfg.runs])

    a: dict[str, object] = {"name": "a", "params": {"model": "x"}}
    b: dict[str, object] = {"name": "b", "params": {"model": "y"}}
    check(tmp_path, manifest([a, b]), force=False)
    check(tmp_path, manifest([b]), force=False)  # narrowed: resumes
    check(tmp_path, manifest([a, b, {"name": "c"}]), force=False)  # widened: resumes
    with pytest.raises(ResumeMismatch, match=r"run b changed since") as refused:
        check(tmp_path, manifest([{"name": "b", "params": {"model": "z"}}]), force=False)
    assert "config_fingerprint" not in str(refused.value)
    with pytest.raises(ResumeMismatch, match=r"harness changed since"):
        cfg = Config.model_validate({"dataset": "x", "harness": {"kind": "python", "entrypoint": "m:g"},
                                     "runs": [a]})
        check(tmp_path, Manifest(**{"config_fingerprint": cfg.fingerprint(), "config_parts": cfg.fingerprint_parts(),
                                  "dataset_sha256": "D", "shard": None}), force=False)
    kept = json.loads((tmp_path / "manifest.json").read_text())
    assert [r["name"] for r in kept["runs"]] == ["a", "b", "c"]  # narrowing left the others listed, in order


def test_it_reads_back_what_it_wrote_and_keeps_keys_a_newer_version_added(tmp_path: Path) -> None:
    m = Manifest.new(mode="sim", runs=[{"name": "a"}], epochs=3)
    m.in_flight = InFlight(capacity=4, samples=[(1.0, 2), (2.0, 4, 8)])
    write(tmp_path, m)
    raw = json.loads((tmp_path / "manifest.json").read_text())
    assert raw["in_flight"] == {"capacity": 4, "samples": [[1.0, 2], [2.0, 4, 8]]}
    assert "complete" not in raw and "image" not in raw  # what no one set is not written
    raw["from_a_newer_runner"] = {"x": 1}
    (tmp_path / "manifest.json").write_text(json.dumps(raw))
    back = read(tmp_path)
    assert back.simulated and back.epochs == 3 and back.run_names() == ["a"]
    write(tmp_path, back)
    assert json.loads((tmp_path / "manifest.json").read_text())["from_a_newer_runner"] == {"x": 1}


def test_an_output_without_a_manifest_reads_as_an_empty_one(tmp_path: Path) -> None:
    m = read(tmp_path)
    assert m.run_names() == [] and not m.simulated and m.reducer == "mean" and m.complete is None


def test_the_published_schema_is_this_versions_and_an_older_manifest_still_reads(tmp_path: Path) -> None:
    """docs/manifest.schema.json is what `python -m runner.results.manifest` writes; a manifest of format 1 (no
    format_version, untyped requests, no forecasts or spend) reads, resumes, and is rewritten as format 2."""
    from runner.results import manifest as manifests

    published = json.loads((Path(__file__).resolve().parents[2] / "docs" / "manifest.schema.json").read_text())
    assert published == manifests.schema(), "regenerate: python -m runner.results.manifest > docs/manifest.schema.json"
    old = {"package_version": "0.1.0", "run_id": "abc", "config_fingerprint": "f", "dataset_sha256": "d",
           "requests": {"a": [{"role": "agent", "provider": "openai", "model": "gpt-5.4", "params": {},
                               "dropped": ["temperature"], "thinking": "reasoning off", "max_tokens": 800,
                               "prompt_cache": "automatic", "prices_known": True}]},
           "gateway": {"a": {"llm_calls": 3, "cost_usd": 0.01}}, "counts": {"a": 2}}
    (tmp_path / "manifest.json").write_text(json.dumps(old))
    m = manifests.read(tmp_path)
    assert m.format_version == 1 and m.requests["a"][0].dropped == ["temperature"]
    merged = manifests.check(tmp_path, manifests.Manifest.new(config_fingerprint="f", dataset_sha256="d"), force=False)
    assert merged.format_version == manifests.FORMAT_VERSION and merged.resumed and merged.counts == {"a": 2}


def test_a_forecast_need_in_the_manifest_has_the_fields_of_the_forecasts_need() -> None:
    """ForecastNeed is the manifest's typed copy of runner/forecast/need.Need (kept a model of its own so that
    keys a newer version adds survive a rewrite): a field added to one and not the other fails here."""
    from dataclasses import fields

    from runner.forecast.need import Need
    from runner.results.manifest import ForecastNeed

    assert list(ForecastNeed.model_fields) == [f.name for f in fields(Need)]
    need = Need(3.0, 10.5, 20.0, 1.0, 7.25)
    assert ForecastNeed.model_validate(need.as_dict()).model_dump() == need.as_dict()


def test_a_run_entry_has_every_field_of_the_config_s_run_spec_and_keeps_its_dump_as_it_is() -> None:
    """RunEntry is the manifest's typed copy of runner/config.RunSpec (loose, so that an older output reads): a
    field added to RunSpec and not to RunEntry, or to ModelRef and not to RunModel, fails here."""
    from runner.config import ModelRef, RunSpec, load_config
    from runner.results.manifest import RunEntry, RunModel

    assert set(RunSpec.model_fields) <= set(RunEntry.model_fields)
    assert set(ModelRef.model_fields) <= set(RunModel.model_fields)
    root = Path(__file__).resolve().parents[2]
    for spec in load_config(root / "configs" / "default.yaml").runs:
        dumped = spec.model_dump(mode="json")
        entry = RunEntry.model_validate(dumped)
        assert entry.model_dump(mode="json", exclude_unset=True) == dumped
        assert entry.provider_model() == (spec.provider, spec.model)
    atlas = RunEntry.model_validate(load_config(root / "configs" / "default.yaml").runs[-1].model_dump(mode="json"))
    assert atlas.teacher is not None and atlas.teacher.provider_model() == ("anthropic", "claude-sonnet-5-5")
    # a harness's run names its model in its params, by convention
    assert RunEntry(name="h", params={"provider": "openai", "model": "m"}).provider_model() == ("openai", "m")


def test_an_older_output_s_runs_read_with_fields_since_removed_and_resume(tmp_path: Path) -> None:
    from runner.results import manifest as manifests

    old = {"config_fingerprint": "f", "dataset_sha256": "d", "config_parts": {"run:a": "1", "run:b": "2"},
           "runs": [{"name": "a", "provider": "openai", "model": "gpt-4.1", "temperature": 0,
                     "retired_field": {"x": [1, 2]}, "teacher": {"provider": "anthropic", "model": "c", "old": 1}},
                    {"name": "b", "params": {"model": "m", "k": [1, {"n": None}]}}]}
    (tmp_path / "manifest.json").write_text(json.dumps(old))
    m = manifests.read(tmp_path)
    assert m.run_names() == ["a", "b"] and m.runs[0].teacher is not None and m.runs[0].teacher.model == "c"
    assert m.runs[1].provider_model() == (None, "m")
    merged = manifests.check(tmp_path, manifests.Manifest.new(config_fingerprint="f", dataset_sha256="d",
                                                              config_parts={"run:b": "2"}, runs=[{"name": "b"}]),
                             force=False)
    assert merged.run_names() == ["a", "b"]
    kept = json.loads((tmp_path / "manifest.json").read_text())["runs"]
    assert kept[0] == old["runs"][0]  # what this version does not know, kept as written


def test_a_run_entry_with_a_value_of_the_wrong_type_is_refused() -> None:
    from pydantic import ValidationError

    from runner.results.manifest import RunEntry

    with pytest.raises(ValidationError):
        RunEntry.model_validate({"name": "a", "max_output_tokens": "many"})
    with pytest.raises(ValidationError):
        RunEntry.model_validate({"provider": "openai"})  # a run without its name
