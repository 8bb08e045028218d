"""The few Google Cloud Storage calls a Vertex AI batch prediction job needs, as the simulator serves them:
the JSON API's paths (the simulator's address stands for `https://storage.googleapis.com`), as the JSON API
reference describes them (cloud.google.com/storage/docs/json_api/v1/objects, read 2026-11-29).

- `POST /upload/storage/v1/b/{bucket}/o?uploadType=media&name={object}` (the body is the object) and
  `uploadType=multipart` (a `multipart/related` body: the object's metadata as JSON, then its bytes, as
  google-cloud-storage sends a small upload): the Object resource.
- `GET /storage/v1/b/{bucket}/o/{object}`: the Object resource; with `alt=media` (also under
  `/download/storage/v1/...`, the client's media link) the object's bytes. The object's name is one
  percent-encoded path segment (`/` as `%2F`).
- `GET /storage/v1/b/{bucket}/o` (objects.list: prefix, delimiter and `prefixes`, maxResults with
  pageToken / nextPageToken; `items` left out when there are none).
- `DELETE /storage/v1/b/{bucket}/o/{object}`: 204 and no body; 404 for an object that is not there.
- An OAuth access token as `Authorization: Bearer`, else 401; errors in the JSON API's envelope,
  `{"error": {"code", "message", "errors": [{"domain", "reason", "message"}]}}` (notFound 404, required 401,
  invalid 400).

A bucket exists once something was put in it (objects.py): Vertex AI's batch service reads its input from
here and writes its output here (vertex_batches.py).
"""

from __future__ import annotations

import base64
import json
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any
from urllib.parse import quote, unquote

from aiohttp import web

from runner.models.sim.instants import rfc3339
from runner.models.sim.objects import Objects, Stored


def error(status: int, reason: str, message: str) -> web.Response:
    body = {
        "error": {
            "code": status,
            "message": message,
            "errors": [{"message": message, "domain": "global", "reason": reason}],
        }
    }
    return web.json_response(body, status=status)


def _unauthenticated(request: web.Request) -> web.Response | None:
    token = request.headers.get("authorization", "")
    if token.startswith("Bearer ") and token[7:].strip():
        return None
    return error(401, "required", "Anonymous caller does not have access to the Google Cloud Storage bucket.")


def _objects(request: web.Request) -> Objects:
    objects: Objects = request.app["gcs"]
    return objects


def _origin(request: web.Request) -> str:
    return str(request.url.origin())


def resource(origin: str, bucket: str, name: str, found: Stored) -> dict[str, Any]:
    """The Object resource, as objects.get and objects.insert answer it (the fields a reader of it uses); its
    links on the host it was asked of (`origin`: storage.googleapis.com's stand-in)."""
    generation = str(int(found.at * 1_000_000))
    link = f"{origin}/storage/v1/b/{bucket}/o/{quote(name, safe='')}"
    return {
        "kind": "storage#object",
        "id": f"{bucket}/{name}/{generation}",
        "selfLink": link,
        "mediaLink": f"{origin}/download/storage/v1/b/{bucket}/o/{quote(name, safe='')}"
        f"?generation={generation}&alt=media",
        "name": name,
        "bucket": bucket,
        "generation": generation,
        "metageneration": "1",
        "contentType": found.content_type,
        "storageClass": "STANDARD",
        "size": str(len(found.body)),  # int64 values are strings in the JSON API
        "md5Hash": found.md5,
        "crc32c": found.crc32c,
        "etag": base64.b64encode(generation.encode()).decode(),
        "timeCreated": rfc3339(found.at),
        "updated": rfc3339(found.at),
    }


def _uploaded(content_type: str, raw: bytes) -> tuple[dict[str, Any], bytes, str] | None:
    """A multipart/related upload's metadata, media and the media part's type; None for a body that is not
    one."""
    if not content_type.startswith("multipart/related"):
        return None
    message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
    parts = list(message.iter_parts()) if message.is_multipart() else []
    payloads = [p for part in parts if isinstance(p := part.get_payload(decode=True), bytes)]
    if len(parts) != 2 or len(payloads) != 2:
        return None
    meta, media = payloads
    try:
        fields = json.loads(meta or b"{}")
    except ValueError:
        return None
    return (fields, media, parts[1].get_content_type()) if isinstance(fields, dict) else None


