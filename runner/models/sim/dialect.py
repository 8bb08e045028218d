"""How each route of the simulator speaks around the same model: its error bodies and headers, the header
naming a request, the rate-limit headers it sends, the status of an overload and how a stream is framed.

The first-party APIs answer in their own error formats (wire.py); the clouds in theirs, as clouds.yaml
records them:
- Bedrock (bedrock.auth_errors.envelope, smithy-restjson1; bedrock.errors, botocore-runtime): `{"message":
  ...}` with the error's shape named in `X-Amzn-Errortype`; streams as AWS event-stream messages
  (eventstream.py); no rate-limit headers documented.
- Vertex AI (vertex.errors, gcp-errors, gcp-code): `{"error": {"code", "message", "status"}}`, status the
  google.rpc.Code of the HTTP status; streams as the Messages API's server-sent events; no rate-limit headers
  documented.
- Azure OpenAI: OpenAI's error format and rate-limit headers (azure.rate_limits.headers, ms-quota-2), with
  the documented bodies of its own refusals given by its routes (azure.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from runner.models.sim import wire

ErrorBody = Callable[..., dict[str, Any]]  # (status, message, *, param=, code=) -> the error's JSON body

# bedrock.errors: the bedrock-runtime error shapes by HTTP status (424: the model's own error)
BEDROCK_TYPES = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    424: "ModelErrorException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}
# bedrock.auth_errors.codes: names a refusal may carry instead of its status's shape
_BEDROCK_NAMED = frozenset(
    {
        *BEDROCK_TYPES.values(),
        "IncompleteSignature",
        "RequestExpired",
        "InvalidClientTokenId",
        "ServiceQuotaExceededException",
        "ModelNotReadyException",
        "InvalidSignatureException",
        "UnrecognizedClientException",
        "ConflictException",
    }
)
# vertex.errors.mapping (gcp-code): google.rpc.Code by HTTP status
GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def bedrock_error(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"message": message}


def bedrock_type(status: int, code: str | None) -> str:
    return code if code in _BEDROCK_NAMED else BEDROCK_TYPES.get(status, "InternalServerException")


def vertex_error(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"code": status, "message": message, "status": GOOGLE_STATUS.get(status, "UNKNOWN")}}


@dataclass(frozen=True)
class Dialect:
    name: str  # anthropic, openai, bedrock, vertex, azure
    api: str  # the format of its bodies: anthropic (Messages) or openai (Chat Completions)
    body: ErrorBody
    request_id: str | None  # the response header naming the request
    ratelimit: str | None  # whose rate-limit headers it answers with (anthropic, openai), None: none
    overloaded: int  # the status of an overload
    event_stream: bool = False  # streams as AWS event-stream messages, not server-sent events

    def error(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> web.Response:
        named = {"X-Amzn-Errortype": bedrock_type(status, code)} if self.name == "bedrock" else {}
        return web.json_response(
            self.body(status, message, param=param, code=code),
            status=status,
            headers={**named, **(headers or {})},
        )


@dataclass(frozen=True)
class Translated:
    """A cloud route's request as the simulator's core answers it (server.answer_request): the body in its
    API's form, `model` naming the model that answers; the headers it is read with (x-sim-plays: the
    published model the cloud's id names, for its rules); the key its rate limits count under (the cloud's
    model id, where `simulator.limits` names it). Its credentials were checked by the route."""

    raw: bytes
    headers: Mapping[str, str]
    limit_key: str


# what answers a cloud route's translated request (server.guarded, put in the app by make_app: the routes
# are registered by the server, so they do not import it)
ANSWER = "answer_translated"


ANTHROPIC = Dialect("anthropic", "anthropic", wire.anthropic_error, "request-id", "anthropic", 529)
OPENAI = Dialect("openai", "openai", wire.openai_error, "x-request-id", "openai", 503)
FIRST_PARTY = {"anthropic": ANTHROPIC, "openai": OPENAI}
BEDROCK = Dialect("bedrock", "anthropic", bedrock_error, "x-amzn-RequestId", None, 503, event_stream=True)
VERTEX = Dialect("vertex", "anthropic", vertex_error, None, None, 503)
AZURE = Dialect("azure", "openai", wire.openai_error, "x-request-id", "openai", 503)
