"""The simulated clouds' object stores (S3 for Bedrock's batch inference, Cloud Storage for Vertex AI's batch
prediction): (bucket, key) -> bytes, kept as long as the simulator runs. A bucket exists once something was
put in it: the accounts' buckets are not modelled.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Stored:
    """One object: its bytes, its ETag (its MD5, as S3's for a single PUT) and when it was put."""

    body: bytes
    etag: str
    at: float  # epoch seconds


class Objects:
    """The simulator's buckets: (bucket, key) -> the object stored there."""

    def __init__(self) -> None:
        self.stored: dict[tuple[str, str], Stored] = {}
        self.made: set[str] = set()  # a bucket stays once made, emptied or not

    def buckets(self) -> set[str]:
        return self.made

    def put(self, bucket: str, key: str, body: bytes) -> str:
        self.made.add(bucket)
        etag = f'"{hashlib.md5(body).hexdigest()}"'  # S3's ETag of a single PUT: the MD5
        self.stored[(bucket, key)] = Stored(body, etag, time.time())
        return etag

    def object(self, bucket: str, key: str) -> Stored | None:
        return self.stored.get((bucket, key))

    def get(self, bucket: str, key: str) -> bytes | None:
        found = self.stored.get((bucket, key))
        return found.body if found else None

    def delete(self, bucket: str, key: str) -> None:
        self.stored.pop((bucket, key), None)

    def listed(self, bucket: str, prefix: str) -> list[str]:
        return sorted(k for b, k in self.stored if b == bucket and k.startswith(prefix))
