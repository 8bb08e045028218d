"""The models endpoints, answered from what the providers published (rulebook.py), as each API shapes them:
`GET /v1/models/{id}` and `GET /v1/models`. The two APIs share the paths; a request from the anthropic SDK
carries `anthropic-version`, one from the openai SDK does not."""

from __future__ import annotations

from collections import Counter
from typing import Any

from aiohttp import web

from runner.models.sim import rulebook, wire
from runner.models.sim.auth import unauthorized


def _api(request: web.Request) -> str:
    return "anthropic" if request.headers.get("anthropic-version") else "openai"


def _refused(request: web.Request, api: str) -> web.Response | None:
    stats: Counter[str] = request.app["state"].stats
    return unauthorized(request, api, stats)


async def retrieve(request: web.Request) -> web.Response:
    api = _api(request)
    if (refused := _refused(request, api)) is not None:
        return refused
    model = request.match_info["model"]
    info = rulebook.book(api).model_info(model)
    if info is None:
        err = wire.anthropic_error if api == "anthropic" else wire.openai_error
        message = f"model: {model}" if api == "anthropic" else f"The model '{model}' does not exist"
        return web.json_response(err(404, message), status=404)
    return web.json_response(info)


async def listing(request: web.Request) -> web.Response:
    api = _api(request)
    if (refused := _refused(request, api)) is not None:
        return refused
    infos: list[dict[str, Any]] = [
        i for m in rulebook.book(api).models if (i := rulebook.book(api).model_info(m))
    ]
    if api == "anthropic":
        return web.json_response(
            {
                "data": infos,
                "has_more": False,
                "first_id": infos[0]["id"] if infos else None,
                "last_id": infos[-1]["id"] if infos else None,
            }
        )
    return web.json_response({"object": "list", "data": infos})


def add_routes(app: web.Application) -> None:
    app.add_routes([web.get("/v1/models/{model}", retrieve), web.get("/v1/models", listing)])
