"""The few Amazon S3 calls a Bedrock batch inference job needs, as the simulator serves them: path-style
under `/s3` (the simulator's address stands for `https://s3.{region}.amazonaws.com`).

- `PUT /s3/{bucket}/{key}` (PutObject: its ETag), `GET` and `HEAD` (GetObject, HeadObject: ETag and
  Last-Modified), `DELETE` (DeleteObject: 204, also for a key that is not there), and `GET /s3/{bucket}?
  list-type=2` (ListObjectsV2: prefix, delimiter and CommonPrefixes, max-keys with a continuation token,
  each entry's ETag, LastModified and Size), as the S3 API Reference describes them (read 2026-11-28).
- Each signed with SigV4 for the signing name `s3`: the path signed as sent (S3 alone does not normalize
  it or encode it twice), and `x-amz-content-sha256` required and equal to the body's SHA-256 unless it is
  `UNSIGNED-PAYLOAD` (S3's "Authenticating Requests: Using the Authorization Header"). A Bedrock API key
  opens no bucket.
- Errors as S3 writes them: an XML `<Error>` with its Code and Message (NoSuchKey 404, NoSuchBucket 404
  for a bucket nothing was ever put in, SignatureDoesNotMatch 403, InvalidAccessKeyId 403,
  AuthorizationHeaderMalformed 400, XAmzContentSHA256Mismatch 400, RequestTimeTooSkewed 403).

A bucket exists once something was put in it (objects.py): Bedrock's batch
service reads its input from here and writes its output here (bedrock_batches.py).
"""

from __future__ import annotations

import hashlib
import uuid
from email.utils import formatdate
from xml.sax.saxutils import escape

from aiohttp import web

from runner.models.sim import sigv4
from runner.models.sim.instants import rfc3339
from runner.models.sim.objects import Objects

UNSIGNED = "UNSIGNED-PAYLOAD"
PREFIX = "/s3"
# the Bedrock-worded refusals of sigv4.py, as S3 words them
_CODES = {
    "IncompleteSignature": ("AuthorizationHeaderMalformed", 400),
    "UnrecognizedClientException": ("InvalidAccessKeyId", 403),
    "InvalidSignatureException": ("SignatureDoesNotMatch", 403),
    "RequestExpired": ("RequestTimeTooSkewed", 403),
}


def error(code: str, status: int, message: str, resource: str = "") -> web.Response:
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{escape(message)}'
        f"</Message><Resource>{escape(resource)}</Resource><RequestId>{uuid.uuid4().hex[:16].upper()}"
        "</RequestId></Error>"
    )
    return web.Response(status=status, body=body.encode(), content_type="application/xml")


async def _refused(request: web.Request) -> web.Response | None:
    """S3's answer to a request it does not take as signed; None for one it does."""
    headers = sigv4.joined(request.headers)
    body = await request.read()
    bad = sigv4.check(headers, service="s3")
    if bad is None and "x-amz-content-sha256" not in headers:
        return error("InvalidRequest", 400, "Missing required header for this request: x-amz-content-sha256")
    claimed = headers.get("x-amz-content-sha256", "")
    if bad is None and claimed != UNSIGNED and claimed != hashlib.sha256(body).hexdigest():
        return error(
            "XAmzContentSHA256Mismatch",
            400,
            "The provided 'x-amz-content-sha256' header does not match what was computed.",
        )
    bad = bad or sigv4.verify(
        request.method,
        request.rel_url.raw_path,
        request.rel_url.raw_query_string,
        headers,
        body,
        request.app["state"].settings.aws_keys,
        service="s3",
    )
    if bad is None:
        return None
    code, status = _CODES.get(bad.type, ("AccessDenied", 403))
    return error(code, status, bad.message, request.path)


def _objects(request: web.Request) -> Objects:
    objects: Objects = request.app["s3"]
    return objects


async def put_object(request: web.Request) -> web.Response:
    if (bad := await _refused(request)) is not None:
        return bad
    etag = _objects(request).put(
        request.match_info["bucket"], request.match_info["key"], await request.read()
    )
    return web.Response(status=200, headers={"ETag": etag})


