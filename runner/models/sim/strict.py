"""The simulator's request checks: reject what the real APIs reject, with their error wording.

Shapes come from the installed SDKs' own request types (TypedDicts): an unknown key anywhere, a
missing required key, a wrong type or an unknown literal is a 400, so an SDK upgrade moves the
simulator with it. On top, the rules those types cannot express that hold for every model: value
ranges, tool calls answered right after they are made, no null or blank content, known tool names.
What each model refuses on top of that is published per model (rulebook.py, applied by checks.py),
never read from the runner's own capabilities table.

Consecutive same-role turns are accepted: the installed anthropic SDK documents that the API
combines them, and OpenAI accepts them.
"""

from __future__ import annotations

import collections.abc as cabc
import functools
import threading
import types
import typing
from collections.abc import Sequence
from typing import Any

import orjson
import typing_extensions as te

SAMPLING = frozenset({"temperature", "top_p", "top_k"})  # absent from the anthropic SDK's current API version


class RequestRefused(Exception):
    """A request the API refuses: its status (400 unless said), the parameter and code it names, and the
    published rule it broke (rulebook.py), if it was one."""

    def __init__(
        self,
        message: str,
        param: str | None = None,
        code: str | None = None,
        *,
        status: int = 400,
        rule: str | None = None,
    ) -> None:
        super().__init__(message)
        self.param, self.code, self.status, self.rule = param, code, status, rule


@functools.cache
def _hints(td: type) -> dict[str, Any]:
    return te.get_type_hints(td, include_extras=True)


_MEMO: dict[tuple[str, int], tuple[Any, Any]] = {}  # (what, id(type)) -> (the type, kept alive; result)


def _memo(what: str, tp: Any, compute: Any) -> Any:
    """Per type object, once: the SDK's types are long-lived and not all hashable (Annotated metadata)."""
    hit = _MEMO.get((what, id(tp)))
    if hit is not None and hit[0] is tp:
        return hit[1]
    value = compute(tp)
    _MEMO[(what, id(tp))] = (tp, value)
    return value


def _strip(tp: Any) -> tuple[Any, bool]:
    """(the type under Required/NotRequired/Annotated, whether it was Required)."""
    return _memo("strip", tp, _strip_now)


def _strip_now(tp: Any) -> tuple[Any, bool]:
    required = False
    while True:
        origin = te.get_origin(tp)
        if origin in (te.Required, typing.Required):
            required, tp = True, te.get_args(tp)[0]
        elif origin in (te.NotRequired, typing.NotRequired) or origin in (te.Annotated, typing.Annotated):
            tp = te.get_args(tp)[0]
        else:
            return tp, required


def _type_literals(td: type) -> tuple[Any, ...]:
    return _memo("literals", td, _type_literals_now)


def _type_literals_now(td: type) -> tuple[Any, ...]:
    if hasattr(td, "model_fields"):
        tag = td.model_fields.get("type")
        return te.get_args(tag.annotation) if tag is not None else ()
    tp = _hints(td).get("type")
    if tp is None:
        return ()
    tp, _ = _strip(tp)
    if te.get_origin(tp) in (typing.Union, types.UnionType):
        return tuple(
            a
            for arg in te.get_args(tp)
            if te.get_origin(arg) in (te.Literal, typing.Literal)
            for a in te.get_args(arg)
        )
    return te.get_args(tp) if te.get_origin(tp) in (te.Literal, typing.Literal) else ()


def _tagged(tp: Any) -> bool:
    return te.is_typeddict(tp) or (isinstance(tp, type) and hasattr(tp, "model_fields"))


def check(value: Any, tp: Any, path: str) -> str | None:
    """None if value fits tp, else the first problem as 'path: what'."""
    kind, arg = _memo("kind", tp, _kind_now)
    if kind == "any":
        return None
    if kind == "union":
        return _check_union(value, arg, path)
    if kind == "literal":
        return None if value in arg else f"{path}: Input should be {' or '.join(map(repr, arg))}"
    if kind == "typeddict":
        return _check_typeddict(value, arg, path)
    if kind == "model":  # an SDK response model echoed back as input
        return _check_model(value, arg, path)
    if kind == "list":
        if not isinstance(value, list):
            return f"{path}: Input should be a valid list"
        return next((err for i, v in enumerate(value) if (err := check(v, arg, f"{path}.{i}"))), None)
    if kind == "dict":
        return None if isinstance(value, dict) else f"{path}: Input should be a valid dictionary"
    return _check_scalar(value, arg, path)


