"""On the real APIs every call goes through the official SDK's own request code, with the SDK's headers and
an honest retry count; the lean wire stays for the simulator. A recording proxy in front of the strict
simulator stands in for the real endpoint (it answers the first call 529, as an overloaded API would)."""

from __future__ import annotations

import http.server
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from runner.config import Config, ModelRef, SimSettings
from runner.harness.crm.agents.base import NEUTRAL_TOOLS, SYSTEM_PROMPT
from runner.models.base import Request
from runner.models.client import make_client
from runner.models.settings import client_settings
from runner.models.sim.process import SimServer


class Recorder(http.server.ThreadingHTTPServer):
    upstream = ""
    seen: list[dict[str, str]]
    fail_first = True


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Recorder

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        self.server.seen.append({k.lower(): v for k, v in self.headers.items()})
        if self.server.fail_first:
            self.server.fail_first = False
            self._send(529, b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}', {})
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
        req = urllib.request.Request(self.server.upstream + self.path, data=body, headers=headers, method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:
            self._send(r.status, r.read(), {"request-id": r.headers.get("request-id") or "req_x"})

    def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for k, v in {"content-type": "application/json", "content-length": str(len(body)), **headers}.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    with SimServer(SimSettings()) as sim:
        server = Recorder(("127.0.0.1", 0), _Handler)
        server.upstream, server.seen = sim.url, []
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield server
        finally:
            server.shutdown()


def _client(recorder: Recorder, monkeypatch: pytest.MonkeyPatch, transport: str) -> Any:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    url = f"http://127.0.0.1:{recorder.server_address[1]}"
    cfg = Config(dataset="x.jsonl", runs=[{"name": "r", "provider": "anthropic", "model": "claude-sonnet-5-5"}],
                 providers_mode="real", cache=False, anthropic={"base_url": url, "transport": transport},
                 retry={"base_seconds": 0.01, "max_backoff_seconds": 0.05})
    return make_client(ModelRef(provider="anthropic", model="claude-sonnet-5-5", thinking="off"), client_settings(cfg),
                       sim_url=None, limiter=None, cache=None)


@pytest.mark.parametrize("transport", ["auto", "lean"])
def test_each_call_carries_the_sdks_headers_and_its_retry_count(recorder: Recorder, monkeypatch: pytest.MonkeyPatch,
                                                               transport: str) -> None:
    import anthropic

    client = _client(recorder, monkeypatch, transport)
    assert client.provider.wire.direct is (transport == "lean")  # auto on a real API: the SDK's own code
    c = client.complete(Request("claude-sonnet-5-5", SYSTEM_PROMPT, [{"role": "user", "text": "Find Acme"}],
                                NEUTRAL_TOOLS, 0.0, 800))
    assert c.stop_reason and client.stats.retries == 1
    first, retry = recorder.seen
    assert first["x-stainless-retry-count"] == "0" and retry["x-stainless-retry-count"] == "1"
    for h in (first, retry):  # the SDK's own: its version, its API version, its auth
        assert h["x-stainless-package-version"] == anthropic.__version__ and h["anthropic-version"]
        assert h["user-agent"].startswith("Anthropic/Python") and "sk-ant-test" in (
            h.get("x-api-key") or h.get("authorization", ""))
    client.close()
