"""OpenTelemetry traces of results, sent over OTLP/HTTP with the OpenTelemetry SDK (extra `otel`): a finished
output's (`runner export OUT --format otel`) or, while a run goes, each result's as it is written (config
`otel: {endpoint: ...}`: TracedSink). The spans themselves are spans.py's.

Any OTLP/HTTP receiver takes them: an OpenTelemetry Collector, Phoenix, Langfuse, Honeycomb, W&B Weave.
Headers (a hosted backend's key) come from the SDK's own variables, OTEL_EXPORTER_OTLP_HEADERS or
OTEL_EXPORTER_OTLP_TRACES_HEADERS: never from the config, which is kept with a run's files.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loguru import logger

from runner import __version__
from runner.errors import ConfigError, ExportRefused
from runner.report.exports.spans import SpanSpec, record_trace
from runner.resources import Resource
from runner.results import manifest as manifests
from runner.results.manifest import RunEntry
from runner.results.result import Result
from runner.results.sink import ResultSink

EXTRA = "pip install 'pgsandbox-runner[otel]'"
DEFAULT_ENDPOINT = "http://127.0.0.1:4318"
TRACES_PATH = "/v1/traces"
SERVICE = "pgsandbox-runner"


def traces_url(endpoint: str | None) -> str:
    """Where spans go: `endpoint` (a collector's base URL, or its full traces URL), else the SDK's variables,
    else a collector on this machine."""
    if endpoint is None and (full := os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        return full
    base = (endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    return base if base.endswith(TRACES_PATH) else base + TRACES_PATH


class TraceSender(Resource):
    """`with TraceSender(url) as s: s.send(root)`: each SpanSpec tree a trace of its own, batched to the
    collector in the background; leaving flushes what is left. Counts what the collector refused."""

    def __init__(self, url: str, *, resource: dict[str, Any] | None = None) -> None:
        self.url, self.attributes = (
            url,
            {"service.name": SERVICE, "service.version": __version__, **(resource or {})},
        )
        self.sent = self.spans = self.refused = 0
        self._provider: Any = None
        self._tracer: Any = None
        self._lock = threading.Lock()

    def start(self) -> None:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource as OtelResource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError:
            raise ConfigError(
                f"OpenTelemetry export needs the OpenTelemetry SDK, which is not installed: {EXTRA}"
            ) from None
        # a provider of our own, not the global one: a harness's own tracing in this process stays its own
        self._provider = TracerProvider(resource=OtelResource.create(self.attributes), shutdown_on_exit=False)
        self._provider.add_span_processor(
            BatchSpanProcessor(_counting(OTLPSpanExporter(endpoint=self.url), self))
        )
        self._tracer = self._provider.get_tracer(SERVICE, __version__)

    def send(self, root: SpanSpec) -> None:
        from opentelemetry.context import Context

        # a trace's spans are made together (the supervisor has one thread; a caller may not)
        with self._lock:
            self._emit(root, Context())
            self.sent += 1

    def _emit(self, s: SpanSpec, parent: Any) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind, Status, StatusCode

        kind = SpanKind.CLIENT if s.kind == "client" else SpanKind.INTERNAL
        span = self._tracer.start_span(
            s.name, context=parent, kind=kind, attributes=s.attributes, start_time=s.start_ns
        )
        if s.error is not None:
            span.set_status(Status(StatusCode.ERROR, s.error))
        inside = trace.set_span_in_context(span, parent)
        for child in s.children:
            self._emit(child, inside)
        span.end(end_time=s.end_ns)
        self.spans += 1

    def stop(self) -> None:
        provider, self._provider = self._provider, None
        if provider is not None:
            provider.force_flush()
            provider.shutdown()


def _counting(inner: Any, sender: TraceSender) -> Any:
    """The OTLP exporter, counting the spans a collector did not take (the SDK logs a failure and goes on)."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class Counting(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            result = inner.export(spans)
            if result != SpanExportResult.SUCCESS:
                sender.refused += len(spans)
            return result

        def shutdown(self) -> None:
            inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return bool(inner.force_flush(timeout_millis))

    return Counting()


@dataclass(frozen=True)
class Sent:
    traces: int
    spans: int
    endpoint: str


def export_output(out: Path, endpoint: str | None, *, capture_content: bool = False) -> Sent:
    """Every result of a finished output as its trace; raises when the collector refused some."""
    from runner.report.build import load_runs

    man = manifests.read(out)
    specs = {s.name: s for s in man.runs}
    url = traces_url(endpoint)
    with TraceSender(
        url, resource={"pgsandbox.output": str(out), "pgsandbox.run_id": man.run_id or ""}
    ) as sender:
        for run, rows in load_runs(out).items():
            for r in rows:
                sender.send(record_trace(r, specs.get(run), capture_content=capture_content))
    if sender.refused:
        raise ExportRefused(
            f"the OTLP endpoint {url} did not take {sender.refused} of {sender.spans} spans (its "
            "answer is in the lines above)"
        )
    return Sent(sender.sent, sender.spans, url)


class TracedSink(ResultSink):
    """The run's result sink, which also sends each result's trace as it writes it (config `otel:`); its
    spans go out in the background and the last are flushed when the sink closes (at the run's end)."""

    def __init__(
        self,
        out: Path,
        runs: list[str],
        specs: dict[str, RunEntry],
        endpoint: str,
        *,
        capture_content: bool = False,
    ) -> None:
        super().__init__(out, runs)
        self.specs, self.capture_content = specs, capture_content
        self.sender = TraceSender(traces_url(endpoint), resource={"pgsandbox.output": str(out)})
        self.sender.__enter__()  # released in close(), with the sink's files

    def write(self, result: Result) -> None:
        super().write(result)
        self.sender.send(
            record_trace(result, self.specs.get(result.run), capture_content=self.capture_content)
        )

    def close(self) -> None:
        super().close()
        self.sender.stop()
        if self.sender.refused:  # the results are written all the same: said once, not a reason to stop
            logger.warning(
                "the OTLP endpoint {} did not take {} of {} spans (the SDK's lines above say why)",
                self.sender.url,
                self.sender.refused,
                self.sender.spans,
            )
