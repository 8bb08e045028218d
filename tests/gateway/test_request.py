"""The canonical request: one form for the response cache's keys and batch mode's."""

from __future__ import annotations

import hashlib
import json

from runner.gateway.batcher import request_key
from runner.gateway.request import canonical, unstreamed


def test_the_same_question_whatever_the_key_order_spacing_or_stream() -> None:
    a = {"model": "m", "messages": [{"role": "user", "content": "hi é"}], "max_tokens": 5}
    b = {"stream": True, "max_tokens": 5, "messages": [{"content": "hi é", "role": "user"}], "model": "m"}
    assert canonical(a) == canonical(b) == canonical(unstreamed(b))
    assert "stream" not in unstreamed(b) and b["stream"] is True  # the caller's body is left as it was
    assert canonical({**a, "max_tokens": 6}) != canonical(a)


def test_batch_keys_are_those_journals_of_earlier_versions_hold() -> None:
    """A run resumed after an upgrade finds its batches by these keys (OUT/batches.jsonl)."""
    body = {"stream": False, "model": "m", "messages": [{"role": "user", "content": "hi é"}]}
    canon = json.dumps({k: v for k, v in body.items() if k != "stream"}, sort_keys=True, separators=(",", ":"))
    assert request_key("openai", body, "trial 2") == hashlib.sha256(f"openai\0{canon}\0trial 2".encode()).hexdigest()
    assert request_key("openai", body) != request_key("anthropic", body)
