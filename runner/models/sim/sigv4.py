"""The form of a Bedrock request's AWS Signature Version 4, checked as bedrock-runtime checks it.

bedrock.auth.sigv4 (aws-sigv4-elements, aws-common-params, botocore-runtime): `Authorization:
AWS4-HMAC-SHA256 Credential={access key}/{YYYYMMDD}/{region}/bedrock/aws4_request, SignedHeaders={names;...},
Signature={64 hex}`, an `X-Amz-Date` of the form YYYYMMDD'T'HHMMSS'Z' whose day is the credential's, and
the signed headers present (host and x-amz-date at least: "the exact SignedHeaders list the service demands
is not documented (host + x-amz-date at least)"). The signing name is `bedrock`, not `bedrock-runtime`.

A signature out of that form is `IncompleteSignature` (400, "The request signature does not conform to AWS
standards.": bedrock.auth_errors.codes, aws-troubleshoot; the fixture's conflict on its status resolves to
400). A request with no Authorization at all has no documented answer (unknown: "Exact Bedrock body/header
for a MISSING signature"): it is answered the same, as a signature that does not conform. A date more than
15 minutes from now is `RequestExpired` (400; bedrock.auth.request_expiry_window, inferred).

Then its value (`verify`), as AWS computes it (IAM User Guide, "Create a signed AWS API request", Signature
Version 4, read 2026-11-28): the canonical request (the method; the path without dot segments or empty ones,
each segment URI-encoded once more, as every service but S3 takes it; the query's parameters encoded and
sorted; each signed header's lowercase name and trimmed value; the signed headers; the SHA-256 of the
body) hashed into the string to sign with the date and scope, signed by the key derived from the secret
through the date, region and service. The secret is the one the simulator's account holds for the access
key (`aws_keys`: the runner's stand-in key, and any a test gives it); a key it does not hold is
`UnrecognizedClientException` (403, "The security token included in the request is invalid."), a signature
that differs `InvalidSignatureException` (403), with the canonical string and the string to sign the service
says it expected (its words, as a caller of Bedrock's runtime quoted them: BerriAI/litellm#14763, whose
canonical path shows the double encoding, `v1%253A0`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote

from aiohttp import web

ALGORITHM = "AWS4-HMAC-SHA256"
SERVICE = "bedrock"
_DATE = re.compile(r"^\d{8}T\d{6}Z$")
_DAY = re.compile(r"^\d{8}$")
_SIGNATURE = re.compile(r"^[0-9a-f]{64}$")
EXPIRY = dt.timedelta(minutes=15)


@dataclass(frozen=True)
class Refusal:
    type: str  # the X-Amzn-Errortype the service names
    status: int
    message: str


def _incomplete(why: str) -> Refusal:
    return Refusal(
        "IncompleteSignature", 400, f"The request signature does not conform to AWS standards. ({why})"
    )


def joined(headers: Any) -> dict[str, str]:
    """A request's headers (a multidict) as `verify` reads them: each lowercase name once, a repeated
    header's values joined by commas."""
    return {name.lower(): ",".join(headers.getall(name)) for name in headers}


def fields(rest: str) -> dict[str, str]:
    """`Credential=...,SignedHeaders=...,Signature=...`, the Authorization header past its algorithm."""
    return dict(p.strip().partition("=")[::2] for p in rest.split(","))


