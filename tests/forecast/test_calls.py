"""A record's foreseen calls in tokens: prompt caching as each provider documents it, thinking by effort."""

from __future__ import annotations

import pytest

from runner.forecast.calls import THINKING, ThinkingBand, need
from runner.harness.base import CallShape
from runner.models.capabilities import lookup
from runner.models.thinking import ThinkingPlan

CLAUDE = lookup("claude-sonnet-5-5", "anthropic")
GPT = lookup("gpt-5.4", "openai")


def _shapes() -> list[CallShape]:
    # a fixed part of 2,000 tokens, then a transcript growing by 300 a call; the second call repeats the whole
    # first prompt, the third only the transcript before it (its predecessor's end was not repeated)
    return [CallShape("agent", 2000, 2000, 30, 2000), CallShape("agent", 2300, 2000, 30, 2000),
            CallShape("agent", 2600, 2300, 30, 2000)]


def test_anthropic_reads_only_what_an_earlier_prompt_ended_with_and_writes_the_rest() -> None:
    n = need(_shapes(), CLAUDE, prompt_cache=True, thinking=ThinkingBand())
    assert n.calls == 3
    assert n.cache_read_tokens == 6000  # three times the fixed part: no entry ended at 2,300
    assert n.cache_write_tokens == 0 + 300 + 600
    assert n.input_tokens == 0
    assert n.output_tokens == 90


def test_openai_reads_any_shared_prefix_in_128_token_steps_past_1024() -> None:
    n = need(_shapes(), GPT, prompt_cache=True, thinking=ThinkingBand())
    assert n.cache_read_tokens == 1920 + 1920 + 2176  # 1,024 + 7 x 128, ... , 1,024 + 9 x 128
    assert n.input_tokens == 6900 - n.cache_read_tokens
    assert n.cache_write_tokens == 0


def test_without_prompt_caching_every_token_is_input() -> None:
    n = need(_shapes(), CLAUDE, prompt_cache=False, thinking=ThinkingBand())
    assert n.input_tokens == n.prompt_tokens == 6900 and n.cache_read_tokens == 0


def test_claude_thinking_is_output_and_goes_back_in_later_prompts() -> None:
    think = ThinkingBand.of(ThinkingPlan({}, 4896, True, ""), "high", 4096, "anthropic")
    low, expected = THINKING["high"]
    assert (think.low, think.expected, think.high, think.echoed) == (low, expected, 4096, True)
    n = need(_shapes(), CLAUDE, prompt_cache=False, thinking=think)
    assert n.output_tokens == 90 + 3 * expected
    assert n.prompt_tokens == 6900 + expected + 2 * expected  # each call carries the thinking before it
    assert ThinkingBand.of(ThinkingPlan({}, 800, False, ""), "high", 4096, "anthropic") == ThinkingBand()


@pytest.mark.parametrize("band", ["low", "high"])
def test_the_band_brackets_the_expected(band: str) -> None:
    think = ThinkingBand.of(ThinkingPlan({}, 4896, True, ""), "medium", 4096, "openai")
    mid = need(_shapes(), GPT, prompt_cache=True, thinking=think)
    other = need(_shapes(), GPT, prompt_cache=True, thinking=think, band=band)
    worse = (other.calls > mid.calls, other.prompt_tokens > mid.prompt_tokens, other.output_tokens > mid.output_tokens)
    assert worse == ((True,) * 3 if band == "high" else (False,) * 3)
