"""Baseline and Atlas agents on the committed sample, through the SDKs and the simulator."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.config import Config, ModelRef, RunSpec, SimSettings
from runner.harness.crm import db
from runner.harness.crm.agents import telemetry
from runner.harness.crm.dataset import load_conversations
from runner.harness.crm.episode import Expectations, run_episode
from runner.harness.settings import harness_settings
from runner.models.client import make_client
from runner.models.settings import client_settings
from runner.models.sim.process import SimServer
from runner.sandbox.base import Sandbox

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "crm-sample.jsonl"
RUNS = {
    "strong": RunSpec(name="strong", provider="anthropic", model="claude-sonnet-5-5", sim_model="sim-strong"),
    "mini": RunSpec(name="mini", provider="openai", model="gpt-5.4-mini", sim_model="sim-mini"),
    "atlas": RunSpec(name="atlas", agent="atlas", provider="openai", model="gpt-5.4-mini", sim_model="sim-mini",
                     teacher=ModelRef(provider="anthropic", model="claude-sonnet-5-5", sim_model="sim-teacher",
                                      thinking="off")),
}


@pytest.fixture(scope="module")
def outcomes(shared_local_sandbox: Sandbox) -> Iterator[dict[str, list[dict[str, Any]]]]:
    cfg = Config(dataset=SAMPLE, runs=list(RUNS.values()), providers_mode="sim", cache=False)
    convs = load_conversations(SAMPLE)
    with SimServer(SimSettings()) as sim:
        crm = db.connect(shared_local_sandbox.dsn("crm"))
        atlas = db.connect(shared_local_sandbox.dsn("atlas"))
        telemetry.ensure_schema(atlas)
        atlas.execute("TRUNCATE atlas_sessions CASCADE")
        writer = telemetry.Writer(atlas, None, threading.Lock())
        exp = Expectations()
        out: dict[str, list[dict[str, Any]]] = {}
        for name, spec in RUNS.items():
            agent = make_client(spec.model_ref(), client_settings(cfg), sim_url=sim.url, limiter=None, cache=None)
            teacher = make_client(spec.teacher, client_settings(cfg), sim_url=sim.url, limiter=None, cache=None) \
                if spec.teacher else None
            out[name] = []
            for c in convs:
                output, usage = run_episode(c, spec, crm=crm, telemetry_out=writer, agent=agent, teacher=teacher,
                                            expectations=exp)
                out[name].append({**output, "usage": usage.model_dump()})
        out["_telemetry"] = [telemetry.export(atlas, sid) for (sid,) in
                             atlas.execute("SELECT id FROM atlas_sessions ORDER BY id").fetchall()]
        yield out


def _rate(rows: list[dict[str, Any]]) -> float:
    return sum(r["success"] for r in rows) / len(rows)


def test_strong_solves_at_least_95_percent(outcomes: dict[str, list[dict[str, Any]]]) -> None:
    assert _rate(outcomes["strong"]) >= 0.95


def test_mini_scores_clearly_lower_and_atlas_clearly_higher(outcomes: dict[str, list[dict[str, Any]]]) -> None:
    strong, mini, atlas = (_rate(outcomes[k]) for k in ("strong", "mini", "atlas"))
    assert mini <= strong - 0.15
    assert atlas >= mini + 0.15
    interventions = sum(r["atlas"]["interventions"] for r in outcomes["atlas"])
    assert interventions > 0


def test_results_record_transcript_calls_tokens_and_cost(outcomes: dict[str, list[dict[str, Any]]]) -> None:
    r = outcomes["strong"][0]
    assert r["transcript"][0]["role"] == "user" and r["tool_calls"] and r["model_calls"]
    # Claude with prompt caching: the input is split into uncached, cache-write and cache-read tokens.
    u = r["usage"]
    assert u["input_tokens"] + u["cache_write_tokens"] + u["cache_read_tokens"] > 0 and u["output_tokens"] > 0
    assert u["cost_usd"] > 0 and u["input_cost_usd"] > 0 and u["llm_calls"] == len(r["model_calls"])
    assert {"reset_ms", "agent_seconds"} <= set(r["timings"])
    call = r["tool_calls"][0]
    assert {"tool", "args", "ok", "result", "error"} <= set(call)


def test_atlas_telemetry_in_the_sandbox_equals_the_exported_telemetry(
        outcomes: dict[str, list[dict[str, Any]]]) -> None:
    exported = [r["atlas"] for r in outcomes["atlas"]]
    assert outcomes["_telemetry"] == exported
    steps = exported[0]["step_log"]
    assert steps and {"verdict", "guidance", "proposed", "executed"} <= set(steps[0])
    assert all(0.0 <= e["reward"] <= 1.0 for e in exported)


def test_closing_the_harness_closes_every_client_and_the_cache(tmp_path: Path) -> None:
    from runner.harness.base import WorkerInfo
    from runner.harness.crm.harness import CrmHarness

    cfg = Config(dataset=SAMPLE, runs=list(RUNS.values()), providers_mode="sim", cache=True,
                 cache_dir=tmp_path / "cache")
    h = CrmHarness(WorkerInfo(0, harness_settings(cfg), tmp_path, "run-1", sim_url="http://127.0.0.1:9"))
    clients = [c for pair in h.clients.values() for c in pair if c is not None]
    assert len(clients) == 4 and h.cache is not None
    h.close()
    # before: the SDKs' HTTP clients stayed open until the worker process exited
    assert all(c.provider.client.is_closed() for c in clients)  # type: ignore[attr-defined]
    with pytest.raises(sqlite3.ProgrammingError):
        h.cache._db.execute("SELECT 1")
