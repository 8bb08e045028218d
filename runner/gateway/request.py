"""What a caller's request is, apart from how it travels: where it goes upstream and the canonical form
that keys it (the response cache's key, batch mode's). A streamed call and the same call unstreamed ask
the same question: the gateway answers either from one upstream answer, so `stream` is no part of it."""

from __future__ import annotations

import json
from typing import Any


def upstream_url(base: str, provider: str, path: str) -> str:
    """Where a caller's /v1/... path goes on a provider whose SDK base URL is `base` (Azure OpenAI: the
    resource, whose v1 API is under /openai/v1)."""
    if provider == "openai" and path.startswith("/v1/"):
        path = path[3:]  # the base URL carries the version
    if provider == "azure":
        path = f"/openai{path}"
    return base.rstrip("/") + path


def unstreamed(body: dict[str, Any]) -> dict[str, Any]:
    """The body as the upstream gets it when the gateway itself does not stream (a batch, a cache fill)."""
    return {k: v for k, v in body.items() if k != "stream"}


def canonical(body: dict[str, Any]) -> bytes:
    """The body as a key sees it: the same JSON whatever the key order, spacing or `stream`."""
    return json.dumps(unstreamed(body), sort_keys=True, separators=(",", ":")).encode()