def _kind_now(tp: Any) -> tuple[str, Any]:
    """What check does with a type, worked out once per type object: a request walks the same few
    hundred types again and again (the typing introspection was a third of a check's time)."""
    tp, _ = _strip(tp)
    if tp is Any or tp is object:
        return "any", None
    origin = te.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return "union", te.get_args(tp)
    if origin in (te.Literal, typing.Literal):
        return "literal", te.get_args(tp)
    if te.is_typeddict(tp):
        return "typeddict", tp
    if isinstance(tp, type) and hasattr(tp, "model_fields"):
        return "model", tp
    if (
        origin in (list, cabc.Iterable, cabc.Sequence, typing.Iterable, typing.Sequence)
        or getattr(tp, "__name__", "") == "SequenceNotStr"
        or getattr(origin, "__name__", "") == "SequenceNotStr"
    ):
        return "list", (te.get_args(tp) or (Any,))[0]
    if origin in (dict, cabc.Mapping, typing.Dict) or tp in (dict, typing.Dict):  # noqa: UP006
        return "dict", None
    return "scalar", tp


def _check_scalar(value: Any, tp: Any, path: str) -> str | None:
    if tp is type(None):
        return None if value is None else f"{path}: Input should be null"
    if tp is bool:
        return None if isinstance(value, bool) else f"{path}: Input should be a valid boolean"
    if tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return None if ok else f"{path}: Input should be a valid integer"
    if tp is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return None if ok else f"{path}: Input should be a valid number"
    if tp is str:
        return None if isinstance(value, str) else f"{path}: Input should be a valid string"
    return None  # files, bytes and other host-side types: not on this wire


def _check_union(value: Any, members: tuple[Any, ...], path: str) -> str | None:
    # Tagged unions: try the members whose `type` literal matches first, and report their error.
    if isinstance(value, dict) and "type" in value:
        tagged = (
            _memo("tags", members, _tag_index).get(value["type"]) if isinstance(value["type"], str) else None
        )
        if tagged:
            errors = [check(value, m, path) for m in tagged]
            return None if any(e is None for e in errors) else errors[0]
    first = None
    for m in members:
        err = check(value, m, path)
        if err is None:
            return None
        first = first or err
    return first


def _tag_index(members: tuple[Any, ...]) -> dict[str, list[Any]]:
    index: dict[str, list[Any]] = {}
    for m in members:
        inner = _strip(m)[0]
        if _tagged(inner):
            for lit in _type_literals(inner):
                index.setdefault(lit, []).append(m)
    return index


def _check_typeddict(value: Any, td: type, path: str) -> str | None:
    if not isinstance(value, dict):
        return f"{path}: Input should be an object"
    hints = _hints(td)
    extra_ok = (getattr(td, "__pydantic_config__", None) or {}).get("extra") == "allow"
    for key, v in value.items():
        if key not in hints:
            if not extra_ok:
                return f"{path}.{key}: Extra inputs are not permitted".lstrip(".")
            continue
        err = check(v, hints[key], f"{path}.{key}".lstrip("."))
        if err:
            return err
    for key in _required(td):
        if key not in value:
            return f"{path}.{key}: Field required".lstrip(".")
    return None


def _required(td: type) -> tuple[str, ...]:
    return _memo("required", td, lambda t: tuple(k for k, tp in _hints(t).items() if _strip(tp)[1]))


def _check_model(value: Any, model: Any, path: str) -> str | None:
    if not isinstance(value, dict):
        return f"{path}: Input should be an object"
    fields = model.model_fields
    tag = fields.get("type")
    if (
        tag is not None
        and te.get_origin(tag.annotation) in (te.Literal, typing.Literal)
        and value.get("type") not in te.get_args(tag.annotation)
    ):
        return f"{path}.type: Input should be {' or '.join(map(repr, te.get_args(tag.annotation)))}"
    extra = sorted(set(value) - set(fields))
    return f"{path}.{extra[0]}: Extra inputs are not permitted" if extra else None


# ---------------------------------------------------------------- the two APIs
def _request_type(api: str, stream: bool) -> Any:
    if api == "anthropic":
        from anthropic.types import message_create_params as a

        return a.MessageCreateParamsStreaming if stream else a.MessageCreateParamsNonStreaming
    from openai.types.chat import completion_create_params as o

    return o.CompletionCreateParamsStreaming if stream else o.CompletionCreateParamsNonStreaming


def _blank(text: Any) -> bool:
    return isinstance(text, str) and not text.strip()


MAX_BREAKPOINTS = 4  # Anthropic: cache_control on at most four blocks (tools, system, messages) per request


def _breakpoints(body: dict[str, Any]) -> int:
    def marked(blocks: Any) -> int:
        return (
            sum(1 for b in blocks if isinstance(b, dict) and b.get("cache_control"))
            if isinstance(blocks, list)
            else 0
        )

    return (
        marked(body.get("tools"))
        + marked(body.get("system"))
        + sum(marked(m.get("content")) for m in body.get("messages") or [] if isinstance(m, dict))
    )


