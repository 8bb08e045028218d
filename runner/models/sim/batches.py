"""Both providers' batch APIs, simulated: Anthropic's Message Batches and OpenAI's Files + Batches.

Anthropic (`/v1/messages/batches`): create from `requests` of `{custom_id, params}` (custom ids of 1-64
letters, digits, `-` and `_`, unique; at most 100,000), retrieve, cancel, and the results as JSONL at the
batch's `results_url` once it has ended. Every request counts as `processing` until the whole batch ends;
then each is `succeeded`, `errored`, `canceled` or `expired`, in no promised order.

OpenAI (`/v1/files`, `/v1/batches`): upload a JSONL file (purpose `batch`) of `{custom_id, method, url,
body}` lines, create a batch on it for `/v1/chat/completions` with `completion_window` `24h`, retrieve,
cancel; its lines are checked when it is created (one model per batch, at most 50,000 lines, each id once;
a bad file fails the batch with the line named), and its answers land in an output file (status 200) and
an error file (the API's own refusals, and requests that expired or were cancelled).

Inside a batch each request is checked as strictly as an interactive one (runner/models/sim/server.py's
`invalid_request`: the same 400s and 404s, as results) and answered by the same policy, at once: a batch
takes its time from its turnaround settings (`simulator.batches`), not from the latency of each call, and
draws nothing from the per-minute limits. A request's fate is drawn from its batch and custom id, so a
batch submitted again ends alike.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import random
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from runner.config import BatchTurnaround
from runner.durable import replace
from runner.models.sim import responses, wire
from runner.models.sim.promptcache import tokens

# One request inside a batch, as the interactive endpoint would take it: (HTTP status, body).
Answer = Callable[[Mapping[str, str], str, dict[str, Any]], Awaitable[tuple[int, dict[str, Any]]]]
CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_ANTHROPIC, MAX_OPENAI = 100_000, 50_000
PASSED_ON = ("x-sim-plays", "x-sim-trial")  # what an answer reads of the creating request's headers


@dataclass
class Item:
    custom_id: str
    body: dict[str, Any]
    due: float | None  # when it is done (monotonic); None: never, it expires
    errored: bool = False  # a simulated API error instead of an answer
    outcome: tuple[int, dict[str, Any]] | None = None  # (status, body) once done
    line_id: str = field(default_factory=lambda: f"batch_req_{uuid.uuid4().hex[:24]}")


@dataclass
class SimBatch:
    id: str
    api: str
    items: list[Item]
    headers: dict[str, str]
    started: float  # monotonic
    created_wall: float  # epoch seconds
    window_end: float  # monotonic: what is not done by then expires
    cancelled: float | None = None
    ended: float | None = None
    endpoint: str = ""
    input_file_id: str = ""
    metadata: dict[str, Any] | None = None
    failed: list[dict[str, Any]] | None = None  # OpenAI: the input file's problems
    files: dict[str, str] = field(default_factory=dict)  # OpenAI: output / error file ids

    def wall(self, mono: float) -> float:
        return self.created_wall + (mono - self.started)


class Batches:
    """The simulator's batches and uploaded files, advanced lazily: whenever one is looked at. With a
    `state_dir`, each batch is also kept on disk, as a provider keeps it: a simulator started again (a run
    resumed after kill -9) still knows the batches the last one took, and ends them on time."""

    def __init__(
        self, settings: BatchTurnaround, answer: Answer, stats: Any, state_dir: str | None = None
    ) -> None:
        self.settings, self.answer, self.stats = settings, answer, stats
        self.state_dir = Path(state_dir) if state_dir else None
        self.batches: dict[str, SimBatch] = {}
        self.files: dict[str, tuple[dict[str, Any], bytes]] = {}
        self.creates = 0  # batch creates asked for, 429s included

    def get(self, bid: str) -> SimBatch | None:
        if (
            bid not in self.batches
            and self.state_dir is not None
            and CUSTOM_ID.match(bid)
            and (self.state_dir / f"{bid}.json").is_file()
        ):
            self.batches[bid] = _loaded(json.loads((self.state_dir / f"{bid}.json").read_text()))
        return self.batches.get(bid)

    def save(self, b: SimBatch) -> None:
        if self.state_dir is not None:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            replace(self.state_dir / f"{b.id}.json", json.dumps(_saved(b)).encode())

    def new(
        self,
        api: str,
        bid: str,
        entries: list[tuple[str, dict[str, Any]]],
        headers: Mapping[str, str],
        **extra: Any,
    ) -> SimBatch:
        now, s = time.monotonic(), self.settings
        items = []
        for custom_id, body in entries:
            draw = random.Random(f"{s.seed}\x1f{custom_id}\x1f{orjson.dumps(body).hex()[:64]}")
            due = None if draw.random() < s.expired else now + self._turnaround(draw)
            items.append(
                Item(
                    custom_id,
                    body,
                    due if due is None or due < now + s.window_seconds else None,
                    errored=draw.random() < s.errored,
                )
            )
        b = SimBatch(
            bid,
            api,
            items,
            {k: v for k in PASSED_ON if (v := headers.get(k))},
            now,
            time.time(),
            now + s.window_seconds,
            **extra,
        )
        self.batches[bid] = b
        self.save(b)
        self.stats["batches"] += 1
        self.stats["batch_requests"] += len(items)
        return b

    def _turnaround(self, draw: random.Random) -> float:
        s = self.settings
        if not s.p95_seconds or s.p95_seconds <= s.median_seconds:
            return s.median_seconds
        return s.median_seconds * math.exp(
            math.log(s.p95_seconds / s.median_seconds) / 1.6449 * draw.gauss(0, 1)
        )

    async def advance(self, b: SimBatch) -> None:
        """Answer what is due; end the batch once every request is done, cancelled or past its window."""
        if b.ended is not None or b.failed is not None:
            return
        now = time.monotonic()
        cut = min(now, b.cancelled if b.cancelled is not None else now, b.window_end)
        for item in b.items:
            if item.outcome is None and item.due is not None and item.due <= cut:
                item.outcome = await self._outcome(b, item)
        undone = any(i.outcome is None for i in b.items)
        if not undone or b.cancelled is not None or now >= b.window_end:
            # undone, not cancelled: expired
            b.ended = b.window_end if undone and b.cancelled is None else now

    async def _outcome(self, b: SimBatch, item: Item) -> tuple[int, dict[str, Any]]:
        # a Bedrock or Vertex AI job's records: Claude API requests
        api = "anthropic" if b.api in ("bedrock", "vertex") else b.api
        err = wire.anthropic_error if api == "anthropic" else wire.openai_error
        if item.errored:
            return 500, err(500, "Internal server error (simulated, inside a batch)")
        if item.body.get("stream"):
            return 400, err(400, "stream: a request in a batch cannot stream", param="stream")
        # answered as the chat request it asks, in the Responses API's shape
        if b.endpoint == "/v1/responses":
            status, payload = await self.answer(b.headers, b.api, responses.to_chat(item.body))
            return (status, responses.from_chat(payload, item.body)) if status == 200 else (status, payload)
        return await self.answer(b.headers, api, item.body)

    def busy(self) -> bool:
        """Whether this create is answered 429 (simulator.batches.busy, drawn per create)."""
        self.creates += 1
        s = self.settings
        if self.creates <= s.busy_first:
            return True
        return s.busy > 0 and random.Random(f"{s.seed}\x1fbusy\x1f{self.creates}").random() < s.busy

    async def over_token_limit(
        self, entries: list[tuple[str, dict[str, Any]]]
    ) -> list[dict[str, Any]] | None:
        """OpenAI: the problem of a batch whose model's prompt tokens in batches not yet ended would pass its
        enqueued-token limit (simulator.batches.enqueued_tokens), as the API fails one; None when it fits."""
        model = str(entries[0][1].get("model") or "") if entries else ""
        limit = self.settings.enqueued_tokens.get(model)
        if limit is None:
            return None
        queued = 0
        for other in list(self.batches.values()):
            if (
                other.api == "openai"
                and other.failed is None
                and other.items
                and other.items[0].body.get("model") == model
            ):
                await self.advance(other)
                if other.ended is None:
                    queued += sum(tokens(i.body) for i in other.items)
        if queued + sum(tokens(body) for _, body in entries) <= limit:
            return None
        return [
            {
                "code": "token_limit_exceeded",
                "line": None,
                "param": None,
                "message": f"Enqueued token limit reached for {model} in organization org-sim. "
                f"Limit: {limit:,} enqueued tokens. Please try again once some in_progress batches have been "
                "completed.",
            }
        ]


def _saved(b: SimBatch) -> dict[str, Any]:
    """A batch as times after its creation (the monotonic clock does not outlive a process)."""

    def after(mono: float | None) -> float | None:
        return None if mono is None else mono - b.started

    return {
        "id": b.id,
        "api": b.api,
        "headers": b.headers,
        "created_wall": b.created_wall,
        "window": after(b.window_end),
        "cancelled": after(b.cancelled),
        "endpoint": b.endpoint,
        "input_file_id": b.input_file_id,
        "metadata": b.metadata,
        "failed": b.failed,
        "items": [
            {
                "custom_id": i.custom_id,
                "body": i.body,
                "due": after(i.due),
                "errored": i.errored,
                "line_id": i.line_id,
            }
            for i in b.items
        ],
    }


def _loaded(d: dict[str, Any]) -> SimBatch:
    started = time.monotonic() - (time.time() - d["created_wall"])

    def at(after: float | None) -> float | None:
        return None if after is None else started + after

    items = [
        Item(i["custom_id"], i["body"], at(i["due"]), i["errored"], line_id=i["line_id"]) for i in d["items"]
    ]
    return SimBatch(
        d["id"],
        d["api"],
        items,
        d["headers"],
        started,
        d["created_wall"],
        started + d["window"],
        cancelled=at(d["cancelled"]),
        endpoint=d["endpoint"],
        input_file_id=d["input_file_id"],
        metadata=d["metadata"],
        failed=d["failed"],
    )


# ---------------------------------------------------------------- Anthropic: /v1/messages/batches
def _rfc3339(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _anthropic_fate(b: SimBatch, item: Item) -> str:
    if item.outcome is not None:
        return "succeeded" if item.outcome[0] == 200 else "errored"
    return "canceled" if b.cancelled is not None else "expired"


def anthropic_batch(b: SimBatch, origin: str) -> dict[str, Any]:
    counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
    if b.ended is None:
        counts["processing"] = len(b.items)  # every request is processing until the whole batch ends
    else:
        for item in b.items:
            counts[_anthropic_fate(b, item)] += 1
    status = "ended" if b.ended is not None else "canceling" if b.cancelled is not None else "in_progress"
    return {
        "id": b.id,
        "type": "message_batch",
        "processing_status": status,
        "request_counts": counts,
        "created_at": _rfc3339(b.created_wall),
        "expires_at": _rfc3339(b.wall(b.window_end)),
        "ended_at": _rfc3339(b.wall(b.ended)) if b.ended is not None else None,
        "cancel_initiated_at": _rfc3339(b.wall(b.cancelled)) if b.cancelled is not None else None,
        "archived_at": None,
        "results_url": f"{origin}/v1/messages/batches/{b.id}/results" if b.ended is not None else None,
    }


def anthropic_results(b: SimBatch) -> bytes:
    lines = []
    for item in b.items:
        fate = _anthropic_fate(b, item)
        result: dict[str, Any] = {"type": fate}
        if fate == "succeeded" and item.outcome is not None:
            result["message"] = item.outcome[1]
        elif fate == "errored" and item.outcome is not None:
            result["error"] = item.outcome[1]
        lines.append(orjson.dumps({"custom_id": item.custom_id, "result": result}))
    return b"\n".join(lines) + b"\n"


def anthropic_create_error(body: Any) -> str | None:
    """Why a create request is refused at once (400); the params of each request are checked later, as
    errored results."""
    requests = body.get("requests") if isinstance(body, dict) else None
    if not isinstance(requests, list) or not requests:
        return "requests: a non-empty list is required"
    if len(requests) > MAX_ANTHROPIC:
        return f"requests: at most {MAX_ANTHROPIC:,} in a batch ({len(requests):,} given)"
    seen: set[str] = set()
    for i, r in enumerate(requests):
        if not isinstance(r, dict) or not isinstance(r.get("params"), dict):
            return f"requests.{i}.params: an object is required"
        cid = r.get("custom_id")
        if not isinstance(cid, str) or not CUSTOM_ID.match(cid):
            return f"requests.{i}.custom_id: 1-64 characters of letters, digits, '-' and '_' ({cid!r})"
        if cid in seen:
            return f"requests.{i}.custom_id: {cid!r} is not unique in this batch"
        seen.add(cid)
    return None


# ---------------------------------------------------------------- OpenAI: /v1/files, /v1/batches
def openai_batch(b: SimBatch) -> dict[str, Any]:
    done = [i for i in b.items if i.outcome is not None]
    ok = sum(1 for i in done if i.outcome is not None and i.outcome[0] == 200)
    ended = b.ended is not None
    status = _openai_status(b)
    at = int(b.wall(b.ended)) if b.ended is not None else None
    return {
        "id": b.id,
        "object": "batch",
        "endpoint": b.endpoint,
        "input_file_id": b.input_file_id,
        "completion_window": "24h",
        "status": status,
        "created_at": int(b.created_wall),
        "in_progress_at": int(b.created_wall) if b.failed is None else None,
        "expires_at": int(b.wall(b.window_end)),
        "finalizing_at": at if status in ("completed", "expired") else None,
        "completed_at": at if status == "completed" else None,
        "expired_at": at if status == "expired" else None,
        "cancelling_at": int(b.wall(b.cancelled)) if b.cancelled is not None else None,
        "cancelled_at": at if status == "cancelled" else None,
        "failed_at": int(b.created_wall) if b.failed is not None else None,
        "errors": {"object": "list", "data": b.failed} if b.failed is not None else None,
        "output_file_id": b.files.get("output") if ended else None,
        "error_file_id": b.files.get("error") if ended else None,
        "request_counts": {"total": len(b.items), "completed": ok, "failed": len(done) - ok},
        "metadata": b.metadata,
        "model": b.items[0].body.get("model") if b.items else None,
    }


def _openai_status(b: SimBatch) -> str:
    if b.failed is not None:
        return "failed"
    if b.ended is None:
        return "cancelling" if b.cancelled is not None else "in_progress"
    if b.cancelled is not None:
        return "cancelled"
    return "expired" if b.ended >= b.window_end else "completed"


def openai_files_of(b: SimBatch) -> tuple[bytes, bytes]:
    """The output file (answers with status 200) and the error file (the rest) of an ended batch."""
    out: list[bytes] = []
    errors: list[bytes] = []
    for item in b.items:
        line: dict[str, Any] = {
            "id": item.line_id,
            "custom_id": item.custom_id,
            "response": None,
            "error": None,
        }
        if item.outcome is not None:
            status, body = item.outcome
            line["response"] = {
                "status_code": status,
                "request_id": f"req_{uuid.uuid4().hex[:24]}",
                "body": body,
            }
            (out if status == 200 else errors).append(orjson.dumps(line))
            continue
        expired = b.cancelled is None
        line["error"] = {
            "code": "batch_expired" if expired else "batch_cancelled",
            "message": "This request could not be executed before the completion window expired."
            if expired
            else "This request was not executed: its batch was cancelled.",
        }
        errors.append(orjson.dumps(line))
    return (b"\n".join(out) + b"\n" if out else b""), (b"\n".join(errors) + b"\n" if errors else b"")


def openai_lines(data: bytes, endpoint: str) -> tuple[list[tuple[str, dict[str, Any]]], list[dict[str, Any]]]:
    """An input file's requests, or its problems (each naming its line) that fail the batch."""
    entries: list[tuple[str, dict[str, Any]]] = []
    seen: set[str] = set()
    model = None
    for n, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        problem = _line_problem(raw, endpoint, seen, model)
        if problem is not None:
            return [], [{"code": problem[0], "line": n, "message": problem[1], "param": problem[2]}]
        line = orjson.loads(raw)
        seen.add(line["custom_id"])
        model = model or line["body"].get("model")
        entries.append((line["custom_id"], line["body"]))
    if not entries:
        return [], [
            {"code": "empty_file", "line": None, "message": "the input file holds no request", "param": None}
        ]
    if len(entries) > MAX_OPENAI:
        return [], [
            {
                "code": "too_many_requests",
                "line": None,
                "param": None,
                "message": f"at most {MAX_OPENAI:,} requests in a batch ({len(entries):,} given)",
            }
        ]
    return entries, []


