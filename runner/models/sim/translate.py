"""What the cloud routes share: reading a body as their service would, and handing the request on to the
simulator's core in its API's form (dialect.Translated), the model that answers named in the body as a
first-party request names it."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson
from aiohttp import web
from multidict import CIMultiDict

from runner.models.base import SIM_MODEL_HEADER
from runner.models.sim.dialect import ANSWER, Dialect, Translated

Answer = Callable[[web.Request, Dialect, bytes | None, Translated | None], Awaitable[web.StreamResponse]]


async def json_object(request: web.Request, d: Dialect) -> dict[str, Any] | web.Response:
    """The request's JSON object, or the 400 the service answers (its wording for a body that is not one)."""
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        return d.error(400, "The request body is not valid JSON.")
    return body if isinstance(body, dict) else d.error(400, "The request body must be a JSON object.")


def refused(request: web.Request, response: web.Response) -> web.Response:
    """A refusal of the route's own (credentials, path, the cloud's body rules), counted by its status and
    logged as the core logs the API's own refusals (a run's simulator.log: what the cloud would refuse)."""
    request.app["state"].stats[str(response.status)] += 1
    said = response.body.decode(errors="replace")[:300] if isinstance(response.body, bytes) else ""
    print(f"{response.status} {request.path}: {said}", file=sys.stderr, flush=True)
    return response


async def answer(
    request: web.Request,
    d: Dialect,
    body: dict[str, Any],
    *,
    plays: str,
    limit_key: str,
    headers: Mapping[str, str] | None = None,
) -> web.StreamResponse:
    """The request answered by the core as a first-party one of `plays`: the simulator model the caller names
    (x-sim-model) answers, or the policy for `plays` by its own name; `headers` are added to the request's
    (a Bedrock body's betas go back to their header)."""
    read = CIMultiDict(request.headers)
    read["x-sim-plays"] = plays
    read.update(headers or {})
    body = {**body, "model": request.headers.get(SIM_MODEL_HEADER) or plays}
    core: Answer = request.app[ANSWER]
    return await core(request, d, None, Translated(orjson.dumps(body), read, limit_key))