def _check_anthropic(body: dict[str, Any]) -> None:
    if (n := _breakpoints(body)) > MAX_BREAKPOINTS:
        raise RequestRefused(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {n}."
        )
    msgs = body["messages"]
    if not msgs:
        raise RequestRefused("messages: at least one message is required")
    if msgs[0]["role"] != "user":
        raise RequestRefused('messages: first message must use the "user" role')
    tools = {t.get("name") for t in body.get("tools") or []}
    pending: set[str] = set()
    for i, m in enumerate(msgs):
        content = m["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
        final_assistant = i == len(msgs) - 1 and m["role"] == "assistant"
        if not blocks and not final_assistant:
            raise RequestRefused(
                f"messages.{i}: all messages must have non-empty content except for the optional "
                "final assistant message"
            )
        answered = {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}
        if pending and (m["role"] != "user" or not pending <= answered):
            raise RequestRefused(
                f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately "
                f"after: {', '.join(sorted(pending - answered))}. Each `tool_use` block must have a "
                "corresponding `tool_result` block in the next message."
            )
        if answered - pending:
            raise RequestRefused(
                f"messages.{i}.content: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{', '.join(sorted(x for x in answered - pending if x))}. Each `tool_result` block must "
                "have a corresponding `tool_use` block in the previous message."
            )
        for j, b in enumerate(blocks):
            if b.get("type") == "text" and _blank(b.get("text")) and not final_assistant:
                raise RequestRefused(
                    f"messages.{i}.content.{j}: text content blocks must contain non-whitespace text"
                )
            if b.get("type") == "tool_use" and tools and b.get("name") not in tools:
                raise RequestRefused(
                    f"messages.{i}.content.{j}: tool_use name {b.get('name')!r} is not one of the "
                    "request's tools"
                )
        pending = {b["id"] for b in blocks if b.get("type") == "tool_use"}
    if pending:
        raise RequestRefused(
            f"messages.{len(msgs) - 1}: `tool_use` ids were found without `tool_result` blocks "
            f"immediately after: {', '.join(sorted(pending))}. Each `tool_use` block must have a "
            "corresponding `tool_result` block in the next message."
        )
    choice = body.get("tool_choice") or {}
    if choice.get("type") == "tool" and choice.get("name") not in tools:
        raise RequestRefused(f"tool_choice: Tool '{choice.get('name')}' not found in provided tools")
    system = body.get("system")
    if isinstance(system, list) and any(_blank(b.get("text")) for b in system):
        raise RequestRefused("system: text content blocks must contain non-whitespace text")


_RANGES = {
    "temperature": (0, 2),
    "top_p": (0, 1),
    "presence_penalty": (-2, 2),
    "frequency_penalty": (-2, 2),
    "n": (1, 128),
    "max_completion_tokens": (1, None),
    "max_tokens": (1, None),
}


def _check_openai(body: dict[str, Any]) -> None:
    for key, (lo, hi) in _RANGES.items():
        v = body.get(key)
        if v is not None and ((lo is not None and v < lo) or (hi is not None and v > hi)):
            raise RequestRefused(
                f"Invalid '{key}': {v} is out of range [{lo}, {hi if hi is not None else 'inf'}].",
                param=key,
                code="invalid_value",
            )
    tools = {t.get("function", {}).get("name") for t in body.get("tools") or []}
    pending: set[str] = set()
    msgs = body["messages"]
    for i, m in enumerate(msgs):
        role = m["role"]
        if role == "tool":
            if m.get("tool_call_id") not in pending:
                raise RequestRefused(
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                    "message with 'tool_calls'.",
                    param=f"messages.[{i}].role",
                )
            pending.discard(m["tool_call_id"])
            continue
        if pending:
            raise RequestRefused(
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(sorted(pending))}",
                param=f"messages.[{i}].role",
            )
        if role == "assistant":
            calls = m.get("tool_calls") or []
            if m.get("content") is None and not calls:
                raise RequestRefused(
                    "Invalid value for 'content': expected a string, got null.",
                    param=f"messages.[{i}].content",
                )
            pending = {c["id"] for c in calls}
    if pending:
        raise RequestRefused(
            "An assistant message with 'tool_calls' must be followed by tool messages responding "
            "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
            f"{', '.join(sorted(pending))}",
            param="messages",
        )
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("function", {}).get("name") not in tools:
        raise RequestRefused(
            f"Invalid value for 'tool_choice': tool '{choice.get('function', {}).get('name')}' not "
            "found in 'tools'.",
            param="tool_choice",
        )


