"""Reading how long to wait from the providers' rate-limit headers."""

from __future__ import annotations

import pytest

from runner.models.base import classify_status, retry_after_from


@pytest.mark.parametrize("headers,expected", [
    ({"retry-after": "7"}, 7.0),
    ({"retry-after-ms": "1500", "retry-after": "2"}, 1.5),
    ({"x-ratelimit-reset-requests": "6m0s"}, 360.0),
    ({"x-ratelimit-reset-requests": "250ms", "x-ratelimit-reset-tokens": "1.5s"}, 1.5),
    ({"anthropic-ratelimit-requests-remaining": "0",
      "anthropic-ratelimit-requests-reset": "2026-01-01T00:00:30Z"}, 30.0),
    ({"anthropic-ratelimit-requests-remaining": "12",  # not the binding limit
      "anthropic-ratelimit-requests-reset": "2026-01-01T00:00:30Z"}, None),
    ({}, None),
])
def test_retry_after_from_headers(headers: dict[str, str], expected: float | None) -> None:
    now = 1767225600.0  # 2026-01-01T00:00:00Z
    assert retry_after_from(headers, now=now) == expected


def test_status_classification() -> None:
    assert classify_status(429, "x", {"retry-after": "3"}).kind == "rate_limited"
    assert classify_status(529, "x", {}).kind == "transient"
    assert classify_status(503, "x", {}).kind == "transient"
    for status in (400, 401, 403, 404, 422):
        assert classify_status(status, "x", {}).kind == "fatal"
