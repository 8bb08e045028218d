"""Which run starts next under rate limits: the one whose tightest budget has the most left."""

from __future__ import annotations

from runner.budget.priority import budget_preference
from runner.budget.ratelimit import Reservation, build_limiter
from runner.config import Config, ModelRef, RunSpec


def _cfg(**kw: object) -> Config:
    runs = [RunSpec(name="claude", provider="anthropic", model="claude-sonnet-5-5"),
            RunSpec(name="gpt", provider="openai", model="gpt-5.4"),
            RunSpec(name="atlas", agent="atlas", provider="openai", model="gpt-5.4-mini",
                    teacher=ModelRef(provider="anthropic", model="claude-sonnet-5-5"))]
    return Config.model_validate({"dataset": "x", "runs": runs, **kw})


def _spend(limiter: object, key: str, tokens: float) -> None:
    r = limiter.try_acquire(limiter.slot(key), tokens, 0)  # type: ignore[attr-defined]
    assert isinstance(r, Reservation)


def test_the_run_furthest_behind_goes_first_unless_its_budget_is_spent() -> None:
    cfg = _cfg(rate_limits={"anthropic": {"rpm": 1000, "itpm": 100_000},
                            "openai/gpt-5.4": {"rpm": 1000, "itpm": 100_000},
                            "openai/gpt-5.4-mini": {"rpm": 1000, "itpm": 1_000_000}})
    limiter = build_limiter(cfg)
    prefer = budget_preference(cfg, limiter)
    assert prefer is not None
    assert prefer({"claude": 10, "gpt": 30, "atlas": 20}) == "gpt"  # the most left to finish
    _spend(limiter, "openai/gpt-5.4", 95_000)  # its budget spent: more of it would only wait
    assert limiter.headroom(limiter.slot("openai/gpt-5.4")) < 0.1
    assert prefer({"claude": 10, "gpt": 30, "atlas": 20}) == "atlas"
    _spend(limiter, "anthropic", 95_000)  # atlas's teacher draws on Claude's budget: spent too
    assert prefer({"claude": 10, "gpt": 30, "atlas": 20}) is None  # every budget spent: plan order
    assert prefer({"claude": 0, "gpt": 0, "atlas": 0}) is None
    limiter = build_limiter(cfg)
    prefer = budget_preference(cfg, limiter)
    assert prefer is not None
    assert prefer({"claude": 1200, "gpt": 1200, "atlas": 1200}) is None  # even (the start): plan order,
    assert prefer({"claude": 1000, "gpt": 1040, "atlas": 1010}) is None  # not one run taking every slot
    assert prefer({"claude": 1000, "gpt": 1060, "atlas": 1010}) == "gpt"
    limiter.pause(limiter.slot("openai/gpt-5.4-mini"), 30)  # a 429: nothing left for now
    assert limiter.headroom(limiter.slot("openai/gpt-5.4-mini")) == 0.0


def test_without_limits_the_plan_order_stands() -> None:
    cfg = _cfg()
    assert budget_preference(cfg, build_limiter(cfg)) is None
    assert budget_preference(cfg, object()) is None  # a budget held elsewhere (Ray): not read per slot