async def get_object(request: web.Request) -> web.Response:
    if (bad := await _refused(request)) is not None:
        return bad
    bucket, key = request.match_info["bucket"], request.match_info["key"]
    found = _objects(request).object(bucket, key)
    if found is None:
        if bucket not in _objects(request).buckets():
            return error("NoSuchBucket", 404, "The specified bucket does not exist", f"/{bucket}")
        return error("NoSuchKey", 404, "The specified key does not exist.", f"/{bucket}/{key}")
    return web.Response(
        body=found.body,
        content_type="application/octet-stream",  # HEAD too: aiohttp's GET route
        headers={"ETag": found.etag, "Last-Modified": formatdate(found.at, usegmt=True)},
    )


async def delete_object(request: web.Request) -> web.Response:
    if (bad := await _refused(request)) is not None:
        return bad
    _objects(request).delete(request.match_info["bucket"], request.match_info["key"])
    return web.Response(status=204)


async def list_objects(request: web.Request) -> web.Response:
    if (bad := await _refused(request)) is not None:
        return bad
    q, bucket = request.query, request.match_info["bucket"]
    objects = _objects(request)
    if bucket not in objects.buckets():
        return error("NoSuchBucket", 404, "The specified bucket does not exist", f"/{bucket}")
    prefix, delimiter = q.get("prefix", ""), q.get("delimiter", "")
    try:
        most = int(q.get("max-keys", "1000"))
    except ValueError:
        return error("InvalidArgument", 400, "Provided max-keys not an integer or within integer range")
    after = q.get("continuation-token") or q.get("start-after") or ""
    entries = objects.entries(bucket, prefix, delimiter, after)
    page, truncated = entries[: max(0, min(most, 1000))], len(entries) > max(0, min(most, 1000))
    contents = "".join(
        f"<Contents><Key>{escape(k)}</Key><LastModified>{rfc3339(o.at)}</LastModified>"
        f"<ETag>{escape(o.etag)}</ETag>"
        f"<Size>{len(o.body)}</Size><StorageClass>STANDARD</StorageClass></Contents>"
        for k, common in page
        if not common and (o := objects.stored[(bucket, k)])
    )
    commons = "".join(
        f"<CommonPrefixes><Prefix>{escape(k)}</Prefix></CommonPrefixes>" for k, common in page if common
    )
    more = (
        f"<NextContinuationToken>{escape(page[-1][0])}</NextContinuationToken>" if truncated and page else ""
    )
    given = (
        f"<ContinuationToken>{escape(q['continuation-token'])}</ContinuationToken>"
        if "continuation-token" in q
        else ""
    )
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/'
        f'2006-03-01/"><Name>{escape(bucket)}</Name><Prefix>{escape(prefix)}</Prefix>'
        f"{f'<Delimiter>{escape(delimiter)}</Delimiter>' if delimiter else ''}"
        f"<KeyCount>{len(page)}</KeyCount>"
        f"<MaxKeys>{most}</MaxKeys><IsTruncated>{'true' if truncated else 'false'}</IsTruncated>{given}{more}"
        f"{contents}{commons}</ListBucketResult>"
    )
    return web.Response(body=body.encode(), content_type="application/xml")


def parse_uri(uri: str) -> tuple[str, str] | None:
    """`s3://bucket/key-or-prefix` as (bucket, key); None for anything else."""
    if not uri.startswith("s3://"):
        return None
    bucket, _, key = uri[5:].partition("/")
    return (bucket, key) if bucket else None


def add_routes(app: web.Application) -> None:
    app["s3"] = Objects()
    app.add_routes(
        [
            web.get(PREFIX + "/{bucket}", list_objects),
            web.put(PREFIX + "/{bucket}/{key:.+}", put_object),
            web.get(PREFIX + "/{bucket}/{key:.+}", get_object),
            web.delete(PREFIX + "/{bucket}/{key:.+}", delete_object),
        ]
    )
