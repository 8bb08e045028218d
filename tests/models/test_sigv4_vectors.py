"""runner.models.sim.sigv4.verify against independent references: the public AWS SigV4 test-suite vectors
(AKIDEXAMPLE, 20150830T123600Z, us-east-1, service 'service') and requests signed by botocore's SigV4Auth
(directly, and through real botocore clients, capturing exactly what goes on the wire)."""

from __future__ import annotations

import datetime as dt
import json
import urllib.parse
from typing import Any
from unittest import mock

import botocore.session
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from runner.models.sim.sigv4 import verify

SUITE_KEY, SUITE_SECRET = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
SUITE = {SUITE_KEY: SUITE_SECRET}
DATE = "20150830T123600Z"
HOST = "example.amazonaws.com"
STS_TOKEN = ("AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfpSPfIeoIYRqTflf"
             "KD8YUuwthAx7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQDYwT7WZ0wq5VSXDvp75YU9HFvlRd8T"
             "x6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+scqKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJ"
             "abIQwj2ICCR/oLxBA==")


def _authz(signed: str, sig: str) -> str:
    return (f"AWS4-HMAC-SHA256 Credential={SUITE_KEY}/20150830/us-east-1/service/aws4_request, "
            f"SignedHeaders={signed}, Signature={sig}")


