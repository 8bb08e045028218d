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

The signature's value is not verified: the simulator holds no secret of the key that made it.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass

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
    return Refusal("IncompleteSignature", 400,
                   f"The request signature does not conform to AWS standards. ({why})")


def check(headers: Mapping[str, str], now: dt.datetime | None = None) -> Refusal | None:
    """None for a well-formed signature (or a Bedrock API key: `Authorization: Bearer`, bedrock.auth.
    bearer_api_key); else how bedrock-runtime refuses it."""
    auth = headers.get("authorization", "")
    if auth.startswith("Bearer ") and auth[7:].strip():
        return None
    if not auth:
        return _incomplete("no Authorization header")
    algorithm, _, rest = auth.partition(" ")
    if algorithm != ALGORITHM:
        return _incomplete(f"the algorithm is {algorithm!r}, not {ALGORITHM}")
    parts = dict(p.strip().partition("=")[::2] for p in rest.split(","))
    missing = [k for k in ("Credential", "SignedHeaders", "Signature") if not parts.get(k)]
    if missing:
        return _incomplete(f"missing {', '.join(missing)}")
    scope = parts["Credential"].split("/")
    if len(scope) != 5 or scope[3] != SERVICE or scope[4] != "aws4_request" or not _DAY.match(scope[1]):
        return _incomplete("the credential scope is not {key}/{YYYYMMDD}/{region}/bedrock/aws4_request")
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
