"""An OTLP/HTTP trace receiver on 127.0.0.1 for the tests: what an exporter POSTs to /v1/traces, decoded with
OpenTelemetry's own protobuf schema (opentelemetry-proto's ExportTraceServiceRequest), as a collector does."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


@dataclass
class Span:
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status: int
    status_message: str
    resource: dict[str, Any] = field(default_factory=dict)


class Receiver:
    """`with Receiver() as r: r.url`; `r.spans` what arrived; `status`: what it answers (400: a refusal)."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.spans: list[Span] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver.take(self.path, self.headers.get("content-type", ""), body)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(receiver.status)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def take(self, path: str, content_type: str, body: bytes) -> None:
        assert path == "/v1/traces" and content_type == "application/x-protobuf", (path, content_type)
        request = ExportTraceServiceRequest.FromString(body)
        with self._lock:
            self.requests += 1
            for rs in request.resource_spans:
                resource = {a.key: value(a.value) for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        self.spans.append(Span(
                            s.name, s.kind, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(),
                            s.start_time_unix_nano, s.end_time_unix_nano,
                            {a.key: value(a.value) for a in s.attributes}, s.status.code, s.status.message,
                            resource))

    def traces(self) -> dict[str, list[Span]]:
        out: dict[str, list[Span]] = {}
        for s in self.spans:
            out.setdefault(s.trace_id, []).append(s)
        return out

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
