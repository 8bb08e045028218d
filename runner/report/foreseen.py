"""The forecast beside what happened, per run: cost, calls, tokens (`runner plan` foresaw them at each
invocation's start: manifest.forecasts). A run's forecast is the widest one made for it (the first
invocation's, which planned every record, unless a later one planned more), per item times the results the
output holds: an output stopped early and resumed is held to what it foresaw of the whole job."""

from __future__ import annotations

from typing import Any

from runner.results.manifest import ForecastRun, Manifest

BANDS = ("low", "expected", "high")
MOST_CACHED = 0.5  # a run whose calls the response cache answered more of than this is not compared


def foreseen(manifest: Manifest, metrics: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """{runs: {run: {forecast, actual, within}}}; None without a forecast."""
    widest: dict[str, ForecastRun] = {}
    for f in manifest.forecasts:
        for r in f.runs:
            if (
                r.items
                and r.source not in ("unknown", "done")
                and r.items > (widest[r.run].items if r.run in widest else 0)
            ):
                widest[r.run] = r
    out: dict[str, Any] = {}
    for run, r in widest.items():
        m = metrics.get(run)
        if m is None or not m["results"] or r.mode not in r.cost_usd or "expected" not in r.need:
            continue
        k = m["results"] / r.items
        cost, need = r.cost_usd[r.mode], r.need["expected"]
        forecast = {
            "items": m["results"],
            "source": r.source,
            "cost_usd": {b: None if (c := cost.get(b)) is None else c * k for b in BANDS},
            "calls": need.calls * k,
            "tokens": k
            * (need.input_tokens + need.cache_read_tokens + need.cache_write_tokens + need.output_tokens),
        }
        actual = {
            "cost_usd": m["cost_usd"],
            "calls": m["llm_calls"],
            "tokens": m["prompt_tokens"] + m["output_tokens"],
        }
        # Calls the response cache answered cost nothing: the band is held to the share the models answered
        # (two records that open alike share an answer in any run); past half, there is no band to speak of.
        hit = float(m.get("cache_hit_rate", 0.0) or 0.0)
        billed = 1.0 - hit
        low, high, spent = forecast["cost_usd"]["low"], forecast["cost_usd"]["high"], actual["cost_usd"]
        cached = hit > MOST_CACHED
        within = (
            None
            if low is None or high is None or spent is None or cached
            else low * billed <= spent <= high * billed
        )
        out[run] = {
            "forecast": forecast,
            "actual": actual,
            "within": within,
            "cached": cached,
            "cache_hit_rate": hit,
        }
    return {"runs": out} if out else None


def foreseen_lines(doc: dict[str, Any]) -> list[str]:
    """The comparison in words, a line per run (the terminal and the HTML page)."""
    said = []
    for run, r in doc["runs"].items():
        f, a = r["forecast"], r["actual"]
        c = f["cost_usd"]
        cost = (
            "unknown" if c["expected"] is None else f"${c['expected']:.4f} (${c['low']:.4f}-${c['high']:.4f})"
        )
        spent = "unknown" if a["cost_usd"] is None else f"${a['cost_usd']:.4f}"
        hit = r.get("cache_hit_rate", 0.0)
        band = (
            f"the forecast's band (for the {_share(1 - hit)} of calls the models answered, the response "
            "cache "
            "the rest)"
            if hit
            else "the forecast's band"
        )
        if r.get("cached"):
            verdict = (
                f", not compared: {_share(hit)} of its calls answered from the response cache (--no-cache "
                "calls the models)"
            )
        else:
            verdict = (
                "" if r["within"] is None else f", within {band}" if r["within"] else f", OUTSIDE {band}"
            )
        said.append(
            f"{run}: forecast {cost}, {f['calls']:,.0f} calls, {f['tokens']:,.0f} tokens for its "
            f"{f['items']} result(s) (from {f['source']}); spent {spent}{verdict}, {a['calls']:,} calls, "
            f"{a['tokens']:,} tokens"
        )
    return said


def _share(x: float) -> str:
    """A share in percent, to a tenth where whole percent would round it to 0 % or 100 %."""
    return f"{x:.0%}" if 0.01 <= x <= 0.99 else f"{x:.1%}"


def record_lines(
    manifest: Manifest, record: dict[str, Any] | None, results: dict[str, list[Any]]
) -> list[str]:
    """One record's foresight beside each run's result for it (`runner show`): the calls and tokens its
    harness foresaw from the record, and what the run took."""
    from runner.config import RunSpec
    from runner.harness import harness_class

    if record is None or manifest.harness is None:
        return []
    foresee = harness_class(manifest.harness).expected_calls
    said = []
    for spec in manifest.runs:
        rows = results.get(spec.name, [])
        if not rows:
            continue
        shapes = foresee(record, RunSpec.model_validate(spec.model_dump(exclude_unset=True)))
        if shapes is None:
            return []  # a harness that cannot foresee its calls
        u = rows[-1].usage
        said.append(
            f"{spec.name}: foreseen {len(shapes)} calls, {sum(s.prompt_tokens for s in shapes):,} "
            f"prompt tokens; took {u.llm_calls} calls, "
            f"{u.input_tokens + u.cache_read_tokens + u.cache_write_tokens:,} prompt tokens"
        )
    return said