# (name, method, raw path, raw query, extra headers (lowercase name -> value as a server sees it), body,
#  signed headers, expected signature).  Taken from the AWS SigV4 test suite (.req / .authz files).
# The host and x-amz-date headers are added to every case.
VECTORS: list[tuple[str, str, str, str, dict[str, str], bytes, str, str]] = [
    ("get-vanilla", "GET", "/", "", {}, b"", "host;x-amz-date",
     "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
    ("get-vanilla-empty-query-key", "GET", "/", "Param1=value1", {}, b"", "host;x-amz-date",
     "a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb"),
    ("get-vanilla-query-order-key", "GET", "/", "Param1=value2&Param1=Value1", {}, b"", "host;x-amz-date",
     "eedbc4e291e521cf13422ffca22be7d2eb8146eecf653089df300a15b2382bd1"),
    ("get-vanilla-query-order-key-case", "GET", "/", "Param2=value2&Param1=value1", {}, b"", "host;x-amz-date",
     "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"),
    ("get-vanilla-query-order-value", "GET", "/", "Param1=value2&Param1=value1", {}, b"", "host;x-amz-date",
     "5772eed61e12b33fae39ee5e7012498b51d56abc0abb7c60486157bd471c4694"),
    ("get-vanilla-query-unreserved", "GET", "/",
     "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz="
     "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", {}, b"", "host;x-amz-date",
     "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197"),
    # the .req shows the raw character; on the wire it is percent-encoded (the canonical form is %E1%88%B4=bar)
    ("get-vanilla-utf8-query", "GET", "/", "%E1%88%B4=bar", {}, b"", "host;x-amz-date",
     "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04"),
    ("get-unreserved", "GET", "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", "", {}, b"",
     "host;x-amz-date", "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f"),
    # the suite's path is unencoded and is encoded once into the canonical URI (botocore: quote(path, safe='/~'))
    ("get-utf8", "GET", "/\u1234", "", {}, b"", "host;x-amz-date",
     "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85"),
    ("get-space", "GET", "/example space/", "", {}, b"", "host;x-amz-date",
     "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741"),
    ("get-header-key-duplicate", "GET", "/", "", {"my-header1": "value2,value2,value1"}, b"",
     "host;my-header1;x-amz-date", "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea"),
    ("get-header-value-order", "GET", "/", "", {"my-header1": "value4,value1,value3,value2"}, b"",
     "host;my-header1;x-amz-date", "08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01"),
    ("get-header-value-trim", "GET", "/", "", {"my-header1": " value1", "my-header2": ' "a   b   c"'}, b"",
     "host;my-header1;my-header2;x-amz-date", "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736"),
    ("post-vanilla", "POST", "/", "", {}, b"", "host;x-amz-date",
     "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"),
    ("post-vanilla-query", "POST", "/", "Param1=value1", {}, b"", "host;x-amz-date",
     "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11"),
    ("post-header-key-sort", "POST", "/", "", {"my-header1": "value1"}, b"", "host;my-header1;x-amz-date",
     "c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c"),
    ("post-header-value-case", "POST", "/", "", {"my-header1": "VALUE1"}, b"", "host;my-header1;x-amz-date",
     "cdbc9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d"),
    # content-length is sent but not signed (the suite's .creq lists it, its .authz does not; botocore agrees
    # with the .authz)
    ("post-x-www-form-urlencoded", "POST", "/", "",
     {"content-type": "application/x-www-form-urlencoded", "content-length": "13"}, b"Param1=value1",
     "content-type;host;x-amz-date", "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"),
    ("post-x-www-form-urlencoded-parameters", "POST", "/", "",
     {"content-type": "application/x-www-form-urlencoded; charset=utf8", "content-length": "13"}, b"Param1=value1",
     "content-type;host;x-amz-date", "1a72ec8f64bd914b0e42e42607c7fbce7fb2c7465f63e3092b3b0d39fa77a6fe"),
    ("post-sts-header-before", "POST", "/", "", {"x-amz-security-token": STS_TOKEN}, b"",
     "host;x-amz-date;x-amz-security-token", "85d96828115b5dc0cfc3bd16ad9e210dd772bbebba041836c64533a82be05ead"),
    # the token is sent but left out of SignedHeaders
    ("post-sts-header-after", "POST", "/", "", {"x-amz-security-token": STS_TOKEN}, b"", "host;x-amz-date",
     "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"),
]

# The suite's normalize-path cases: AWS (non-S3) signs the RFC 3986-normalized path with duplicate slashes
# removed; botocore does the same (botocore.utils.remove_dot_segments).
NORMALIZE = [
    ("get-relative", "/example/..", "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
    ("get-relative-relative", "/example1/example2/../..",
     "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
    ("get-slash", "//", "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
    ("get-slash-dot-slash", "/./", "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
    ("get-slash-pointless-dot", "/./example", "ef75d96142cf21edca26f06005da7988e4f8dc83a165a80865db7089db637ec5"),
    ("get-slashes", "//example//", "9a624bd73a37c9a373b5312afbebe7a714a789de108f0bdfe846570885f57e84"),
]


def _suite_headers(extra: dict[str, str], signed: str, sig: str) -> dict[str, str]:
    return {"host": HOST, "x-amz-date": DATE, **extra, "authorization": _authz(signed, sig)}


@pytest.mark.parametrize("name,method,path,query,extra,body,signed,sig", VECTORS, ids=[v[0] for v in VECTORS])
def test_aws_suite_vector(name: str, method: str, path: str, query: str, extra: dict[str, str], body: bytes,
                          signed: str, sig: str) -> None:
    assert verify(method, path, query, _suite_headers(extra, signed, sig), body, SUITE) is None


@pytest.mark.parametrize("name,path,sig", NORMALIZE, ids=[v[0] for v in NORMALIZE])
def test_aws_suite_normalize_path(name: str, path: str, sig: str) -> None:
    assert verify("GET", path, "", _suite_headers({}, "host;x-amz-date", sig), b"", SUITE) is None


def test_suite_vector_wrong_signature_refused() -> None:
    bad = "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf30"
    refusal = verify("GET", "/", "", _suite_headers({}, "host;x-amz-date", bad), b"", SUITE)
    assert refusal is not None and refusal.type == "InvalidSignatureException"


# --- botocore as the reference signer ---------------------------------------------------------------------------

KEY, SECRET, TOKEN = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY", "FQoGZXIvYXdzEXAMPLE//token=="
SECRETS = {KEY: SECRET, "AKIAOTHERKEYEXAMPLE0": "other"}
NOW = dt.datetime(2026, 3, 14, 9, 26, 53)
ENDPOINT = "https://bedrock-runtime.us-east-1.amazonaws.com"
ARN = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-sonnet-4-5-20250929-v1:0"


def _q(s: str) -> str:
    return urllib.parse.quote(s, safe="-_.~")


def _sign(method: str, url: str, headers: dict[str, Any] | list[tuple[str, str]], body: bytes = b"",
          service: str = "bedrock", token: str | None = None,
          secret: str = SECRET) -> tuple[str, str, str, dict[str, str], bytes]:
    """Sign with botocore; return (method, raw path, raw query, lowercase headers as a server sees them, body)."""
    request = AWSRequest(method=method, url=url, data=body)
    for name, value in (headers.items() if isinstance(headers, dict) else headers):
        request.headers[name] = value  # HTTPHeaders: assigning the same name twice keeps both
    with mock.patch("botocore.auth.get_current_datetime", return_value=NOW):
        SigV4Auth(Credentials(KEY, secret, token), service, "us-east-1").add_auth(request)
    parts = urllib.parse.urlsplit(url)
    seen: dict[str, str] = {"host": parts.netloc}
    for name, value in request.headers.items():
        value = value.strip(" \t")  # an HTTP parser drops leading/trailing whitespace of a field value
        seen[name.lower()] = f"{seen[name.lower()]},{value}" if name.lower() in seen else value
    return method, parts.path, parts.query, seen, body


JSON_BODY = json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64,
                        "messages": [{"role": "user", "content": "Héllo ✓"}]}).encode()


def _cases() -> dict[str, tuple[str, str, str, dict[str, str], bytes]]:
    query = "&".join(f"{_q(k)}={_q(v)}" for k, v in [
        ("zeta", "last"), ("Alpha", "a b/c=d"), ("alpha", ""), ("ünï", "ç✓"), ("m", "2"), ("m", "1"), ("empty", "")])
    return {
        "post-json": _sign("POST", f"{ENDPOINT}/model/{_q(ARN)}/invoke", {"Content-Type": "application/json"},
                           JSON_BODY),
        "post-json-service": _sign("POST", f"{ENDPOINT}/model/x/invoke", {"Content-Type": "application/json"},
                                   JSON_BODY, service="service"),
        "get-query-unsorted-encoded": _sign("GET", f"{ENDPOINT}/things?{query}", {}),
        "path-arn-and-unicode": _sign("POST", f"{ENDPOINT}/model/{_q(ARN)}/{_q('café ✓')}/converse-stream",
                                      {"Content-Type": "application/json"}, b"{}"),
        "path-reserved-chars": _sign("GET", f"{ENDPOINT}/a%2Fb/{_q('x+y!*()@$,;')}/%7Etilde", {}),
        "header-whitespace": _sign("POST", f"{ENDPOINT}/model/m/invoke",
                                   {"X-Custom": "  a   b    c  ", "X-Other": "one  two",
                                    "Content-Type": "application/json"},
                                   b"{}"),
        "session-token": _sign("POST", f"{ENDPOINT}/model/m/invoke", {"Content-Type": "application/json"}, JSON_BODY,
                               token=TOKEN),
        "repeated-header": _sign("POST", f"{ENDPOINT}/model/m/invoke",
                                 [("X-Dup", "v1"), ("X-Dup", "v2  x"), ("Content-Type", "application/json")], b"{}"),
        "content-sha256-header": _sign("POST", f"{ENDPOINT}/model/m/invoke",
                                       {"X-Amz-Content-SHA256": "UNSIGNED-PAYLOAD"}, b"anything"),
        "empty-body-get": _sign("GET", f"{ENDPOINT}/", {}),
    }


CASES = _cases()


@pytest.mark.parametrize("case", list(CASES))
def test_botocore_signed_request_verifies(case: str) -> None:
    assert verify(*CASES[case], SECRETS) is None


def test_botocore_signed_double_slash_path() -> None:
    """A base URL ending in '/' joined with '/model/...' gives '//model/...'; botocore signs '/model/...'."""
    assert verify(*_sign("POST", f"{ENDPOINT}//model/m/invoke", {}, b"{}"), SECRETS) is None


def test_authorization_value_is_botocore_shape() -> None:
    auth = CASES["session-token"][3]["authorization"]
    assert auth.startswith(f"AWS4-HMAC-SHA256 Credential={KEY}/20260314/us-east-1/bedrock/aws4_request, ")
    assert "x-amz-security-token" in auth


def _client_capture(service: str, call: str, **kwargs: Any) -> tuple[str, str, str, dict[str, str], bytes]:
    """What a real botocore client puts on the wire (captured at before-send, after signing)."""
    session = botocore.session.get_session()
    client = session.create_client(service, region_name="us-east-1", aws_access_key_id=KEY,
                                   aws_secret_access_key=SECRET, aws_session_token=TOKEN)
    captured: dict[str, Any] = {}

    class Sent(Exception):
        pass

    def before_send(request: Any, **_: Any) -> None:
        captured["request"] = request
        raise Sent

    client.meta.events.register("before-send", before_send)
    with mock.patch("botocore.auth.get_current_datetime", return_value=NOW), pytest.raises(Sent):
        getattr(client, call)(**kwargs)
    request = captured["request"]
    parts = urllib.parse.urlsplit(request.url)
    headers = {k.lower(): (v.decode() if isinstance(v, bytes) else v) for k, v in request.headers.items()}
    headers.setdefault("host", parts.netloc)
    body = request.body or b""
    return request.method, parts.path, parts.query, headers, body if isinstance(body, bytes) else body.encode()


def test_real_bedrock_runtime_client_invoke_model_with_arn() -> None:
    method, path, query, headers, body = _client_capture("bedrock-runtime", "invoke_model", modelId=ARN,
                                                         body=JSON_BODY, contentType="application/json")
    assert "%3A" in path  # the ARN travels percent-encoded in one segment
    assert verify(method, path, query, headers, body, SECRETS) is None


def test_real_bedrock_client_query_params() -> None:
    method, path, query, headers, body = _client_capture(
        "bedrock", "list_foundation_models", byProvider="a b/c=d ✓", byOutputModality="TEXT",
        byInferenceType="ON_DEMAND")
    assert query
    assert verify(method, path, query, headers, body, SECRETS) is None


# --- negative cases ----------------------------------------------------------------------------------------------

def _refusal(method: str, path: str, query: str, headers: dict[str, str], body: bytes,
             secrets: dict[str, str] = SECRETS) -> Any:
    refusal = verify(method, path, query, headers, body, secrets)
    assert refusal is not None
    assert refusal.status == 403
    return refusal


def test_wrong_secret() -> None:
    assert _refusal(*_sign("POST", f"{ENDPOINT}/model/m/invoke", {}, JSON_BODY, secret="not-the-secret")
                    ).type == "InvalidSignatureException"


def test_body_changed_after_signing() -> None:
    method, path, query, headers, _ = CASES["post-json"]
    assert _refusal(method, path, query, headers, JSON_BODY + b" ").type == "InvalidSignatureException"


def test_signed_header_value_changed() -> None:
    method, path, query, headers, body = CASES["header-whitespace"]
    assert _refusal(method, path, query, {**headers, "x-custom": "a b d"}, body).type == "InvalidSignatureException"


def test_session_token_changed() -> None:
    method, path, query, headers, body = CASES["session-token"]
    assert _refusal(method, path, query, {**headers, "x-amz-security-token": TOKEN + "x"}, body
                    ).type == "InvalidSignatureException"


def test_query_param_changed() -> None:
    method, path, query, headers, body = CASES["get-query-unsorted-encoded"]
    assert _refusal(method, path, query.replace("zeta=last", "zeta=lost"), headers, body
                    ).type == "InvalidSignatureException"


def test_query_param_added() -> None:
    method, path, query, headers, body = CASES["get-query-unsorted-encoded"]
    assert _refusal(method, path, query + "&extra=1", headers, body).type == "InvalidSignatureException"


def test_path_changed() -> None:
    method, path, query, headers, body = CASES["path-arn-and-unicode"]
    assert _refusal(method, path.replace("converse-stream", "converse"), query, headers, body
                    ).type == "InvalidSignatureException"


def test_method_changed() -> None:
    _, path, query, headers, body = CASES["post-json"]
    assert _refusal("PUT", path, query, headers, body).type == "InvalidSignatureException"


def test_content_sha256_header_changed() -> None:
    method, path, query, headers, body = CASES["content-sha256-header"]
    assert _refusal(method, path, query, {**headers, "x-amz-content-sha256": "0" * 64}, body
                    ).type == "InvalidSignatureException"


def test_unknown_access_key() -> None:
    method, path, query, headers, body = CASES["post-json"]
    assert _refusal(method, path, query, headers, body, {"AKIAOTHERKEYEXAMPLE0": SECRET}
                    ).type == "UnrecognizedClientException"


def test_service_in_scope_is_part_of_the_signature() -> None:
    method, path, query, headers, body = CASES["post-json"]
    forged = {**headers, "authorization": headers["authorization"].replace("/bedrock/", "/service/")}
    assert _refusal(method, path, query, forged, body).type == "InvalidSignatureException"