def _line_problem(
    raw: bytes, endpoint: str, seen: set[str], model: str | None
) -> tuple[str, str, str | None] | None:
    try:
        line = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return "invalid_json_line", "this line is not JSON", None
    if not isinstance(line, dict) or not isinstance(line.get("body"), dict):
        return (
            "missing_required_parameter",
            "each line needs custom_id, method, url and a body object",
            "body",
        )
    cid = line.get("custom_id")
    if not isinstance(cid, str) or not cid:
        return "missing_required_parameter", "custom_id: a non-empty string is required", "custom_id"
    if cid in seen:
        return "duplicate_custom_id", f"custom_id {cid!r} appears more than once", "custom_id"
    if line.get("method") != "POST":
        return "invalid_method", "method: only POST is supported", "method"
    if line.get("url") != endpoint:
        return (
            "mismatched_endpoint",
            f"url {line.get('url')!r} differs from the batch's endpoint {endpoint}",
            "url",
        )
    if model is not None and line["body"].get("model") != model:
        return "mismatched_model", f"every request in a batch must use one model ({model})", "body.model"
    return None


def openai_file(fid: str, filename: str, data: bytes, purpose: str) -> dict[str, Any]:
    return {
        "id": fid,
        "object": "file",
        "bytes": len(data),
        "created_at": int(time.time()),
        "filename": filename,
        "purpose": purpose,
        "status": "processed",
        "expires_at": None,
        "status_details": None,
    }


def json_error(api: str, status: int, message: str, **kw: Any) -> web.Response:
    err = wire.anthropic_error if api == "anthropic" else wire.openai_error
    return web.json_response(err(status, message, **kw), status=status)