_SEEN: dict[tuple[str, str, bytes], None] = {}  # (api, field, a value's sorted JSON) that fit its type
SEEN_MAX = 20_000


# the last large list keyed, and its key: a run's tool list is one object (models/sim/body.py)
_last_key: list[Any] = [None, b""]


def _key(value: Any) -> bytes:
    if value is _last_key[0]:
        return _last_key[1]
    key = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    if isinstance(value, list) and len(key) > 4096:
        _last_key[:] = [value, key]
    return key


def _shape_error(api: str, td: Any, body: dict[str, Any]) -> str | None:
    """`check` of the body, each distinct value checked once: a run sends the same tool list and
    system prompt with every call, and a conversation resends its whole transcript (each message
    is a value of its own); walking them against the SDK's types was the simulator's largest cost.
    A check is context-free per value, so a value that fit once fits in any body."""
    required = _required(td)
    try:
        keys = {
            field: [(api, field, _key(m)) for m in v]
            if field == "messages" and isinstance(v, list)
            else [(api, field, _key(v))]
            for field, v in body.items()
            if isinstance(v, list | dict)
        }
    except TypeError:  # not JSON data: the full check names it
        return check(body, td, "")
    trimmed: dict[str, Any] = {}
    for field, v in body.items():
        ks = keys.get(field)
        if ks is None:
            trimmed[field] = v
        elif field == "messages" and len(ks) == len(v):
            trimmed[field] = [m for m, k in zip(v, ks, strict=True) if k not in _SEEN]
        elif ks[0] not in _SEEN or field in required:
            trimmed[field] = v
    if check(trimmed, td, "") is not None:
        return check(body, td, "")  # again in full, for the path the real API names (messages.3...)
    if len(_SEEN) + sum(map(len, keys.values())) > SEEN_MAX:
        _SEEN.clear()
    for ks in keys.values():
        _SEEN.update(dict.fromkeys(ks))
    return None


APIS = ("anthropic", "openai")
_warmed = threading.Event()
_warming = False


def start_warm_up(apis: Sequence[str] | None = None) -> None:
    """Resolve the types of `apis` (None: both) in a thread beside the server; the first request waits
    for it (another API's are resolved when first asked, after it).

    Waiting matters: a request importing the same SDK modules from another thread at the same
    moment trips importlib's deadlock detection (_DeadlockError) and becomes a 500.
    """
    global _warming
    if not _warming:
        _warming = True
        threading.Thread(
            target=warm_up, args=(tuple(apis or APIS),), name="strict-warm-up", daemon=True
        ).start()


def wait_warm(timeout: float = 60) -> bool:
    return _warmed.wait(timeout)


def warm_up(apis: Sequence[str] = APIS) -> None:
    """Resolve the SDKs' type hints once (~1 s of CPU per SDK) before the first request needs them."""
    try:
        _warm_up(apis)
    finally:
        _warmed.set()


def _warm_up(apis: Sequence[str] = APIS) -> None:
    tool = {"name": "t", "description": "d", "input_schema": {"type": "object", "properties": {}}}
    if "anthropic" in apis:
        check(
            {
                "model": "m",
                "max_tokens": 1,
                "system": [{"type": "text", "text": "s"}],
                "tools": [tool],
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "u"}]},
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "a", "name": "t", "input": {}}],
                    },
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": "a", "content": "r"}],
                    },
                ],
            },
            _request_type("anthropic", False),
            "",
        )
    if "openai" in apis:
        check(
            {
                "model": "m",
                "tools": [{"type": "function", "function": {"name": "t", "parameters": {}}}],
                "messages": [
                    {"role": "system", "content": "s"},
                    {"role": "user", "content": "u"},
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {"id": "a", "type": "function", "function": {"name": "t", "arguments": ""}}
                        ],
                    },
                    {"role": "tool", "tool_call_id": "a", "content": "r"},
                ],
            },
            _request_type("openai", False),
            "",
        )


def validate(api: str, body: dict[str, Any]) -> None:
    """Raise RequestRefused with the provider's wording if the real API would answer 400 to any model."""
    if _warming:
        _warmed.wait(60)
    if api == "anthropic":
        for key in SAMPLING & set(body):
            raise RequestRefused(f"`{key}` is deprecated for this model.")
    err = _shape_error(api, _request_type(api, bool(body.get("stream"))), body)
    if err:
        param = err.split(":", 1)[0]
        raise RequestRefused(
            err if api == "anthropic" else f"Invalid request: {err}",
            param=param,
            code=None if api == "anthropic" else "invalid_request",
        )
    (_check_anthropic if api == "anthropic" else _check_openai)(body)