async def insert(request: web.Request) -> web.Response:
    if (bad := _unauthenticated(request)) is not None:
        return bad
    bucket, q, raw = request.match_info["bucket"], request.query, await request.read()
    kind, sent = q.get("uploadType", ""), request.headers.get("content-type", "")
    if kind == "media":  # the request's Content-Type is the object's
        name, body, media_type = q.get("name", ""), raw, sent or "application/octet-stream"
    elif kind == "multipart":  # the metadata's contentType, else the media part's
        parsed = _uploaded(sent, raw)
        if parsed is None:
            return error(400, "invalid", "Invalid multipart request: a JSON metadata part and a media part")
        meta, body, part_type = parsed
        name, media_type = (
            str(meta.get("name") or q.get("name", "")),
            str(meta.get("contentType") or part_type),
        )
    else:
        return error(
            400, "invalid", f"Invalid upload type: {kind!r} (the simulator takes media and multipart)"
        )
    if not name:
        return error(400, "required", "Required parameter: name")
    objects = _objects(request)
    objects.put(bucket, name, body, media_type)
    found = objects.object(bucket, name)
    assert found is not None
    return web.json_response(resource(_origin(request), bucket, name, found))


def _named(request: web.Request) -> tuple[str, str, Stored | None] | web.Response:
    if (bad := _unauthenticated(request)) is not None:
        return bad
    bucket, name = request.match_info["bucket"], unquote(request.match_info["name"])
    found = _objects(request).object(bucket, name)
    if found is None:
        if bucket not in _objects(request).buckets():
            return error(404, "notFound", "The specified bucket does not exist.")
        return error(404, "notFound", f"No such object: {bucket}/{name}")
    return bucket, name, found


async def get(request: web.Request) -> web.Response:
    named = _named(request)
    if isinstance(named, web.Response):
        return named
    bucket, name, found = named
    assert found is not None
    if request.query.get("alt") == "media" or request.path.startswith("/download/"):
        return web.Response(body=found.body, content_type="application/octet-stream")
    return web.json_response(resource(_origin(request), bucket, name, found))


async def delete(request: web.Request) -> web.Response:
    named = _named(request)
    if isinstance(named, web.Response):
        return named
    bucket, name, _ = named
    _objects(request).delete(bucket, name)
    return web.Response(status=204)


async def listed(request: web.Request) -> web.Response:
    """Objects in name order, `maxResults` a page (1,000 at most, the default), and the token of the rest."""
    if (bad := _unauthenticated(request)) is not None:
        return bad
    q, bucket, objects = request.query, request.match_info["bucket"], _objects(request)
    if bucket not in objects.buckets():
        return error(404, "notFound", "The specified bucket does not exist.")
    prefix, delimiter = q.get("prefix", ""), q.get("delimiter", "")
    try:
        most = min(1000, int(q.get("maxResults", "1000")))
    except ValueError:
        return error(400, "invalid", f"Invalid value for maxResults: {q['maxResults']}")
    if most < 1:
        return error(400, "invalid", f"Invalid value for maxResults: {most}")
    after = q.get("pageToken", "")
    entries = objects.entries(bucket, prefix, delimiter, after)
    page = entries[:most]
    origin = _origin(request)
    items = [resource(origin, bucket, n, objects.stored[(bucket, n)]) for n, common in page if not common]
    prefixes = [n for n, common in page if common]
    return web.json_response(
        {
            "kind": "storage#objects",
            **({"items": items} if items else {}),
            **({"prefixes": prefixes} if prefixes else {}),
            **({"nextPageToken": page[-1][0]} if len(entries) > most else {}),
        }
    )


def parse_uri(uri: str) -> tuple[str, str] | None:
    """`gs://bucket/object-or-prefix` as (bucket, name); None for anything else."""
    if not uri.startswith("gs://"):
        return None
    bucket, _, name = uri[5:].partition("/")
    return (bucket, name) if bucket else None


def add_routes(app: web.Application) -> None:
    app["gcs"] = Objects()
    one = "/storage/v1/b/{bucket}/o/{name}"
    app.add_routes(
        [
            web.post("/upload/storage/v1/b/{bucket}/o", insert),
            web.get("/storage/v1/b/{bucket}/o", listed),
            web.get(one, get),
            web.get("/download" + one, get),
            web.delete(one, delete),
        ]
    )
