"""Which run starts next under rate limits: the one whose tightest budget has the most left."""

from __future__ import annotations

from runner.config import Config, ModelRef, RunSpec
from runner.priority import budget_preference
from runner.ratelimit import Reservation, build_limiter


def _cfg(**kw: object) -> Config:
    runs = [RunSpec(name="claude", provider="anthropic", model="claude-sonnet-5-5"),
            RunSpec(name="gpt", provider="openai", model="gpt-5.4"),
            RunSpec(name="atlas", agent="atlas", provider="openai", model="gpt-5.4-mini",
                    teacher=ModelRef(provider="anthropic", model="claude-sonnet-5-5"))]
    return Config.model_validate({"dataset": "x", "runs": runs, **kw})


def _spend(limiter: object, key: str, tokens: float) -> None:
    r = limiter.try_acquire(limiter.slot(key), tokens, 0)  # type: ignore[attr-defined]
    assert isinstance(r, Reservation)


def test_the_run_with_budget_left_goes_first_and_atlas_counts_its_teachers_budget() -> None:
    cfg = _cfg(rate_limits={"anthropic": {"rpm": 1000, "itpm": 100_000},
                            "openai/gpt-5.4": {"rpm": 1000, "itpm": 100_000},
                            "openai/gpt-5.4-mini": {"rpm": 1000, "itpm": 1_000_000}})
    limiter = build_limiter(cfg)
    prefer = budget_preference(cfg, limiter)
    assert prefer is not None and prefer() is None  # all budgets full: plan order
    _spend(limiter, "anthropic", 90_000)  # Claude's input tokens nearly spent
    assert limiter.headroom(limiter.slot("anthropic")) < 0.2
    assert prefer() == "gpt"  # atlas's student has room, but its teacher draws on Claude's budget too
    _spend(limiter, "openai/gpt-5.4", 60_000)
    assert prefer() == "gpt"  # 40 % left is still the most
    limiter.pause(limiter.slot("openai/gpt-5.4"), 30)  # a 429: that budget has nothing for now
    assert limiter.headroom(limiter.slot("openai/gpt-5.4")) == 0.0
    assert prefer() in {"claude", "atlas"}  # both at Claude's ~10 %


def test_without_limits_the_plan_order_stands() -> None:
    cfg = _cfg()
    assert budget_preference(cfg, build_limiter(cfg)) is None
    assert budget_preference(cfg, object()) is None  # a budget held elsewhere (Ray): not read per slot
