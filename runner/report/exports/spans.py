"""A record's result as a trace, in the OpenTelemetry GenAI semantic conventions' names (pure: no SDK here;
otel.py sends what this builds).

Names from the conventions (open-telemetry/semantic-conventions, docs/gen-ai/gen-ai-spans.md and
gen-ai-agent-spans.md; kept since in semantic-conventions-genai): one trace per record,

- `invoke_agent {run}` (INTERNAL): the record. `gen_ai.operation.name` invoke_agent, `gen_ai.agent.name` the
  run, `gen_ai.provider.name` and `gen_ai.request.model` the run's model, `gen_ai.conversation.id` the
  record's id, `gen_ai.usage.*` the record's tokens; `error.type` and an ERROR status for a result that
  ended in an error or a cut turn; the runner's own facts (outcome, success, metrics, cost) as `pgsandbox.*`.
- `chat {model}` (CLIENT), a child per model call the result lists (`output.model_calls`): model,
  `gen_ai.response.id`, `gen_ai.response.finish_reasons`, tokens; whether the response cache answered it.
- `execute_tool {tool}` (INTERNAL), a child per tool call (`output.tool_calls`): `gen_ai.tool.name`,
  `gen_ai.tool.call.id`, `gen_ai.tool.type` function; a failed call with an ERROR status. Its arguments and
  result (`gen_ai.tool.call.arguments`, `.result`) only when asked to (capture_content), as the conventions
  require of content.

Times: the record's from its result. A model call's and a tool call's where the result recorded when they
started (the built-in CRM does: model_calls[].started_at, timings.tool_calls); otherwise they are laid end to
end from the record's start in the order they happened, a model call as long as its latency, and marked
`pgsandbox.timing` = sequenced.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from runner.results.manifest import RunEntry, RunModel
from runner.results.result import Result, outcome

# The conventions' attribute names (development status): the spec's own spellings, in one place.
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
AGENT_NAME = "gen_ai.agent.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
FINISH_REASONS = "gen_ai.response.finish_reasons"
CONVERSATION = "gen_ai.conversation.id"
INPUT_TOKENS = "gen_ai.usage.input_tokens"  # every prompt token, cached ones included
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ = "gen_ai.usage.cache_read.input_tokens"
CACHE_WRITE = "gen_ai.usage.cache_creation.input_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
ERROR_TYPE = "error.type"

Kind = Literal["internal", "client"]


@dataclass
class SpanSpec:
    name: str
    kind: Kind
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    error: str | None = None  # the status description of a span that ended in an error
    children: list[SpanSpec] = field(default_factory=list)

    def count(self) -> int:
        return 1 + sum(c.count() for c in self.children)


@dataclass(frozen=True)
class Model:
    provider: str | None
    model: str | None


def _ns(iso: str) -> int:
    stamp = dt.datetime.fromisoformat(iso)
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    return int(stamp.timestamp() * 1e9)


def _models(spec: RunEntry | None, output: dict[str, Any]) -> dict[str, Model]:
    """Who plays each role of the run: the agent (and Atlas's student), its teacher."""
    provider, model = spec.provider_model() if spec else (None, None)
    agent = Model(provider or output.get("provider"), model or output.get("model"))
    teacher = spec.teacher if spec and spec.teacher else RunModel()
    return {
        "agent": agent,
        "student": agent,
        "teacher": Model(teacher.provider, teacher.model or output.get("teacher_model")),
    }


def _clean(attrs: dict[str, Any]) -> dict[str, Any]:
    """OTLP takes no None values."""
    return {k: v for k, v in attrs.items() if v is not None}


def _record_attributes(r: Result, agent: Model) -> dict[str, Any]:
    u = r.usage
    attrs: dict[str, Any] = {
        OPERATION: "invoke_agent",
        AGENT_NAME: r.run,
        PROVIDER: agent.provider,
        REQUEST_MODEL: agent.model,
        CONVERSATION: r.record_id,
        INPUT_TOKENS: u.input_tokens + u.cache_read_tokens + u.cache_write_tokens,
        OUTPUT_TOKENS: u.output_tokens,
        CACHE_READ: u.cache_read_tokens,
        CACHE_WRITE: u.cache_write_tokens,
        "pgsandbox.run": r.run,
        "pgsandbox.record_id": r.record_id,
        "pgsandbox.epoch": r.epoch,
        "pgsandbox.attempt": r.attempt,
        "pgsandbox.outcome": outcome(r),
        "pgsandbox.success": r.success,
        "pgsandbox.llm_calls": u.llm_calls,
        "pgsandbox.cache_hits": u.cache_hits,
        "pgsandbox.retries": u.retries,
        "pgsandbox.cost_usd": u.cost_usd,
        "pgsandbox.wall_seconds": r.wall_seconds,
        **{f"pgsandbox.metric.{k}": v for k, v in r.metrics.items()},
        **{f"pgsandbox.group.{k}": v for k, v in r.groups.items() if v},
    }
    if not r.ok:
        attrs[ERROR_TYPE] = r.error_kind or "_OTHER"
    return _clean(attrs)


def _chat(call: dict[str, Any], models: dict[str, Model], conversation: str, start: int) -> SpanSpec:
    who = models.get(str(call.get("role", "agent")), models["agent"])
    requested = who.model or str(call.get("model", ""))
    cache_read, cache_write = (
        int(call.get("cache_read_tokens") or 0),
        int(call.get("cache_write_tokens") or 0),
    )
    attrs = {
        OPERATION: "chat",
        PROVIDER: who.provider,
        REQUEST_MODEL: requested,
        RESPONSE_MODEL: call.get("model"),
        RESPONSE_ID: call.get("request_id"),
        CONVERSATION: conversation,
        FINISH_REASONS: [str(call["stop_reason"])] if call.get("stop_reason") else None,
        INPUT_TOKENS: int(call.get("input_tokens") or 0) + cache_read + cache_write,
        OUTPUT_TOKENS: call.get("output_tokens"),
        CACHE_READ: cache_read,
        CACHE_WRITE: cache_write,
        "pgsandbox.role": call.get("role"),
        "pgsandbox.turn": call.get("turn"),
        "pgsandbox.cached": call.get("cached"),
        "pgsandbox.attempts": call.get("attempts"),
        "pgsandbox.cost_usd": call.get("cost_usd"),
    }
    length = int(float(call.get("latency_seconds") or 0.0) * 1e9)
    return SpanSpec(f"chat {requested}", "client", start, start + length, _clean(attrs))


def _tool(call: dict[str, Any], start: int, seconds: float, content: bool) -> SpanSpec:
    name = str(call.get("tool") or call.get("name") or "")
    attrs = {
        OPERATION: "execute_tool",
        TOOL_NAME: name,
        TOOL_CALL_ID: call.get("id"),
        TOOL_TYPE: "function",
        "pgsandbox.turn": call.get("turn"),
    }
    if content:  # opt-in: arguments and results may hold what a record's data holds
        attrs[TOOL_ARGUMENTS] = json.dumps(call.get("args"), default=str)
        if call.get("ok", True):
            attrs[TOOL_RESULT] = json.dumps(call.get("result"), default=str)
    failed = call.get("ok") is False
    if failed:
        attrs[ERROR_TYPE] = "tool_error"
    return SpanSpec(
        f"execute_tool {name}",
        "internal",
        start,
        start + int(seconds * 1e9),
        _clean(attrs),
        error=str(call.get("error") or "the tool call failed") if failed else None,
    )


def _children(r: Result, models: dict[str, Model], content: bool, start: int) -> tuple[list[SpanSpec], bool]:
    """The record's model and tool calls in the order they ran; True where every start was recorded."""
    out = r.output or {}
    calls = [c for c in out.get("model_calls") or [] if isinstance(c, dict)]
    tools = [t for t in out.get("tool_calls") or [] if isinstance(t, dict)]
    timings = {
        t.get("id"): t for t in ((out.get("timings") or {}).get("tool_calls") or []) if isinstance(t, dict)
    }
    measured = all("started_at" in c for c in calls) and all(t.get("id") in timings for t in tools)
    spans: list[SpanSpec] = []
    if measured:
        spans += [_chat(c, models, r.record_id, _ns(c["started_at"])) for c in calls]
        spans += [
            _tool(t, _ns(timings[t.get("id")]["started_at"]), float(timings[t.get("id")]["seconds"]), content)
            for t in tools
        ]
        return sorted(spans, key=lambda s: s.start_ns), True
    # Laid end to end: a tool call after the model call of its turn that asked for it. Which of a turn's model
    # calls asked is not recorded, so a turn's tools follow its calls; their durations are not known (zero).
    cursor = start
    for turn in sorted({c.get("turn", 0) for c in calls} | {t.get("turn", 0) for t in tools}):
        for c in (c for c in calls if c.get("turn", 0) == turn):
            spans.append(_chat(c, models, r.record_id, cursor))
            cursor = spans[-1].end_ns
        spans += [_tool(t, cursor, 0.0, content) for t in tools if t.get("turn", 0) == turn]
    return spans, False


def record_trace(r: Result, spec: RunEntry | None = None, *, capture_content: bool = False) -> SpanSpec:
    """One result as its trace's root span; `spec`: its run's spec as the manifest keeps it."""
    models = _models(spec, r.output or {})
    start, end = _ns(r.started_at), _ns(r.finished_at)
    children, measured = _children(r, models, capture_content, start)
    attrs = _record_attributes(r, models["agent"])
    attrs["pgsandbox.timing"] = "measured" if measured or not children else "sequenced"
    end = max([end, *(c.end_ns for c in children)])  # a child cannot outlast its record
    return SpanSpec(
        f"invoke_agent {r.run}",
        "internal",
        start,
        end,
        attrs,
        children=children,
        error=(r.error or str(r.error_kind)).splitlines()[0] if not r.ok else None,
    )
