"""The simulated clouds' object stores (S3 for Bedrock's batch inference, Cloud Storage for Vertex AI's batch
prediction): (bucket, key) -> bytes, kept as long as the simulator runs. A bucket exists once something was
put in it: the accounts' buckets are not modelled.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import time
from dataclasses import dataclass
from typing import Any


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1  # Castagnoli's polynomial, reflected
        table.append(c)
    return table


_TABLE = _crc32c_table()


@functools.cache
def _fast_crc32c() -> Any:
    """google-crc32c's C implementation (a dependency): imported once, when a checksum is first asked for."""
    try:
        import google_crc32c

        return google_crc32c.value
    except ImportError:
        return None


def crc32c(data: bytes) -> int:
    """CRC-32C, as Cloud Storage checksums an object (in pure Python where google-crc32c is missing: slow
    on a batch's megabytes)."""
    if (fast := _fast_crc32c()) is not None:
        return int(fast(data))
    c = 0xFFFFFFFF
    for byte in data:
        c = _TABLE[(c ^ byte) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


@dataclass(frozen=True)
class Stored:
    """One object: its bytes, its ETag (its MD5, as S3's for a single PUT) and when it was put."""

    body: bytes
    etag: str
    at: float  # epoch seconds
    content_type: str = "application/octet-stream"  # as the upload said

    @property
    def md5(self) -> str:
        """Cloud Storage's `md5Hash`: the MD5 the ETag already holds (its hex), base64."""
        return base64.b64encode(bytes.fromhex(self.etag.strip('"'))).decode()

    @functools.cached_property
    def crc32c(self) -> str:
        """Cloud Storage's `crc32c`: the CRC-32C, big-endian, base64 (computed once, when first asked)."""
        return base64.b64encode(crc32c(self.body).to_bytes(4, "big")).decode()


class Objects:
    """The simulator's buckets: (bucket, key) -> the object stored there."""

    def __init__(self) -> None:
        self.stored: dict[tuple[str, str], Stored] = {}
        self.made: set[str] = set()  # a bucket stays once made, emptied or not

    def buckets(self) -> set[str]:
        return self.made

    def put(self, bucket: str, key: str, body: bytes, content_type: str = "application/octet-stream") -> str:
        self.made.add(bucket)
        etag = f'"{hashlib.md5(body).hexdigest()}"'  # S3's ETag of a single PUT: the MD5
        self.stored[(bucket, key)] = Stored(body, etag, time.time(), content_type)
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

    def entries(self, bucket: str, prefix: str, delimiter: str, after: str) -> list[tuple[str, bool]]:
        """What a listing shows past `after`, in key order, each once: (a key, False), or (a common prefix
        that ends at the delimiter, True), as S3's ListObjectsV2 and Cloud Storage's objects.list group
        them."""
        entries: list[tuple[str, bool]] = []
        for key in self.listed(bucket, prefix):
            cut = key.find(delimiter, len(prefix)) if delimiter else -1
            entry = (key[: cut + len(delimiter)], True) if cut >= 0 else (key, False)
            if entry[0] > after and (not entries or entries[-1] != entry):
                entries.append(entry)
        return entries
