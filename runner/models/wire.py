"""The built-in agents' HTTP: the official SDK says once what a request is; each call sends it lean.

Why: with dozens of conversations in flight on two cores, the SDKs' per-call machinery (request
options through pydantic, httpx's URL and header models and client layers, httpcore and h11) was
half of a worker's CPU, ~370 us a call, to put on the wire bytes that differ from call to call only
in their body. So each provider asks its SDK client once, through httpx's own MockTransport (no
network), for the request it would send -- method, URL, headers: auth, API version, user agent and
the SDK's telemetry, none of them per call -- and then sends those headers with each new body over
keep-alive HTTP/1.1 connections (http.client; TLS with the context httpx itself would build, so the
same trust store and SSL_CERT_FILE), ~40 us a call. Errors keep the SDKs' wording and are
classified as before (models/base.py).

That is for the simulator, where CPU is the limit. On the real APIs the rate limit binds, not 0.3 ms of
CPU a call, and a hand-written transport would not follow the next SDK release (a new per-call header,
a beta flag, request signing): there every call goes through the SDK's own `create()` (its raw-response
form: the SDK builds and sends the request, the agents read the body as here; `lean=False`, the default
for real providers; `transport:` in the config). Where a proxy is configured for the API's
host, every call goes through the SDK too: httpx's proxy handling is not copied here.

Either way each call says how many retries it follows (`x-stainless-retry-count`, as the SDK's own
retries would): the runner retries, not the SDK, and sets `retries_taken` around each attempt.
"""

from __future__ import annotations

import functools
import http.client
import os
import socket
import ssl
import threading
import urllib.request
import zlib
from collections.abc import Callable
from contextlib import suppress
from contextvars import ContextVar
from dataclasses import dataclass, field
from email.message import Message
from typing import Any

import httpx2
import orjson

from runner.models.base import TRIAL_HEADER, ProviderError, classify_status, json_body, sdk_errors
from runner.resources import fd_ready

# How many retries came before this attempt (the client's retry loop sets it; each thread has its own).
retries_taken: ContextVar[int] = ContextVar("retries_taken", default=0)
RETRY_HEADER = "x-stainless-retry-count"
# The record's trial, told to the simulator only (a real API samples anew by itself): set by the client.
sim_trial: ContextVar[int] = ContextVar("sim_trial", default=1)


def call_headers(retries: int) -> dict[str, str]:
    """Headers that change from call to call: the SDK's retry count, and on the simulator the trial."""
    return {RETRY_HEADER: str(retries), **({TRIAL_HEADER: str(t)} if (t := sim_trial.get()) > 1 else {})}


# Set by the connection per call, not taken from the SDK's request.
_OWN = frozenset({"host", "content-length", "connection", "transfer-encoding"})
# Sending on a keep-alive connection the server closed meanwhile: the request did not get through
# whole, so it goes again on a new connection. A connection lost after the request went out is not
# retried here (a POST may have been acted on): the client's retries decide (models/client.py).
_LOST_SENDING = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


@dataclass(frozen=True)
class Reply:
    """A success (2xx) response: what the providers read of it."""

    headers: Any  # case-insensitive .get(name)
    content: bytes


@dataclass(frozen=True)
class Shape:
    """The request the SDK would send, less its body."""

    scheme: str
    host: str
    port: int
    target: str  # path and query
    headers: dict[str, str] = field(repr=False)  # the API key is among them


def learn(client: Any, path: str, options: dict[str, Any] | None = None) -> Shape:
    """What `client.post(path)` sends, asked of the SDK itself (a copy of the client on httpx's
    MockTransport: nothing leaves the process)."""
    seen: list[httpx2.Request] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(200, content=b"{}")

    with httpx2.Client(transport=httpx2.MockTransport(answer)) as mock:
        probe = client.with_options(http_client=mock)
        probe.post(path, cast_to=httpx2.Response, content=b"{}", options=options or {})
    req = seen[0]
    url = req.url
    target = url.raw_path.decode("ascii")
    return Shape(
        url.scheme,
        url.host,
        url.port or (443 if url.scheme == "https" else 80),
        target,
        {k: v for k, v in req.headers.items() if k.lower() not in _OWN},
    )


