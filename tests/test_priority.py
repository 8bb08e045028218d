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


def test_the_run_whose_budget_is_most_used_but_not_spent_goes_first() -> None:
    cfg = _cfg(rate_limits={"anthropic": {"rpm": 1000, "itpm": 100_000},
                            "openai/gpt-5.4": {"rpm": 1000, "itpm": 100_000},
                            "openai/gpt-5.4-mini": {"rpm": 1000, "itpm": 1_000_000}})
    left = {"claude": 1200, "gpt": 1200, "atlas": 1200}
    limiter = build_limiter(cfg)
    prefer = budget_preference(cfg, limiter)
    assert prefer is not None and prefer(left) is None  # every budget full (the start): plan order
    _spend(limiter, "openai/gpt-5.4", 50_000)  # GPT-5.4's budget binds: feed it
    assert prefer(left) == "gpt"
    assert prefer({**left, "gpt": 0}) is None  # nothing of it left to start
    _spend(limiter, "openai/gpt-5.4", 45_000)  # now spent: more of it would only wait in the limiter
    assert limiter.headroom(limiter.slot("openai/gpt-5.4")) < 0.1
    assert prefer(left) is None  # the others' budgets are even: plan order
    _spend(limiter, "anthropic", 30_000)  # Claude's, drawn on by its run and by Atlas's teacher
    assert prefer(left) is None  # both at Claude's 70 %: even
    limiter.pause(limiter.slot("openai/gpt-5.4-mini"), 30)  # a 429: nothing left for now
    assert limiter.headroom(limiter.slot("openai/gpt-5.4-mini")) == 0.0
    assert prefer(left) == "claude"  # atlas's student is paused: the only run whose records would not wait


def test_without_limits_the_plan_order_stands() -> None:
    cfg = _cfg()
    assert budget_preference(cfg, build_limiter(cfg)) is None
    assert budget_preference(cfg, object()) is None  # a budget held elsewhere (Ray): not read per slot