def check(
    headers: Mapping[str, str], now: dt.datetime | None = None, service: str = SERVICE
) -> Refusal | None:
    """None for a well-formed signature (or a Bedrock API key: `Authorization: Bearer`, bedrock.auth.
    bearer_api_key, which S3 does not take); else how bedrock-runtime refuses it (s3.py words it as S3 does).
    `service`: the signing name the scope must hold (`bedrock` for the runtime and the control plane)."""
    auth = headers.get("authorization", "")
    if auth.startswith("Bearer ") and auth[7:].strip() and service == SERVICE:
        return None
    if not auth:
        return _incomplete("no Authorization header")
    algorithm, _, rest = auth.partition(" ")
    if algorithm != ALGORITHM:
        return _incomplete(f"the algorithm is {algorithm!r}, not {ALGORITHM}")
    parts = fields(rest)
    missing = [k for k in ("Credential", "SignedHeaders", "Signature") if not parts.get(k)]
    if missing:
        return _incomplete(f"missing {', '.join(missing)}")
    scope = parts["Credential"].split("/")
    if len(scope) != 5 or scope[3] != service or scope[4] != "aws4_request" or not _DAY.match(scope[1]):
        return _incomplete(
            f"the credential scope is not {{key}}/{{YYYYMMDD}}/{{region}}/{service}/aws4_request"
        )
    if not _SIGNATURE.match(parts["Signature"]):
        return _incomplete("the signature is not 64 hexadecimal digits")
    signed = parts["SignedHeaders"].split(";")
    absent = [h for h in signed if h != h.lower() or headers.get(h) is None]
    if "host" not in signed or "x-amz-date" not in signed or absent:
        return _incomplete("the signed headers must include host and x-amz-date, and be in the request")
    date = headers.get("x-amz-date", "")
    if not _DATE.match(date) or date[:8] != scope[1]:
        return _incomplete("X-Amz-Date is not YYYYMMDD'T'HHMMSS'Z' of the credential's day")
    when = dt.datetime.strptime(date, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
    if abs((now or dt.datetime.now(dt.UTC)) - when) > EXPIRY:
        return Refusal("RequestExpired", 400, "The request is no longer valid due to expired timestamps.")
    return None


def verify(
    method: str,
    raw_path: str,
    query: str,
    headers: Mapping[str, str],
    body: bytes,
    secrets: Mapping[str, str],
    service: str = SERVICE,
) -> Refusal | None:
    """After `check`: None when the signature is the one the key's secret makes of this request (a Bedrock API
    key passes: it holds no signature); else how the service refuses it. `raw_path`: the path as sent, its
    escapes kept; `headers`: each name once (a repeated header's values joined by commas)."""
    auth = headers.get("authorization", "")
    if auth.startswith("Bearer ") and service == SERVICE:
        return None
    parts = fields(auth.partition(" ")[2])
    key, day, region, service, terminal = parts["Credential"].split("/")
    secret = secrets.get(key)
    if secret is None:
        return Refusal(
            "UnrecognizedClientException", 403, "The security token included in the request is invalid."
        )
    signed = parts["SignedHeaders"]
    # S3 signs the path as sent (encoded once, dot segments kept); every other service normalizes and encodes
    path = raw_path if service == "s3" else quote(_normalized(raw_path), safe="/~")
    canonical = "\n".join(
        [
            method.upper(),
            path,
            _query(query),
            "".join(f"{h}:{_trimmed(headers[h])}\n" for h in signed.split(";")),
            signed,
            headers.get("x-amz-content-sha256") or hashlib.sha256(body).hexdigest(),
        ]
    )
    scope = f"{day}/{region}/{service}/{terminal}"
    to_sign = "\n".join(
        [ALGORITHM, headers["x-amz-date"], scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    signing = f"AWS4{secret}".encode()
    for part in (day, region, service, terminal):
        signing = hmac.new(signing, part.encode(), hashlib.sha256).digest()
    if hmac.compare_digest(
        hmac.new(signing, to_sign.encode(), hashlib.sha256).hexdigest(), parts["Signature"]
    ):
        return None
    return Refusal(
        "InvalidSignatureException",
        403,
        "The request signature we calculated does not match the signature you provided. Check your AWS "
        "Secret Access Key and signing method. Consult the service documentation for details.\n\n"
        f"The Canonical String for this request should have been\n'{canonical}'\n\n"
        f"The String-to-Sign should have been\n'{to_sign}'\n",
    )


async def refusal(request: web.Request, service: str = SERVICE) -> Refusal | None:
    """How the service refuses a request's signature (`check`, then `verify` with the account's keys), or
    None when it takes it."""
    headers = joined(request.headers)
    return check(headers, service=service) or verify(
        request.method,
        request.rel_url.raw_path,
        request.rel_url.raw_query_string,
        headers,
        await request.read(),
        request.app["state"].settings.aws_keys,
        service=service,
    )


def _normalized(path: str) -> str:
    """The path as every service but S3 signs it: its dot segments removed (RFC 3986, 5.2.4) and no empty
    segment (`//`), as AWS's canonical request asks; a trailing slash kept, none: `/`."""
    kept: list[str] = []
    for segment in path.split("/"):
        if segment == "..":
            if kept:
                kept.pop()
        elif segment and segment != ".":
            kept.append(segment)
    tail = "/" if path.endswith("/") and kept else ""
    return "/" + "/".join(kept) + tail


def _query(query: str) -> str:
    """Each parameter's name and value URI-encoded (unreserved characters kept), sorted by name, then
    value."""
    pairs = sorted(
        (quote(k, safe="-_.~"), quote(v, safe="-_.~")) for k, v in parse_qsl(query, keep_blank_values=True)
    )
    return "&".join(f"{k}={v}" for k, v in pairs)


def _trimmed(value: str) -> str:
    """A header's value as signed: no spaces around it, each run of spaces inside one space."""
    return " ".join(value.split())
