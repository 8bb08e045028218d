"""Which SDK failures are worth a retry: the provider's, never our own bugs."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import openai
import pytest

from runner.models.anthropic import AnthropicProvider
from runner.models.base import ProviderError, Request, sdk_errors
from runner.models.openai import OpenAIProvider

# what the server answers 200 with, by the path's first part (a broken proxy, a wrong-shaped body)
BODIES = {"garbled": b'{"id": "msg_1", "content": [tru', "list": b"[1, 2]",
          "shapeless": b'{"id": "msg_1", "content": [{"type": "tool_use"}], "choices": [{"message": 3}]}'}


class _Garbled(BaseHTTPRequestHandler):
    """Answers 200 with a body that says it is JSON and is not, or is not the documented shape."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = BODIES.get(self.path.strip("/").split("/")[0], BODIES["garbled"])
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def garbled_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Garbled)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_malformed_response_body_is_a_transient_provider_error(garbled_url: str) -> None:
    a = anthropic.Anthropic(api_key="k", base_url=garbled_url, max_retries=0)
    with pytest.raises(ProviderError) as e, sdk_errors(anthropic):
        a.messages.create(model="test-model", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert e.value.kind == "transient" and "malformed response" in str(e.value)
    o = openai.OpenAI(api_key="k", base_url=f"{garbled_url}/v1", max_retries=0)
    with pytest.raises(ProviderError) as e, sdk_errors(openai):
        o.chat.completions.create(model="test-model", messages=[{"role": "user", "content": "hi"}])
    assert e.value.kind == "transient"


@pytest.mark.parametrize("body", sorted(BODIES))
@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_our_providers_call_a_body_not_of_the_documented_shape_malformed(garbled_url: str, kind: str,
                                                                          body: str) -> None:
    # The agents read the fields they keep from the SDKs' raw response: a body the typed parse would
    # have choked on, or one missing what they read, is the provider's transient fault, never a crash.
    url = f"{garbled_url}/{body}"
    p = AnthropicProvider("k", base_url=url, timeout=5) if kind == "anthropic" else \
        OpenAIProvider("k", base_url=f"{url}/v1", timeout=5)
    with pytest.raises(ProviderError) as e:
        p.generate(Request("test-model", "s", [{"role": "user", "text": "hi"}], []))
    assert e.value.kind == "transient" and "malformed response" in str(e.value)


@pytest.mark.parametrize("sdk", [anthropic, openai])
def test_a_value_error_of_our_own_is_not_retried_as_a_provider_error(sdk: Any) -> None:
    # Before: every ValueError (a message we converted wrong) became a retried "malformed response".
    with pytest.raises(ValueError, match="bad tool_use block"), sdk_errors(sdk):
        raise ValueError("bad tool_use block")