def proxied(shape: Shape) -> bool:
    """Whether the environment sends this host's traffic through a proxy (as httpx's trust_env reads it)."""
    proxies = urllib.request.getproxies()
    if not (proxies.get(shape.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass(shape.host)


def tls_context() -> ssl.SSLContext:
    """The TLS context httpx would build (certifi's roots, or the SSL_CERT_FILE / SSL_CERT_DIR it reads), one
    per process and trust: each SDK client and Wire built its own (~50 ms of CPU each: 4 per worker at boot,
    on the first record's way); a context is safe to share between threads."""
    return _tls_context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


@functools.cache
def _tls_context(cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    return httpx2.create_ssl_context()


def http_client(sdk: Any) -> Any:
    """The SDK's own default HTTP client (its limits, timeouts and redirects), on the process's TLS
    context."""
    return sdk.DefaultHttpxClient(verify=tls_context())


class Wire:
    """POST bodies as one SDK client would, over keep-alive connections shared by the calling threads."""

    def __init__(
        self,
        client: Any,
        sdk: Any,
        path: str,
        *,
        timeout: float,
        options: dict[str, Any] | None = None,
        lean: bool = True,
        create: Callable[..., Any] | None = None,
    ) -> None:
        """`create`: the SDK's `with_raw_response.create` for this path, the official transport. Not lean, no
        request is learned: every call goes through `create` (the clouds' clients must: Bedrock's signs each
        request over its body, and both move the body's model into the path)."""
        self.client, self.sdk, self.path, self.options, self.timeout = (
            client,
            sdk,
            path,
            options or {},
            timeout,
        )
        self.create = create
        self.shape = learn(client, path, options) if lean or create is None else None
        self.direct = self.shape is not None and lean and not proxied(self.shape)
        https = self.shape is not None and self.shape.scheme == "https"
        self._tls = tls_context() if https else None
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    def post(self, request: dict[str, Any]) -> Reply:
        """A 2xx reply, or ProviderError (classified) for an error status, a timeout or a lost connection."""
        retries = retries_taken.get()
        if not self.direct and self.create is not None:
            with sdk_errors(self.sdk):  # the SDK's own request code, every header as it sets them
                raw = self.create(**request, extra_headers=call_headers(retries))
            return Reply(raw.http_response.headers, raw.http_response.content)
        body = json_body(request)
        if self.direct:
            status, headers, content = self._exchange(body, retries)
            if 200 <= status < 300:
                return Reply(headers, content)
            if not 300 <= status < 400:
                raise _status_error(status, headers, content)
            # A redirect: rare, and the SDK's client follows it (the request was not acted on)
        options = {**self.options, "headers": {**self.options.get("headers", {}), **call_headers(retries)}}
        with sdk_errors(self.sdk):
            resp = self.client.post(self.path, cast_to=httpx2.Response, content=body, options=options)
        return Reply(resp.headers, resp.content)

    def _exchange(self, body: bytes, retries: int) -> tuple[int, Message, bytes]:
        assert self.shape is not None  # direct: learned
        conn, reused = self._take()
        extra = call_headers(retries)
        headers = {**self.shape.headers, **extra} if retries or len(extra) > 1 else self.shape.headers
        try:
            try:
                conn.request("POST", self.shape.target, body=body, headers=headers)
            except _LOST_SENDING:
                if not reused:
                    raise
                conn.close()
                conn = self._connect()
                conn.request("POST", self.shape.target, body=body, headers=headers)
            return self._answer(conn)
        except TimeoutError as e:
            conn.close()
            raise ProviderError("transient", f"timeout: {e or 'no answer in time'}") from e
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise ProviderError("transient", f"connection: {type(e).__name__}: {e}") from e

    def _answer(self, conn: http.client.HTTPConnection) -> tuple[int, Message, bytes]:
        resp = conn.getresponse()
        raw = resp.read()
        if resp.will_close:
            conn.close()
        else:
            self._give(conn)
        return resp.status, resp.headers, _decoded(raw, resp.headers.get("content-encoding"))

    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._connect(), False
            if conn.sock is not None and not _readable(conn.sock):
                return conn, True
            conn.close()  # an idle connection with something to read has been closed by the server

    def _give(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(conn)
                return
        conn.close()

    def _connect(self) -> http.client.HTTPConnection:
        s = self.shape
        assert s is not None
        if self._tls is not None:
            return _HTTPS(s.host, s.port, timeout=self.timeout, context=self._tls)
        return _HTTP(s.host, s.port, timeout=self.timeout)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            with suppress(OSError):
                conn.close()


def _readable(sock: socket.socket) -> bool:
    return fd_ready(sock.fileno(), 0)


def _no_delay(sock: socket.socket) -> None:
    # As httpcore does: a body of several segments goes out without waiting on Nagle's timer.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _HTTP(http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()
        _no_delay(self.sock)


class _HTTPS(http.client.HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        _no_delay(self.sock)


_DECODERS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": lambda b: zlib.decompress(b, 16 + zlib.MAX_WBITS),
    "deflate": lambda b: zlib.decompress(b) if b[:1] == b"\x78" else zlib.decompress(b, -zlib.MAX_WBITS),
    "identity": lambda b: b,
}


def _decoded(content: bytes, encoding: str | None) -> bytes:
    """The body as httpx would hand it over: the SDK's accept-encoding asks for gzip or deflate."""
    if not encoding:
        return content
    for name in reversed([e.strip().lower() for e in encoding.split(",") if e.strip()]):
        decode = _DECODERS.get(name)
        if decode is None:
            raise ProviderError(
                "transient", f"malformed response: content-encoding {name!r} was not asked for"
            )
        try:
            content = decode(content)
        except zlib.error as e:
            raise ProviderError("transient", f"malformed response: bad {name} body: {e}") from e
    return content


def _status_error(status: int, headers: Message, content: bytes) -> ProviderError:
    """The SDKs' own wording (`Error code: 429 - {...}`) and the body they would keep, classified."""
    text = content.decode("utf-8", "replace").strip()
    body: Any = text
    try:
        body = orjson.loads(text)
        message = f"Error code: {status} - {body}"
    except orjson.JSONDecodeError:
        message = text or f"Error code: {status}"
    return classify_status(status, message, headers, body)
