"""What every object store's reads share: an object version (``RemoteObject``), the error
when it changed (``RemoteObjectChangedError``), the URL forms read here (``handles``,
``split_url``), the counters (``STATS``) and the settings (``settings``; set by
``range_reads.configure``).

Why a module of its own: the stores (``s3_objects``, ``gcs_objects``, ``azure_objects``)
and the range reads over them (``range_reads``) all need these, and none of them should
need another store to get them. It imports nothing of ours but ``tfrecord_io.errors``.

Pinned versions. A reader reads the version it listed: ``stat`` gives the object's size
and its ETag (S3, Azure) or generation (GCS), and every range read of it asks for that
version (``If-Match: <ETag>``, on S3 the ``Content-Range`` total checked too; on GCS the
generation asked for by number, with ``if_generation_match``). An object that changed
since it was listed is a ``RemoteObjectChangedError`` naming it, never a mix of two
versions; on GCS even a replacement by the same bytes is (a new generation).

``s3://``, ``gs://`` and ``azfs://`` objects are read by range requests
(``handles``); other schemes go through Beam's ``FileSystems`` (the callers decide).
Nothing here imports torch or Beam.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple, Union

from ..errors import TFRecordError, TruncatedRecordError

#: what a range read returns: a view of a receive buffer (or bytes from the cache)
Data = Union[bytes, memoryview]

DEFAULT_BLOCK_SIZE = 1 << 20
DEFAULT_REQUEST_SIZE = 32 << 20
DEFAULT_PARALLEL = 4
DEFAULT_RANDOM_PARALLEL = 16

#: tries of one request by the store's library (on S3 botocore's "standard" retry mode
#: or urllib3's ``Retry``: connection errors, 5xx, throttling such as 503 SlowDown, with
#: exponential backoff and jitter); a body that breaks off after its header is asked for
#: again by ``range_reads._RangeReader``, up to as many times in a row
TRIES = 3


class RemoteObjectChangedError(TFRecordError):
    """An object changed (ETag or size) between listing and reading."""


@dataclass(frozen=True)
class RemoteObject:
    """One object version: the URL, its size and ETag when it was stat'ed."""

    url: str
    size: int
    etag: str

    @property
    def bucket_key(self) -> Tuple[str, str]:
        return split_url(self.url)


@dataclass
class ReadStats:
    """Requests and bytes this process fetched (and cache hits), since ``reset()``."""

    requests: int = 0
    bytes: int = 0
    cache_hits: int = 0
    cache_bytes: int = 0

    def reset(self) -> None:
        self.requests = self.bytes = self.cache_hits = self.cache_bytes = 0


#: this process's counts (for tests and benchmarks), updated under ``_stats_lock`` by the
#: stores and ``range_reads``, which import both by name: changed in place, never rebound
STATS = ReadStats()
_stats_lock = threading.Lock()


@dataclass
class _Settings:
    client_factory: Optional[Callable[[], Any]] = None
    cache_dir: Optional[str] = None
    cache_bytes: int = 0
    parallel: int = DEFAULT_PARALLEL
    block_size: int = DEFAULT_BLOCK_SIZE
    request_size: int = DEFAULT_REQUEST_SIZE
    random_parallel: int = DEFAULT_RANDOM_PARALLEL


#: changed in place, never rebound; other modules read it through ``settings()``
_settings = _Settings()


def settings() -> _Settings:
    """This process's settings (one object, changed in place by ``range_reads.configure``)."""
    return _settings


def is_s3(path: str) -> bool:
    return str(path).startswith("s3://")


def is_gcs(path: str) -> bool:
    return str(path).startswith("gs://")


#: whether ``gs://`` objects are read here (``benchmarks/bench_torch.py --gcs`` turns it
#: off to measure the way before: Beam's ``FileSystems``, unpinned)
_gcs_reads = True


def is_azure(path: str) -> bool:
    """``azfs://account/container/blob`` (Beam's form of an Azure blob's path)."""
    return str(path).startswith("azfs://")


def handles(path: str) -> bool:
    """Whether objects at ``path`` are read by range requests (``range_reads``: ``s3://``,
    ``gs://``, ``azfs://``)."""
    return is_s3(path) or (_gcs_reads and is_gcs(path)) or is_azure(path)


def split_url(url: str) -> Tuple[str, str]:
    """(bucket, key); for ``azfs://account/container/blob``: (container, blob)."""
    scheme, sep, rest = str(url).partition("://")
    if scheme == "azfs":
        rest = rest.partition("/")[2]
    bucket, _, key = rest.partition("/")
    if scheme not in ("s3", "gs", "azfs") or not sep or not bucket or not key:
        raise ValueError(f"{url}: not an s3://bucket/key, gs://bucket/key or azfs://account/container/blob URL")
    return bucket, key


def _check_listed(obj: RemoteObject, listed_size: Optional[int]) -> RemoteObject:
    if listed_size is not None and obj.size != listed_size:
        raise RemoteObjectChangedError(
            f"the object changed after it was listed: it had {listed_size} bytes, now {obj.size}", obj.url
        )
    return obj


def _changed(obj: RemoteObject, start: int) -> RemoteObjectChangedError:
    return RemoteObjectChangedError(
        f"the object changed after it was listed (ETag {obj.etag} no longer matches)", obj.url, start
    )


def _check_version(obj: RemoteObject, start: int, content_range: str, etag: Optional[str]) -> None:
    total = str(content_range or "").rpartition("/")[2]
    if total.isdigit() and int(total) != obj.size:
        raise RemoteObjectChangedError(
            f"the object changed after it was listed: it had {obj.size} bytes, now {total}", obj.url, start
        )
    if obj.etag and etag and etag != obj.etag:
        raise RemoteObjectChangedError(
            f"the object changed after it was listed (ETag {obj.etag}, now {etag})", obj.url, start
        )


class _Sink:
    """A file-like ``write`` target over a buffer (what GCS's ``download_to_file`` and Azure's
    ``readinto`` stream to)."""

    def __init__(self, view: memoryview) -> None:
        self.view, self.got = view, 0

    def write(self, data: Any) -> int:
        n = len(data)
        if self.got + n > len(self.view):
            raise TruncatedRecordError(f"the server sent more than the {len(self.view)} bytes asked for")
        self.view[self.got : self.got + n] = data
        self.got += n
        return n


__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_PARALLEL",
    "DEFAULT_RANDOM_PARALLEL",
    "DEFAULT_REQUEST_SIZE",
    "TRIES",
    "Data",
    "ReadStats",
    "RemoteObject",
    "RemoteObjectChangedError",
    "STATS",
    "handles",
    "is_azure",
    "is_gcs",
    "is_s3",
    "settings",
    "split_url",
]
