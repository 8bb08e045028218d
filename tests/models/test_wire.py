"""The built-in agents' lean HTTP path against a recording server on 127.0.0.1: the bytes the SDKs
would send, keep-alive, encodings, the SDKs' error wording, TLS and proxies."""

from __future__ import annotations

import gzip
import http.server
import json
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from runner.models.anthropic import AnthropicProvider
from runner.models.base import ProviderError, Request, sdk_errors
from runner.models.openai import OpenAIProvider
from runner.models.wire import Wire

DATA = Path(__file__).parent / "data"
CERT, KEY = DATA / "localhost-test-cert.pem", DATA / "localhost-test-key.pem"  # test-only, self-signed
ANTHROPIC_OK = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "stop_reason": "end_turn",
                "content": [{"type": "text", "text": "hello"}], "usage": {"input_tokens": 3, "output_tokens": 1}}
OPENAI_OK = {"id": "c1", "object": "chat.completion", "model": "m", "choices": [
    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hello"}}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1}}


@dataclass
class Seen:
    target: str
    headers: dict[str, str]
    body: bytes
    connection: int


@dataclass
class Recorder:
    """What a test server got, and what it answers next (status, body, extra headers)."""

    seen: list[Seen] = field(default_factory=list)
    status: int = 200
    body: bytes = json.dumps(ANTHROPIC_OK).encode()
    headers: dict[str, str] = field(default_factory=dict)
    gzip: bool = False
    close: bool = False
    moved: dict[str, str] = field(default_factory=dict)  # path -> where a 307 sends it


def _handler(rec: Recorder) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            rec.seen.append(Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, body,
                                 id(self.connection)))
            out = gzip.compress(rec.body) if rec.gzip else rec.body
            moved = rec.moved.get(self.path)
            self.send_response(307 if moved else rec.status)
            headers = {"location": moved} if moved else rec.headers
            for k, v in {"content-type": "application/json", "request-id": "req_1", **headers}.items():
                self.send_header(k, v)
            if rec.gzip:
                self.send_header("content-encoding", "gzip")
            if rec.close:
                self.send_header("connection", "close")
                self.close_connection = True
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, Recorder]]:
    """An HTTP (or, with indirect param "https", HTTPS) server on 127.0.0.1 and its recorder."""
    rec = Recorder()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(rec))
    scheme = getattr(request, "param", "http")
    if scheme == "https":
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(CERT, KEY)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    t.start()
    try:
        yield f"{scheme}://127.0.0.1:{srv.server_address[1]}", rec
    finally:
        srv.shutdown()
        srv.server_close()


def _req() -> Request:
    return Request("m", "sys", [{"role": "user", "text": "hi"}], [])


def _sdk_headers(kind: str, url: str) -> dict[str, str]:
    """The headers the SDK itself sends for the same call."""
    if kind == "anthropic":
        a = anthropic.Anthropic(api_key="sk-test", base_url=url, max_retries=0, timeout=7,
                                default_headers={"x-extra": "1"})
        return dict(a.post("/v1/messages", cast_to=httpx2.Response, content=b"{}").request.headers)
    o = openai.OpenAI(api_key="sk-test", base_url=f"{url}/v1", max_retries=0, timeout=7,
                      default_headers={"x-extra": "1"})
    return dict(o.post("/chat/completions", cast_to=httpx2.Response, content=b"{}",
                       options={"security": {"bearer_auth": True}}).request.headers)


def _provider(kind: str, url: str, timeout: float = 7) -> Any:
    if kind == "anthropic":
        return AnthropicProvider("sk-test", base_url=url, timeout=timeout, headers={"x-extra": "1"})
    return OpenAIProvider("sk-test", base_url=f"{url}/v1", timeout=timeout, headers={"x-extra": "1"})


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_each_call_sends_the_headers_the_sdk_sends_and_reuses_one_connection(
        server: tuple[str, Recorder], kind: str) -> None:
    url, rec = server
    rec.body = json.dumps(ANTHROPIC_OK if kind == "anthropic" else OPENAI_OK).encode()
    p = _provider(kind, url)
    for _ in range(5):
        assert p.generate(_req()).text == "hello"
    expected = _sdk_headers(kind, url)
    lean = rec.seen[0]
    assert lean.target == ("/v1/messages" if kind == "anthropic" else "/v1/chat/completions")
    skip = {"content-length", "connection", "host"}
    assert {k: v for k, v in lean.headers.items() if k not in skip} == \
        {k: v for k, v in expected.items() if k not in skip}
    assert "sk-test" in (lean.headers.get("authorization", "") + lean.headers.get("x-api-key", ""))
    assert "sk-test" not in repr(p.wire.shape)  # the learned headers carry the key: never in a repr
    assert json.loads(lean.body)["messages"]  # the body is the provider's, not the probe's
    assert len({s.connection for s in rec.seen[:5]}) == 1
    p.close()


