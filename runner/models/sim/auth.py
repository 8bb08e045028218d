"""Who may call the simulator: each API's own key header, checked as the real one checks it."""

from __future__ import annotations

from collections import Counter

from aiohttp import web

from runner.models.sim import wire


def unauthorized(request: web.Request, api: str, stats: Counter[str]) -> web.Response | None:
    """401 for a request without a key, or with one the API would not take."""
    err = wire.anthropic_error if api == "anthropic" else wire.openai_error
    # Each API reads its own header: OpenAI only `Authorization: Bearer`, Anthropic `x-api-key` (or a
    # bearer token): a client that sent the other one would pass here and fail against the real API.
    bearer = request.headers.get("authorization", "")
    auth = (request.headers.get("x-api-key") or bearer) if api == "anthropic" else bearer
    if not auth or auth.strip() in ("Bearer", "Bearer invalid", "invalid"):
        stats["401"] += 1
        missing = (
            "x-api-key header is required"
            if api == "anthropic"
            else "You didn't provide an API key. You need to provide your API key in an Authorization header "
            "using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
        )
        wrong = "invalid x-api-key" if api == "anthropic" else "Incorrect API key provided."
        return web.json_response(err(401, wrong if auth else missing), status=401)
    return None
