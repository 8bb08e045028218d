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


LIMITS = {"anthropic": {"rpm": 10_000, "itpm": 1_000_000, "otpm": 100_000},
          "openai/gpt-5.4": {"rpm": 10_000, "itpm": 1_000_000},
          "openai/gpt-5.4-mini": {"rpm": 10_000, "itpm": 10_000_000}}
# what the forecast expects an item of each run to ask of each budget: (calls, input, output tokens)
PER_ITEM = {"claude": {"anthropic": (8.0, 6_000.0, 2_000.0)},  # 2,000 out: a forecast of its thinking
            "gpt": {"openai/gpt-5.4": (8.0, 27_000.0, 200.0)},
            "atlas": {"openai/gpt-5.4-mini": (8.0, 27_000.0, 3_000.0), "anthropic": (8.0, 4_000.0, 100.0)}}


def _settle(limiter: object, key: str, run: str, calls: int, inp: float, out: float) -> None:
    for _ in range(calls):
        r = limiter.try_acquire(limiter.slot(key), inp, out, run=limiter.run_index(run))  # type: ignore[attr-defined]
        assert isinstance(r, Reservation)
        limiter.settle(r, inp, out)  # type: ignore[attr-defined]


def test_with_a_forecast_the_critical_path_is_known_before_any_record_ends_and_measured_per_run() -> None:
    """GPT-5.4's input budget needs 1,200 x 27,000 / 1M = 32 min, Claude's output budget 1,200 x (2,000 + 100) /
    100k = 25 min: GPT-5.4 goes first from the start. With Claude's thinking guessed at 5,000 tokens an item, its
    budget looks neediest (61 min), but that is a guess and GPT-5.4 is within half of it: they take turns. Once
    ten of the Claude run's calls settle at 200 output tokens each, its need is measured (whatever Atlas's
    teacher, on Claude's budget too, spends a call) and GPT-5.4 goes first."""
    cfg = _cfg(rate_limits=LIMITS)
    limiter = build_limiter(cfg)
    prefer = budget_preference(cfg, limiter, PER_ITEM)
    assert prefer is not None
    left = {"claude": 1200, "gpt": 1200, "atlas": 1200}
    assert prefer(left) == "gpt"  # the forecast alone already says so (Claude's, a guess, gets turns behind it)
    per = {**PER_ITEM, "claude": {"anthropic": (8.0, 6_000.0, 5_000.0)}}  # thinking guessed too high
    limiter = build_limiter(cfg)
    prefer = budget_preference(cfg, limiter, per)
    assert prefer is not None
    firsts = [prefer(left) for _ in range(6)]  # Claude's need is a guess, and GPT-5.4's is within half of it:
    assert set(firsts) >= {"claude", "gpt"}  # they take turns until one is measured
    _settle(limiter, "anthropic", "claude", 10, 6_000 / 8, 200)
    _settle(limiter, "openai/gpt-5.4", "gpt", 10, 27_000 / 8, 25)
    _settle(limiter, "anthropic", "atlas", 10, 500, 100)
    limiter.settle(limiter.try_acquire(limiter.slot("openai/gpt-5.4-mini"), 0, 0,  # type: ignore[arg-type]
                                       run=limiter.run_index("atlas")), 0, 0)
    import time
    time.sleep(1.05)  # the order is read again at most once a second
    assert [prefer(left) for _ in range(4)] == ["gpt"] * 4