def test_a_server_that_closes_after_each_answer_gets_a_new_connection_each_call(
        server: tuple[str, Recorder]) -> None:
    url, rec = server
    rec.close = True
    p = _provider("anthropic", url)
    for _ in range(3):
        assert p.generate(_req()).text == "hello"
    assert len(rec.seen) == 3
    assert not p.wire._idle  # closed connections are not kept


def test_a_gzip_answer_is_decoded(server: tuple[str, Recorder]) -> None:
    url, rec = server
    rec.gzip = True
    assert _provider("anthropic", url).generate(_req()).text == "hello"


@pytest.mark.parametrize("status,body,kind", [
    (400, {"type": "error", "error": {"type": "invalid_request_error", "message": "bad field"}}, "rejected"),
    (429, {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}, "rate_limited"),
    (529, {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}, "transient"),
    (401, {"type": "error", "error": {"type": "authentication_error", "message": "no"}}, "fatal"),
])
def test_error_answers_read_as_through_the_sdk(server: tuple[str, Recorder], status: int, body: dict[str, Any],
                                               kind: str) -> None:
    url, rec = server
    rec.status, rec.body, rec.headers = status, json.dumps(body).encode(), {"retry-after": "3"}
    with pytest.raises(ProviderError) as lean:
        _provider("anthropic", url).generate(_req())
    sdk = anthropic.Anthropic(api_key="sk-test", base_url=url, max_retries=0, timeout=7)
    with pytest.raises(ProviderError) as via_sdk, sdk_errors(anthropic):
        sdk.post("/v1/messages", cast_to=httpx2.Response, content=b"{}")
    got, want = lean.value, via_sdk.value
    assert (got.kind, got.status, got.retry_after, got.cause, str(got)) == \
        (want.kind, want.status, want.retry_after, want.cause, str(want))
    assert got.kind == kind


def test_a_server_that_is_gone_is_a_transient_connection_error() -> None:
    p = _provider("anthropic", "http://127.0.0.1:9")  # discard port: nothing listens
    with pytest.raises(ProviderError) as e:
        p.generate(_req())
    assert e.value.kind == "transient" and str(e.value).startswith("connection:")


def test_threads_share_the_connections_safely(server: tuple[str, Recorder]) -> None:
    url, rec = server
    p = _provider("anthropic", url)
    errors: list[BaseException] = []

    def calls() -> None:
        try:
            for _ in range(10):
                assert p.generate(_req()).text == "hello"
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=calls) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(rec.seen) == 60 and len({s.connection for s in rec.seen}) <= 6


@pytest.mark.parametrize("server", ["https"], indirect=True)
def test_tls_trusts_what_httpx_trusts(server: tuple[str, Recorder], monkeypatch: pytest.MonkeyPatch) -> None:
    url, _ = server
    with pytest.raises(ProviderError) as untrusted:
        _provider("anthropic", url).generate(_req())
    assert untrusted.value.kind == "transient" and "CERTIFICATE_VERIFY_FAILED" in str(untrusted.value)
    monkeypatch.setenv("SSL_CERT_FILE", str(CERT))  # the trust httpx (and so the SDK) would read
    assert _provider("anthropic", url).generate(_req()).text == "hello"


def test_with_a_proxy_configured_every_call_goes_through_the_sdk(server: tuple[str, Recorder],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    proxy, rec = server  # the recorder plays the proxy: it sees the absolute-form target
    for var in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy)
    p = _provider("anthropic", "http://api.example.invalid")
    assert not p.wire.direct
    assert p.generate(_req()).text == "hello"
    assert rec.seen[0].target == "http://api.example.invalid/v1/messages"


def test_a_closed_wire_keeps_no_connection(server: tuple[str, Recorder]) -> None:
    url, _ = server
    w = Wire(anthropic.Anthropic(api_key="k", base_url=url, max_retries=0), anthropic, "/v1/messages", timeout=5)
    w.post({})
    assert len(w._idle) == 1
    w.close()
    assert not w._idle
    w.post({})  # still usable; what it opens is not kept
    assert not w._idle



def test_a_redirect_is_followed_as_the_sdk_follows_it(server: tuple[str, Recorder]) -> None:
    url, rec = server
    rec.moved = {"/v1/messages": "/v2/messages"}
    assert _provider("anthropic", url).generate(_req()).text == "hello"
    assert [s.target for s in rec.seen] == ["/v1/messages", "/v1/messages", "/v2/messages"]  # lean, SDK, moved
