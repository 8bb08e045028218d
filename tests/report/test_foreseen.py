"""The forecast beside what a run spent (runner/report/foreseen.py)."""

from __future__ import annotations

from typing import Any

from runner.report.foreseen import foreseen, foreseen_lines
from runner.results.manifest import ForecastEntry, Manifest


def _manifest() -> Manifest:
    run = {"run": "a", "items": 10, "source": "records", "mode": "interactive",
           "need": {"expected": {"calls": 70.0, "input_tokens": 1000.0, "output_tokens": 500.0}},
           "cost_usd": {"interactive": {"low": 0.5, "expected": 1.0, "high": 2.0}}}
    return Manifest(forecasts=[ForecastEntry.model_validate({"runs": [run]})])


def _metrics(cost: float, hit_rate: float) -> dict[str, dict[str, Any]]:
    return {"a": {"results": 10, "cost_usd": cost, "llm_calls": 70, "prompt_tokens": 900, "output_tokens": 450,
                  "cache_hit_rate": hit_rate}}


def test_a_run_is_held_to_its_forecast_band() -> None:
    inside, outside = foreseen(_manifest(), _metrics(1.2, 0.0)), foreseen(_manifest(), _metrics(3.0, 0.0))
    assert inside is not None and outside is not None
    assert inside["runs"]["a"]["within"] is True and outside["runs"]["a"]["within"] is False
    assert "OUTSIDE the forecast's band" in foreseen_lines(outside)[0]


def test_a_run_the_response_cache_answered_is_not_called_outside_its_band() -> None:
    """Before, a rerun answered from the response cache spent $0 and each run's line said `OUTSIDE the
    forecast's band`: the forecast is of what the models would cost, which cached calls do not."""
    doc = foreseen(_manifest(), _metrics(0.0, 1.0))
    assert doc is not None and doc["runs"]["a"]["within"] is None
    [line] = foreseen_lines(doc)
    assert "OUTSIDE" not in line and "not compared: 100.0% of its calls answered from the response cache" in line


def test_a_few_calls_the_response_cache_answered_scale_the_band_and_keep_the_comparison() -> None:
    """Two records that open alike share an answer in any run: 0.5 % of a run's calls cached said nothing of
    its cost against the forecast before; now the band is held to the share the models answered."""
    kept = foreseen(_manifest(), _metrics(1.2, 0.005))
    assert kept is not None and kept["runs"]["a"]["within"] is True
    assert "within the forecast's band (for the 99.5% of calls the models answered" in foreseen_lines(kept)[0]
    # a third of the calls cached: $0.40 is under the whole band's $0.50, but within the two thirds' ($0.33-$1.33)
    third = foreseen(_manifest(), _metrics(0.4, 1 / 3))
    assert third is not None and third["runs"]["a"]["within"] is True
    over = foreseen(_manifest(), _metrics(1.5, 1 / 3))
    assert over is not None and over["runs"]["a"]["within"] is False
    assert "OUTSIDE the forecast's band (for the 67% of calls" in foreseen_lines(over)[0]
