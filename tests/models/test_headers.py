"""Reading how long to wait from the providers' rate-limit headers."""

from __future__ import annotations

import pytest

from runner.models.base import classify_status, retry_after_from


@pytest.mark.parametrize("headers,expected", [
    ({"retry-after": "7"}, 7.0),
    ({"retry-after-ms": "1500", "retry-after": "2"}, 1.5),
    ({"x-ratelimit-reset-requests": "6m0s"}, 360.0),
    # which budget ran out is not said: the soonest reset, then ask again
    ({"x-ratelimit-reset-requests": "250ms", "x-ratelimit-reset-tokens": "1.5s"}, 0.25),
    # only the requests budget is exhausted: its reset, not the (much later) tokens reset
    ({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "2s",
      "x-ratelimit-remaining-tokens": "150000", "x-ratelimit-reset-tokens": "6m0s"}, 2.0),
    ({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "2s",
      "x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "20s"}, 20.0),
    ({"retry-after": "Thu, 01 Jan 2026 00:00:42 GMT"}, 42.0),  # HTTP-date form
    ({"retry-after": "Wed, 31 Dec 2025 23:59:00 GMT"}, 0.0),  # already past
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
    for status in (401, 403, 404):
        assert classify_status(status, "x", {}).kind == "fatal"
    for status in (400, 413, 422):  # this request's own problem: the conversation fails, not the run
        assert classify_status(status, "x", {}).kind == "rejected"


def test_quota_and_billing_stop_the_run_with_their_cause() -> None:
    quota = {"error": {"message": "You exceeded your current quota", "type": "insufficient_quota",
                       "param": None, "code": "insufficient_quota"}}
    e = classify_status(429, "You exceeded your current quota", {"retry-after": "1"}, quota)
    assert e.kind == "fatal" and "insufficient_quota" in (e.cause or "")
    credit = {"type": "error", "error": {"type": "invalid_request_error",
                                         "message": "Your credit balance is too low to access the Anthropic API."}}
    e = classify_status(400, "Your credit balance is too low to access the Anthropic API.", {}, credit)
    assert e.kind == "fatal" and "billing" in (e.cause or "")
    assert classify_status(401, "invalid x-api-key", {}).cause == "authentication failed: check the API key"
