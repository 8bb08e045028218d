"""OpenTelemetry export, received by an OTLP/HTTP receiver that decodes what arrives with OpenTelemetry's own
protobuf schema: a finished output's (`runner export --format otel`) and a run's, live (config `otel:`).
The attribute names asserted are the GenAI semantic conventions' own spellings (gen-ai-spans.md,
gen-ai-agent-spans.md), written out here, not imported from the code under test."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.results.result import outcome
from runner.results.sink import read_results
from tests.report.exports.otlp_receiver import Receiver, Span
from tests.report.exports.outputs import PLAN, write_output
from tests.runs import SAMPLE

INTERNAL, CLIENT = 1, 3  # OTLP's SpanKind
ERROR = 2  # OTLP's StatusCode


def _export(out: Path, endpoint: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run([sys.executable, "-m", "runner", "export", str(out), "--format", "otel", "--endpoint",
                           endpoint, *args], capture_output=True, text=True, env=env, timeout=120)


def _ns(iso: str) -> int:
    return int(dt.datetime.fromisoformat(iso).timestamp() * 1e9)


def _root(spans: list[Span]) -> Span:
    [root] = [s for s in spans if not s.parent_id]
    return root


def test_a_finished_output_is_a_trace_per_record_in_the_genai_conventions_names(tmp_path: Path) -> None:
    out = write_output(tmp_path / "out")
    with Receiver() as receiver:
        p = _export(out, receiver.url)
    assert p.returncode == 0, p.stderr
    results = {(r.run, r.record_id): r for run in PLAN for r in read_results(out / "results" / f"{run}.jsonl")}
    traces = receiver.traces()
    assert len(traces) == len(results) == 12  # one trace per record and run
    # a finished record: itself, two model calls and a tool call; one that ended in an error has no output
    assert f"sent 12 trace(s), {10 * 4 + 2} span(s) to {receiver.url}/v1/traces" in p.stdout
    for spans in traces.values():
        root = _root(spans)
        a = root.attributes
        r = results[(a["gen_ai.agent.name"], a["gen_ai.conversation.id"])]
        assert root.name == f"invoke_agent {r.run}" and root.kind == INTERNAL
        assert a["gen_ai.operation.name"] == "invoke_agent"
        u = r.usage
        assert a["gen_ai.usage.input_tokens"] == u.input_tokens + u.cache_read_tokens + u.cache_write_tokens
        assert a["gen_ai.usage.output_tokens"] == u.output_tokens
        assert (root.start_ns, a["pgsandbox.outcome"]) == (_ns(r.started_at), outcome(r))
        assert root.resource["service.name"] == "pgsandbox-runner"
        if r.ok:
            assert root.status != ERROR and "error.type" not in a
        else:  # an error or a cut turn: its kind, and the span's status says so
            assert root.status == ERROR and a["error.type"] == r.error_kind and len(spans) == 1
            continue
        chats = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
        tools = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "execute_tool"]
        assert len(chats) == 2 and len(tools) == 1 and len(spans) == 4
        assert all(s.parent_id == root.span_id for s in chats + tools)
        first = min(chats, key=lambda s: s.start_ns)
        assert first.kind == CLIENT and first.attributes["gen_ai.response.id"] == f"req_{r.record_id}_1"
        assert first.attributes["gen_ai.response.finish_reasons"] == ["tool_use"]
        assert first.attributes["gen_ai.usage.input_tokens"] == 400  # 300 new + 100 read from the prompt cache
        assert first.attributes["gen_ai.usage.cache_read.input_tokens"] == 100
        assert first.end_ns - first.start_ns == 400_000_000  # its latency
        [tool] = tools
        assert tool.name == "execute_tool search_accounts" and tool.kind == INTERNAL
        assert tool.attributes["gen_ai.tool.name"] == "search_accounts"
        assert tool.attributes["gen_ai.tool.call.id"] == f"call_{r.record_id}"
        assert tool.attributes["gen_ai.tool.type"] == "function"
        # content is opt-in, as the conventions ask
        assert "gen_ai.tool.call.arguments" not in tool.attributes and "gen_ai.tool.call.result" not in tool.attributes
        # the tool ran between the two model calls, inside its record
        assert first.end_ns <= tool.start_ns <= max(c.start_ns for c in chats) and tool.end_ns <= root.end_ns
        if r.ok and r.success is False:
            assert tool.status == ERROR and tool.status_message == "no such account"


def test_content_capture_puts_tool_arguments_and_results_on_their_spans(tmp_path: Path) -> None:
    out = write_output(tmp_path / "out", {"r": ["success"]})
    with Receiver() as receiver:
        p = _export(out, receiver.url, "--capture-content")
    assert p.returncode == 0, p.stderr
    [tool] = [s for s in receiver.spans if s.name.startswith("execute_tool")]
    assert tool.attributes["gen_ai.tool.call.arguments"] == '{"query": "Aurora"}'
    assert tool.attributes["gen_ai.tool.call.result"] == '{"count": 1}'


def test_a_collector_that_refuses_the_spans_is_one_line_and_exit_2(tmp_path: Path) -> None:
    out = write_output(tmp_path / "out", {"r": ["success", "failure"]})
    with Receiver(status=400) as receiver:
        p = _export(out, receiver.url)
    assert p.returncode == 2
    assert f"the OTLP endpoint {receiver.url}/v1/traces did not take 8 of 8 spans" in p.stderr


@pytest.mark.slow
def test_a_run_sends_each_result_s_trace_as_it_is_written(tmp_path: Path, local_bindir: str) -> None:
    with Receiver() as receiver:
        cfg = tmp_path / "runner.yaml"
        cfg.write_text(f"dataset: {SAMPLE}\nproviders: sim\ncache: false\nworkers: 2\nsandbox: local\n"
                       f"otel: {{endpoint: '{receiver.url}'}}\nruns:\n"
                       "  - {name: strong, provider: anthropic, model: claude-sonnet-5-5, sim_model: sim-strong}\n"
                       "  - {name: atlas, agent: atlas, provider: openai, model: gpt-5.4-mini, sim_model: sim-mini,\n"
                       "     teacher: {provider: anthropic, model: claude-sonnet-5-5, sim_model: sim-teacher}}\n")
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k != "CI"}
        p = subprocess.run([sys.executable, "-m", "runner", "run", str(cfg), "--limit", "3", "--out",
                            str(tmp_path / "out")], capture_output=True, text=True, env=env, timeout=300)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        traces = receiver.traces()
    rows = {(r.run, r.record_id): r for run in ("strong", "atlas")
            for r in read_results(tmp_path / "out" / "results" / f"{run}.jsonl")}
    assert len(rows) == 6 and len(traces) == 6
    for spans in traces.values():
        root = _root(spans)
        r = rows[(root.attributes["gen_ai.agent.name"], root.attributes["gen_ai.conversation.id"])]
        chats = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
        tools = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "execute_tool"]
        output = r.output or {}
        assert len(chats) == len(output["model_calls"]) and len(tools) == len(output["tool_calls"]) > 0
        # the run recorded when each call started: the spans' times are measured, inside their record's
        assert root.attributes["pgsandbox.timing"] == "measured"
        assert all(root.start_ns <= s.start_ns <= s.end_ns <= root.end_ns for s in chats + tools)
        models = {s.attributes["gen_ai.request.model"]: s.attributes["gen_ai.provider.name"] for s in chats}
        # Atlas's student and teacher each under their own provider and model
        assert models == ({"gpt-5.4-mini": "openai", "claude-sonnet-5-5": "anthropic"} if r.run == "atlas"
                          else {"claude-sonnet-5-5": "anthropic"})
