"""An instant as the simulated clouds write it in their JSON and XML (S3's LastModified, Bedrock's
submitTime, Cloud Storage's timeCreated, Vertex AI's createTime): RFC 3339 in UTC, to the millisecond, with
a Z."""

from __future__ import annotations

import datetime as dt


def rfc3339(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
