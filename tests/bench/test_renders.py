"""Every benchmark's section renders from its results, and the summary of targets from all of them: on
results of the smallest sizes (`python -m bench.all --tiny`), committed as tests/fixtures/bench_tiny.json.

The measurements themselves run in `make bench` (and `make bench-smoke`, every one at its smallest size,
~5 minutes); `make test` runs a few end to end (test_bench_smoke.py). A change to a benchmark's result
shape fails here: regenerate the fixture from the `bench.json` a tiny run writes into BENCH_DIR."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import (
    cached,
    floor,
    gateway,
    harness,
    headline,
    heavy,
    inflight,
    memory,
    ratelimit,
    ray_budget,
    report_load,
    scaling,
    startup,
)
from bench.targets import summary

RAW: dict[str, Any] = json.loads((Path(__file__).parents[1] / "fixtures" / "bench_tiny.json").read_text())

SECTIONS = {
    "scaling": (lambda r: scaling.render(r["scaling"], r["overhead"]), ["Scaling against the seeds' design",
                                                                        "Harness overhead"]),
    "slots": (scaling.render_slots, ["Scaling with slots"]),
    "startup": (startup.render, ["Sandbox start-up"]),
    "memory": (memory.render, ["Memory at W="]),
    "inflight": (inflight.render, ["Memory per conversation in flight"]),
    "ratelimit": (ratelimit.render, ["Rate limits:"]),
    "ray": (ray_budget.render, ["Rate limits across nodes"]),
    "cached": (cached.render, ["Fully cached rerun"]),
    "harness": (harness.render, ["A user's harness"]),
    "gateway": (gateway.render, ["Model gateway"]),
    "headline": (headline.render, ["The headline"]),
    "floor": (floor.render, ["bound by rate limits"]),
    "heavy": (heavy.render, ["heavy imports that start threads"]),
    "report": (report_load.render, ["The report in a browser"]),
}


@pytest.mark.parametrize("step", list(SECTIONS))
def test_each_benchmark_renders_its_section(step: str) -> None:
    render, headings = SECTIONS[step]
    text = render(RAW[step])
    for heading in headings:
        assert heading in text, heading
    assert "| " in text  # its table


def test_the_targets_summary_covers_every_benchmark() -> None:
    text = summary(RAW)
    assert "Targets at a glance" in text and text.count("\n|") > len(SECTIONS)
