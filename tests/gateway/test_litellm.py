"""LiteLLM, pointed at the gateway by environment variables only, as a harness using it would be."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REQUIRED

# LiteLLM lives in a venv of its own (`make test` builds .venv-litellm): it pins openai<3, and beside
# the runner it would downgrade the SDK under test. A harness on LiteLLM has its own environment too;
# the gateway is just a URL to it. In CI (REQUIRED) the test must run: a missing venv fails there.
from tests.gateway.conftest import TOKEN

LITELLM_PYTHON = Path(__file__).resolve().parents[2] / ".venv-litellm" / "bin" / "python"
pytestmark = pytest.mark.skipif(not LITELLM_PYTHON.exists() and not REQUIRED,
                                reason="no .venv-litellm (make test builds it)")

SCRIPT = r"""
import json, litellm
tools = [{"type": "function", "function": {"name": "search_accounts", "description": "Find accounts.",
          "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}]
out = []
for model in ("anthropic/claude-sonnet-5-5", "openai/gpt-5.4"):
    for stream in (False, True):
        msgs = [{"role": "user", "content": f"Find the account Acme ({model}, stream={stream})"}]
        # room for the thinking Claude 5.5 does by default before it answers
        r = litellm.completion(model=model, messages=msgs, tools=tools, max_tokens=2000, stream=stream)
        if stream:
            r = litellm.stream_chunk_builder(list(r), messages=msgs)
        m = r.choices[0].message
        out.append({"model": model, "stream": stream, "content": m.content,
                    "calls": [c.function.name for c in (m.tool_calls or [])]})
print(json.dumps(out))
"""


def _litellm(gateway: str, run: str) -> list[dict[str, Any]]:
    base = f"{gateway}/run/{run}/worker/0"
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_API_BASE", "_BASE_URL"))}
    env.update({"ANTHROPIC_API_BASE": base, "OPENAI_API_BASE": f"{base}/v1", "ANTHROPIC_API_KEY": TOKEN,
                "OPENAI_API_KEY": TOKEN, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})  # no fetch from the internet
    p = subprocess.run([str(LITELLM_PYTHON), "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    return list(json.loads(p.stdout.strip().splitlines()[-1]))


def test_litellm_through_the_gateway_by_environment_only(gateway: str) -> None:
    first = _litellm(gateway, "litellm")
    assert all(r["content"] or r["calls"] for r in first), first
    with urllib.request.urlopen(urllib.request.Request(gateway + "/stats", headers={"x-runner-token": TOKEN}),
                                timeout=10) as r:
        s = json.loads(r.read())["litellm"]
    # The simulator failed 30 % of its answers: LiteLLM saw none of them, and no call was refused.
    assert s["llm_calls"] == 4 and s["errors"] == 0 and s["input_tokens"] > 0
    again = _litellm(gateway, "litellm-again")
    assert again == first
    with urllib.request.urlopen(urllib.request.Request(gateway + "/stats", headers={"x-runner-token": TOKEN}),
                                timeout=10) as r:
        s = json.loads(r.read())["litellm-again"]
    assert s["cache_hits"] == 4 and s["cache_misses"] == 0
