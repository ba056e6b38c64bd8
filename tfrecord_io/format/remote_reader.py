"""Reading TFRecord objects from S3, GCS and Azure Blob Storage with range requests:
read-ahead, parallel fetches, every byte fetched once, the object pinned to the version
that was listed.

Why not Beam's ``FileSystems.open``: it reads one buffer at a time on one connection,
so a reader waits a round trip per buffer, and nothing notices an object replaced
while it is read. Here a reader knows the byte ranges it will read (from the index, or
"the rest of the object"), keeps ``parallel`` range GETs in flight ahead of the
consumer, and pins each to the version it listed: on S3 and Azure ``If-Match: <ETag>``
(on S3 the ``Content-Range`` total checked too), on GCS the object's generation (asked
for by number, with ``if_generation_match``). An object that changed since it was listed is a
``RemoteObjectChangedError`` naming it, never a mix of two versions; on GCS even a
replacement by the same bytes is (a new generation). Frames are still checked (length,
both CRCs) by the same scanners as local files.

Which requests. A sequential read (an indexed piece: blocks of whole frames of about
``block_size`` bytes; an unindexed or compressed one: consecutive ``block_size``
ranges) asks for runs of consecutive blocks of up to ``request_size`` bytes in one GET
each (GCS, Azure: one GET per block), and reads each response block by block into reused
buffers as the consumer needs them: the memory held is a few blocks per request in
flight (``AHEAD_BLOCKS``), not the whole request. A response that breaks off in the
middle is asked again for the rest (still pinned). An unindexed piece that ends inside
the object reads past its end one block at a time, only as far as its last record
needs. A set of records (a window of a global shuffle) is one request per run of
adjacent frames, ``random_parallel`` of them in flight. ``STATS`` counts requests and
bytes in this process, for tests and benchmarks.

Transport: maintained libraries only, no HTTP or signing of our own.
``s3://``: botocore presigns a GET of each object version once (SigV4, its credential
chain, region, endpoint and bucket addressing; ``stat`` does it, so forked DataLoader
workers inherit the URL) and urllib3 sends the range GETs (keep-alive pool, TLS, retries
with backoff on connection errors, 429 and 5xx such as 503 SlowDown), the body received
into the caller's buffer. botocore's own ``get_object`` costs ~2 ms of CPU per 64 KiB GET here
against ~0.4-0.6 ms, which decides a global shuffle's rate (benchmarks/README.md); it is
used when ``configure(client_factory=...)`` gives a client or a proxy is set in the
environment (botocore's HTTP session honours proxies; ``_Presigned`` does not).
``gs://``: google-cloud-storage (``gcs_clients.storage_client``: one client per
process, anonymous with an emulator in ``STORAGE_EMULATOR_HOST``), its default retries.
``azfs://account/container/blob``: azure-storage-blob (a client per process and account
from ``AZURE_STORAGE_CONNECTION_STRING``, else ``DefaultAzureCredential``), azure-core's
retries.
Refusals (403, no credentials) are ``StorageAccessError`` via ``storage_errors``, never
retried as an outage.

Optional local cache (``configure(cache_dir=..., cache_bytes=...)``): whole
``CACHE_CHUNK`` bytes chunks of an object version (keyed by URL, ETag or generation,
and chunk number) kept as files under ``cache_dir``; the least recently used go once
the total passes ``cache_bytes``. With the cache on, every read goes through whole
chunks: a chunk is fetched once and the next range of a sequential read finds the rest
of it in the cache (a chunk that two readers need at once, e.g. at a shard boundary,
may be fetched by both). Later epochs read from the cache as far as it holds them.

Credentials and endpoint: boto3's usual sources (``AWS_*`` variables,
``AWS_ENDPOINT_URL``, config files, instance roles) for S3; Google's default
credentials for GCS; the connection string or azure-identity for Azure. Other schemes
go through Beam's ``FileSystems`` (the callers decide, by ``handles``). Nothing here
imports torch or Beam.
"""

from __future__ import annotations

import hashlib
import io
import os
import queue
import sys
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Deque, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Type, Union

import numpy as np

from ..errors import StorageAccessError, TFRecordError, TruncatedRecordError
from ..storage import storage_errors

#: what a range read returns: a view of a receive buffer (or bytes from the cache)
Data = Union[bytes, memoryview]

DEFAULT_BLOCK_SIZE = 1 << 20
DEFAULT_REQUEST_SIZE = 32 << 20
DEFAULT_PARALLEL = 4
DEFAULT_RANDOM_PARALLEL = 16
CACHE_CHUNK = 8 << 20

#: blocks a request in flight may hold ahead of the consumer before it waits (TCP's
#: flow control then holds the server back)
AHEAD_BLOCKS = 2

#: seconds a connection waits for the server before the read fails (and is retried)
SOCKET_TIMEOUT = 60.0


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


_settings = _Settings()
_pid = os.getpid()


def configure(
    *,
    client_factory: Optional[Callable[[], Any]] = None,
    cache_dir: Optional[str] = None,
    cache_bytes: Optional[int] = None,
    parallel: Optional[int] = None,
    block_size: Optional[int] = None,
    request_size: Optional[int] = None,
    random_parallel: Optional[int] = None,
) -> None:
    """Set how objects are read in this process (and in DataLoader workers forked or
    spawned after it, which inherit module state when forked; pass the same settings
    through ``worker_init_fn`` with spawn). ``cache_dir=""`` turns the cache off.

    ``parallel``: GETs in flight per sequential reader; ``block_size``: bytes scanned
    (and held in one buffer) at a time; ``request_size``: bytes asked for in one GET of
    a sequential read (rounded to whole blocks); ``random_parallel``: GETs in flight
    for the records of a global-shuffle window."""
    if client_factory is not None:
        _settings.client_factory = client_factory
        reset_client()
    if cache_dir is not None:
        _settings.cache_dir = cache_dir or None
    if cache_bytes is not None:
        if cache_bytes < 0:
            raise ValueError("cache_bytes must be >= 0")
        _settings.cache_bytes = int(cache_bytes)
    for name, value in (
        ("parallel", parallel),
        ("block_size", block_size),
        ("request_size", request_size),
        ("random_parallel", random_parallel),
    ):
        if value is not None:
            if value < 1:
                raise ValueError(f"{name} must be >= 1")
            setattr(_settings, name, int(value))
    if _settings.cache_dir and os.path.isdir(_settings.cache_dir):
        _evict()  # a lowered cap holds from now on


def settings() -> _Settings:
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
    """Whether objects at ``path`` are read by this module (``s3://``, ``gs://``,
    ``azfs://``)."""
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


_client: Any = None
_session: Any = None
_client_lock = threading.Lock()

#: tries of one request by botocore (its "standard" retry mode: connection errors,
#: 5xx, throttling such as 503 SlowDown, with exponential backoff and jitter); a body
#: that breaks off after its header is asked for again by ``_RangeReader``
TRIES = 3


def _config() -> Any:
    """botocore's settings for range reads: the standard retry mode (not the legacy
    default), a connection pool for every GET in flight (read-ahead of several readers
    plus ``random_parallel``), and no checksum of whole responses (a range GET has
    none to check; each frame's CRCs are checked by the scanners)."""
    from botocore.config import Config

    extra: Dict[str, Any] = {}
    if "response_checksum_validation" in Config.OPTION_DEFAULTS:  # botocore >= 1.36
        extra = {"request_checksum_calculation": "when_required", "response_checksum_validation": "when_required"}
    return Config(
        signature_version="s3v4",  # presigned URLs too (botocore's S3 default for those is still SigV2)
        max_pool_connections=64,
        retries={"mode": "standard", "total_max_attempts": TRIES},
        connect_timeout=SOCKET_TIMEOUT,
        read_timeout=SOCKET_TIMEOUT,
        **extra,
    )


#: Beam's S3 flags (``S3Options``) -> boto3 client arguments
_BEAM_S3_ARGS = {
    "s3_endpoint_url": "endpoint_url",
    "s3_access_key_id": "aws_access_key_id",
    "s3_secret_access_key": "aws_secret_access_key",
    "s3_session_token": "aws_session_token",
    "s3_region_name": "region_name",
    "s3_verify": "verify",
}
_client_args: Dict[str, Any] = {}
_job_args_of: Tuple[Any, Dict[str, Any]] = (None, {})  # (the options read, what they gave)


def _job_s3_args() -> Dict[str, Any]:
    """The S3 settings a command was given as Beam flags (``--s3_endpoint_url``,
    ``--s3_access_key_id`` ...), as boto3 client arguments; empty without any.

    Why: a command's Beam reads take these flags (``FileSystems.set_options``), and its
    own ranged reads (``tfrecord-io lookup``'s key-index probe and record, a job's look-ups)
    must reach the same store with the same credentials, not boto3's usual sources only
    (which the machine need not have). Read from the options Beam's filesystems hold in
    this process (:func:`files.filesystem_options`); Beam is not imported here."""
    from ..storage.files import filesystem_options

    global _job_args_of
    options = filesystem_options()
    if options is None:
        return {}
    if options is _job_args_of[0]:  # reading them costs ~4 ms; Beam sets a new object when they change
        return _job_args_of[1]
    try:
        given = options.get_all_options(drop_default=True)
    except Exception:  # noqa: BLE001 - options of another shape: boto3's usual sources
        given = {}
    args = {arg: given[flag] for flag, arg in _BEAM_S3_ARGS.items() if given.get(flag) not in (None, "")}
    if given.get("s3_disable_ssl"):
        args["use_ssl"] = False
    _job_args_of = (options, args)
    return args


def client() -> Any:
    """This process's S3 client: one for all threads (boto3 clients are thread-safe).

    After a fork (a DataLoader worker) a new client is made, so that no pooled
    connection is shared with the parent, but from the parent's boto3 session: the
    session holds the loaded service model and the resolved credentials, so the
    child's client costs ~10 ms instead of the ~0.2-0.5 s of a first one. The
    command's ``--s3_*`` flags, when given, win over boto3's usual sources
    (:func:`_job_s3_args`); a client made before they were set is made again."""
    global _pid, _client, _session, _client_args, _presigned
    with _client_lock:
        if _pid != os.getpid():
            _pid = os.getpid()
            _client = None
        args = _job_s3_args() if _settings.client_factory is None else {}
        if _client is not None and args != _client_args:
            _client, _presigned = None, None
            _signed.clear()  # URLs signed with other settings
        if _client is None:
            if _settings.client_factory is not None:
                _client = _settings.client_factory()
            else:
                if _session is None:
                    import boto3

                    _session = boto3.session.Session()
                _client = _session.client("s3", config=_config(), **args)
            _client_args = args
        return _client


def reset_client() -> None:
    """Forget the client and its session (e.g. after the endpoint or credentials
    changed)."""
    global _client, _session, _presigned
    with _client_lock:
        _client = None
        _session = None
        _presigned = None
        _signed.clear()


def _error_code(err: Exception) -> str:
    response = getattr(err, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def stat(url: str, listed_size: Optional[int] = None) -> RemoteObject:
    """HEAD ``url``: its size and ETag (S3) or generation (GCS); ``listed_size`` (from a
    listing) must match."""
    if is_gcs(url):
        return _check_listed(_gcs_stat(url), listed_size)
    if is_azure(url):
        return _check_listed(_azure_stat(url), listed_size)
    bucket, key = split_url(url)
    try:
        head = client().head_object(Bucket=bucket, Key=key)
    except Exception as err:  # botocore's ClientError: name the object
        storage_errors.raise_access_error(err, url)  # credentials, permissions: StorageAccessError
        code = _error_code(err)
        if code in ("404", "NoSuchKey", "NotFound"):
            _check_bucket(bucket, url)
            raise FileNotFoundError(f"no such object: {url}") from None
        raise TFRecordError(f"cannot stat the object: {err}", url) from err
    obj = _check_listed(RemoteObject(url, int(head["ContentLength"]), str(head.get("ETag", ""))), listed_size)
    if _transport == "presigned" and _settings.client_factory is None and not _proxied():
        _presign(obj)  # here, once: DataLoader workers forked later inherit the URL
    return obj


def _check_listed(obj: RemoteObject, listed_size: Optional[int]) -> RemoteObject:
    if listed_size is not None and obj.size != listed_size:
        raise RemoteObjectChangedError(
            f"the object changed after it was listed: it had {listed_size} bytes, now {obj.size}", obj.url
        )
    return obj


# ---------------------------------------------------------------------- GCS


def _gcs_client() -> Any:
    """This process's google-cloud-storage client (``gcs_clients.storage_client``: one
    per process, so a forked DataLoader worker makes its own; anonymous with an emulator
    in ``STORAGE_EMULATOR_HOST`` or ``TFRECORD_IO_GCS_ANONYMOUS``, else Google's default
    credentials)."""
    from ..storage import gcs_clients

    return gcs_clients.storage_client()


def _gcs_stat(url: str) -> RemoteObject:
    """The object's size and generation (one metadata GET). The generation is what every
    range read of it is pinned to (``if_generation_match``): a replaced object, even by
    one of the same size, is a new generation."""
    bucket, name = split_url(url)
    try:
        blob = _gcs_client().bucket(bucket).get_blob(name)
    except Exception as err:  # google.api_core's errors: name the object
        storage_errors.raise_access_error(err, url)
        raise TFRecordError(f"cannot stat the object: {err}", url) from err
    if blob is None:
        try:
            found = _gcs_client().bucket(bucket).exists()
        except Exception as err:  # noqa: BLE001 - only a missing bucket is told apart here
            storage_errors.raise_access_error(err, url)
            found = True
        if not found:
            raise storage_errors.no_such_bucket(url, "GET of the bucket: HTTP 404")
        raise FileNotFoundError(f"no such object: {url}")
    return RemoteObject(url, int(blob.size or 0), str(blob.generation or ""))


class _GcsBody:
    """Bytes ``[start, end)`` of one generation of a GCS object, read into the caller's
    buffers by google-cloud-storage: one ranged GET per ``readinto`` (``download_to_file``
    into the buffer: no whole-range ``bytes`` made; raw, i.e. the stored bytes, no
    transcoding; no checksum of the part, the frames' CRCs are checked by the scanners;
    the listed generation asked for, with ``if_generation_match``, on every GET; retried
    by the library's default policy on 429/5xx and connection errors, resuming after
    the bytes already received)."""

    def __init__(self, obj: RemoteObject, start: int, end: int) -> None:
        self.obj, self.pos, self.end = obj, start, end
        bucket, name = obj.bucket_key
        # the generation asked for by number too: what is read is that version or nothing
        # (fake-gcs-server ignores ifGenerationMatch on downloads, but has no old
        # generation of a replaced object in a bucket without versioning: 404)
        generation = int(obj.etag) if obj.etag else None
        self.blob = _gcs_client().bucket(bucket).blob(name, generation=generation)

    def readinto(self, view: memoryview) -> int:
        want = min(len(view), self.end - self.pos)
        if want <= 0:
            return 0
        sink = _Sink(view[:want])
        kw: Dict[str, Any] = {"if_generation_match": int(self.obj.etag)} if self.obj.etag else {}
        try:
            self.blob.download_to_file(
                sink, start=self.pos, end=self.pos + want - 1, raw_download=True, checksum=None, **kw
            )
        except Exception as err:  # google.api_core's errors (after its retries)
            raise _gcs_error(err, self.obj, self.pos, self.end) from err
        finally:
            with _stats_lock:
                STATS.requests += 1
        if sink.got != want:
            raise TruncatedRecordError(
                f"range read of bytes {self.pos}-{self.pos + want - 1} returned {sink.got} bytes "
                f"(the object has {self.obj.size})",
                self.obj.url,
                self.pos,
            )
        self.pos += want
        return want

    def close(self) -> None:
        pass


class _Sink:
    """A file-like ``write`` target over a buffer (what ``download_to_file`` streams to)."""

    def __init__(self, view: memoryview) -> None:
        self.view, self.got = view, 0

    def write(self, data: Any) -> int:
        n = len(data)
        if self.got + n > len(self.view):
            raise TruncatedRecordError(f"the server sent more than the {len(self.view)} bytes asked for")
        self.view[self.got : self.got + n] = data
        self.got += n
        return n


def _gcs_error(err: Exception, obj: RemoteObject, start: int, end: int) -> Exception:
    found = storage_errors.access_error(err, obj.url, start)
    if found is not None:  # credentials, permissions: not an outage
        return found
    code = getattr(err, "code", None)
    if code == 412:
        return RemoteObjectChangedError(
            f"the object changed after it was listed (generation {obj.etag} is no longer its current one)",
            obj.url,
            start,
        )
    if code == 404:
        return RemoteObjectChangedError(
            f"the object changed after it was listed (generation {obj.etag} no longer exists: replaced or deleted)",
            obj.url,
            start,
        )
    return TFRecordError(f"range read of bytes {start}-{end - 1} failed: {err}", obj.url, start)


# ---------------------------------------------------------------------- Azure

_azure_clients: Dict[Tuple[int, str, str], Any] = {}


def _azure_blob(url: str) -> Any:
    """azure-storage-blob's client of the blob at ``url``, from this process's service
    client of its account (one per process: a forked worker makes its own, with its own
    connections): ``AZURE_STORAGE_CONNECTION_STRING`` when set (as Beam's ``azfs://``
    filesystem takes it), else ``https://<account>.blob.core.windows.net`` with
    azure-identity's ``DefaultAzureCredential``."""
    account = str(url)[len("azfs://") :].partition("/")[0]
    container, blob = split_url(url)
    conn = os.environ.get("AZURE_STORAGE_CONNECTION_STRING", "")
    key = (os.getpid(), account, conn)
    with _client_lock:
        service = _azure_clients.get(key)
        if service is None:
            try:
                from azure.storage.blob import BlobServiceClient
            except ImportError:
                raise StorageAccessError(
                    "azfs:// needs azure-storage-blob: pip install 'tfrecord-io[azure]'", url
                ) from None
            if conn:
                service = BlobServiceClient.from_connection_string(conn)
            else:
                try:
                    from azure.identity import DefaultAzureCredential
                except ImportError:
                    raise StorageAccessError(
                        "no Azure credentials: set AZURE_STORAGE_CONNECTION_STRING (or install azure-identity "
                        "for DefaultAzureCredential)",
                        url,
                        hint=storage_errors.hint_for(url, "missing"),
                    ) from None
                service = BlobServiceClient(f"https://{account}.blob.core.windows.net", DefaultAzureCredential())
            for k in [k for k in _azure_clients if k[0] != key[0]]:
                del _azure_clients[k]  # a parent's: its connections are not this process's
            _azure_clients[key] = service
    return service.get_blob_client(container, blob)


def _azure_stat(url: str) -> RemoteObject:
    """The blob's size and ETag (one HEAD); every range read is pinned to the ETag."""
    try:
        props = _azure_blob(url).get_blob_properties()
    except StorageAccessError:
        raise
    except Exception as err:  # azure.core's errors: name the object
        storage_errors.raise_access_error(err, url)
        if type(err).__name__ == "ResourceNotFoundError":
            if "ContainerNotFound" in str(getattr(err, "error_code", "") or err):
                raise storage_errors.no_such_bucket(url, "ContainerNotFound") from None
            raise FileNotFoundError(f"no such object: {url}") from None
        raise TFRecordError(f"cannot stat the object: {err}", url) from err
    return RemoteObject(url, int(props.size), str(props.etag or ""))


class _AzureBody:
    """Bytes ``[start, end)`` of one version of a blob, read into the caller's buffers by
    azure-storage-blob: one ranged download per ``readinto`` (``StorageStreamDownloader.
    readinto`` into the buffer), ``If-Match`` on the listed ETag (``match_condition``),
    retried by azure-core's retry policy on connection errors and 5xx."""

    def __init__(self, obj: RemoteObject, start: int, end: int) -> None:
        self.obj, self.pos, self.end = obj, start, end
        self.blob = _azure_blob(obj.url)

    def readinto(self, view: memoryview) -> int:
        from azure.core import MatchConditions

        want = min(len(view), self.end - self.pos)
        if want <= 0:
            return 0
        sink = _Sink(view[:want])
        kw: Dict[str, Any] = {"etag": self.obj.etag, "match_condition": MatchConditions.IfNotModified}
        try:
            self.blob.download_blob(
                offset=self.pos, length=want, max_concurrency=1, **(kw if self.obj.etag else {})
            ).readinto(sink)
        except Exception as err:  # azure.core's errors (after its retries)
            raise _azure_error(err, self.obj, self.pos, self.end) from err
        finally:
            with _stats_lock:
                STATS.requests += 1
        if sink.got != want:
            raise TruncatedRecordError(
                f"range read of bytes {self.pos}-{self.pos + want - 1} returned {sink.got} bytes "
                f"(the object has {self.obj.size})",
                self.obj.url,
                self.pos,
            )
        self.pos += want
        return want

    def close(self) -> None:
        pass


def _azure_error(err: Exception, obj: RemoteObject, start: int, end: int) -> Exception:
    found = storage_errors.access_error(err, obj.url, start)
    if found is not None:  # credentials, permissions: not an outage
        return found
    name = type(err).__name__
    if name == "ResourceModifiedError" or getattr(err, "status_code", None) == 412:
        return _changed(obj, start)
    if name == "ResourceNotFoundError":
        return RemoteObjectChangedError("the object was deleted after it was listed", obj.url, start)
    return TFRecordError(f"range read of bytes {start}-{end - 1} failed: {err}", obj.url, start)


def _check_bucket(bucket: str, url: str) -> None:
    """A HEAD of an object in a missing bucket is a plain 404: raise
    :class:`~tfrecord_io.errors.StorageAccessError` if the bucket is what is missing."""
    try:
        client().head_bucket(Bucket=bucket)
    except Exception as err:  # noqa: BLE001 - only a missing bucket is raised here
        if storage_errors.status_of(err) == 404:
            raise storage_errors.no_such_bucket(url, "HEAD of the bucket: HTTP 404") from None


# ---------------------------------------------------------------------- buffers


class _BufferPool:
    """Receive buffers of ``block_size`` bytes, reused once nothing views them any more.

    Why: a fresh buffer is page-faulted in as the socket fills it: 50-60 us of CPU per
    64 KiB in this VM (15-20 on bare metal), several times what receiving the bytes
    costs; DataLoader workers are new processes each epoch, so the allocator never gets
    to reuse freed blocks for them. Sequential reads take a buffer per block; the
    records of a global-shuffle window are packed into them (``fetch_many``). A buffer
    handed out as a ``memoryview`` is free again when no view of it is alive, which its
    reference count tells (every view holds one reference to it through its managed
    buffer). Buffers are kept up to ``limit_bytes`` in all; past that, fresh ones."""

    def __init__(self, limit_bytes: int = 256 << 20) -> None:
        self.limit_bytes = limit_bytes
        self._buffers: List[bytearray] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()

    @property
    def limit(self) -> int:
        """Buffers kept at most (of the current ``block_size``)."""
        return max(1, self.limit_bytes // _settings.block_size)

    def take(self, size: int) -> memoryview:
        """``size`` bytes: a free pooled buffer when ``POOLED_MIN <= size <= block_size``,
        else a fresh one of exactly that size."""
        block = _settings.block_size
        if size < POOLED_MIN or size > block:
            return memoryview(bytearray(size))
        with self._lock:
            if self._pid != os.getpid():
                self._buffers, self._pid = [], os.getpid()
            for buf in self._buffers:
                # references: the list, the loop variable, getrefcount's argument
                if len(buf) == block and sys.getrefcount(buf) <= 3:
                    return memoryview(buf)[:size]
            self._buffers = [b for b in self._buffers if len(b) == block]  # of an earlier block_size
            buf = bytearray(block)
            if len(self._buffers) < self.limit:
                self._buffers.append(buf)
            return memoryview(buf)[:size]


#: reads smaller than this get buffers of their own (no pool)
POOLED_MIN = 256 << 10

_BUFFERS = _BufferPool()


# ---------------------------------------------------------------------- range reads


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


class _BotoBody:
    """A ``get_object`` body (botocore's ``StreamingBody``) read into the caller's
    buffer. ``StreamingBody.readinto`` (public) hands the buffer to urllib3's
    ``HTTPResponse.readinto``, which receives a piece and copies it in: one copy of
    each byte, as ``read`` would also cost, but no new object per block for the
    consumer to hold."""

    def __init__(self, body: Any) -> None:
        self.body = body

    def readinto(self, view: memoryview) -> int:
        """Fill ``view``: fewer bytes only where the body ended (or broke off: then
        botocore raises, see ``_BODY_ERRORS``)."""
        got = 0
        while got < len(view):
            n = self.body.readinto(view[got:])
            if not n:
                break
            got += n
        return got

    def close(self) -> None:
        self.body.close()


def _body_errors() -> Tuple[Type[Exception], ...]:
    """What a body that breaks off (or stalls) after its header raises: botocore wraps
    urllib3's ``ProtocolError``/``ReadTimeoutError`` (``ResponseStreamingError``,
    ``ReadTimeoutError``) and raises ``IncompleteReadError`` when fewer bytes than
    ``Content-Length`` came; plain socket errors are ``OSError``."""
    import http.client

    import urllib3
    from botocore import exceptions as bex

    return (
        OSError,
        http.client.HTTPException,  # IncompleteRead of the standard library (``_UrllibBody``)
        urllib3.exceptions.HTTPError,  # ProtocolError (IncompleteRead), ReadTimeoutError
        bex.ResponseStreamingError,
        bex.IncompleteReadError,
        bex.ReadTimeoutError,
        bex.HTTPClientError,
    )


#: how S3 range GETs are sent: "presigned" (botocore presigns, urllib3 sends: see
#: ``_Presigned``), or "botocore" (``get_object``: botocore's whole request pipeline,
#: used anyway with ``client_factory`` or a proxy; ~2 ms of CPU per GET, see
#: benchmarks/README.md)
_transport = os.environ.get("TFRECORD_IO_S3_TRANSPORT", "presigned")

#: seconds a presigned URL is reused before it is made again (it is valid for
#: ``PRESIGN_EXPIRES``; remade well before, so that credentials that rotate, e.g. an
#: instance role's, are picked up by botocore's chain within minutes)
PRESIGN_REUSE = 300.0
PRESIGN_EXPIRES = 3600


class _Presigned:
    """Range GETs as botocore-presigned URLs sent by urllib3 (both maintained: botocore
    does the SigV4 signing, credentials chain, region and endpoint and bucket-name
    addressing; urllib3 the connections, keep-alive pool, TLS and retries).

    Why not ``get_object`` for every GET: botocore's request pipeline (event hooks,
    parameter handling, signing, response parsing with its timestamp parser) costs
    ~2 ms of CPU per GET here against ~0.5 ms for a urllib3 GET; a global shuffle is
    one GET per record or so, where that decides the rate (benchmarks/README.md). A
    presigned URL (query-string SigV4, only ``host`` signed) is made once per object
    version, by ``stat`` (forked workers inherit it, ``_signed``), and reused for
    ``PRESIGN_REUSE`` seconds; ``Range`` and ``If-Match`` are unsigned headers, which S3
    honours as on any GET.

    One per process: urllib3's pools hold sockets, never shared with a forked child."""

    def __init__(self) -> None:
        import urllib3

        ca = os.environ.get("AWS_CA_BUNDLE") or None
        if ca is None:
            try:  # as botocore: certifi's bundle when it is installed
                import certifi

                ca = certifi.where()
            except ImportError:
                pass
        self.http = urllib3.PoolManager(
            num_pools=32,
            maxsize=64,
            block=False,
            ca_certs=ca,
            timeout=urllib3.Timeout(connect=SOCKET_TIMEOUT, read=SOCKET_TIMEOUT),
        )
        self.retry = urllib3.Retry(
            total=TRIES - 1,
            status_forcelist=(429, 500, 502, 503, 504),  # throttling (503 SlowDown) and outages
            allowed_methods=None,
            backoff_factor=0.25,
            raise_on_status=False,  # the last answer is returned and mapped below
            raise_on_redirect=False,
            respect_retry_after_header=True,
        )
        self._targets: Dict[str, Tuple[Any, str]] = {}  # presigned URL -> (pool, path)
        self._lock = threading.Lock()

    def target(self, obj: RemoteObject, fresh: bool = False) -> Tuple[Any, str]:
        """(urllib3 pool, path with the signature) of a GET of ``obj``."""
        from urllib.parse import urlsplit

        url = _presign(obj, fresh)
        hit = self._targets.get(url)
        if hit is None:
            parts = urlsplit(url)
            hit = (self.http.connection_from_url(url), parts.path + ("?" + parts.query if parts.query else ""))
            with self._lock:
                if len(self._targets) > 100_000:
                    self._targets.clear()
                self._targets[url] = hit
        return hit

    def get(self, obj: RemoteObject, headers: Dict[str, str]) -> Any:
        """urllib3's response (header read, body not) to a GET of ``obj``; a 403 to a
        reused URL is asked once more with a new one (the credentials it was signed
        with may have expired meanwhile)."""
        for fresh in (False, True):
            pool, path = self.target(obj, fresh)
            resp = pool.urlopen(
                "GET",
                path,
                headers=headers,
                retries=self.retry,
                redirect=False,
                assert_same_host=False,
                preload_content=False,
                decode_content=False,
            )
            if resp.status != 403 or fresh:
                return resp
            resp.drain_conn()
        raise AssertionError("unreachable")


_presigned: Optional[_Presigned] = None
_presigned_pid = 0

#: (object URL, ETag) -> (when made, presigned URL): plain strings, so DataLoader workers
#: forked after ``stat`` (which presigns) inherit them and need no boto3 client of their
#: own (making one costs ~10-30 ms per worker and epoch)
_signed: Dict[Tuple[str, str], Tuple[float, str]] = {}


def _presign(obj: RemoteObject, fresh: bool = False) -> str:
    """The presigned GET URL of ``obj`` made in the last ``PRESIGN_REUSE`` seconds (in
    this process or its parent), else a new one."""
    now = time.monotonic()
    hit = _signed.get((obj.url, obj.etag))
    if hit is not None and not fresh and now - hit[0] < PRESIGN_REUSE:
        return hit[1]
    bucket, key = obj.bucket_key
    url = str(
        client().generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=PRESIGN_EXPIRES)
    )
    if len(_signed) > 100_000:
        _signed.clear()
    _signed[(obj.url, obj.etag)] = (now, url)
    return url


def _presigner() -> _Presigned:
    global _presigned, _presigned_pid
    with _client_lock:
        if _presigned is None or _presigned_pid != os.getpid():
            _presigned, _presigned_pid = _Presigned(), os.getpid()
        return _presigned


_proxy_env: Tuple[int, bool] = (0, False)


def _proxied() -> bool:
    """Whether the environment names a proxy (``HTTPS_PROXY`` etc.): then botocore's own
    HTTP session, which honours it, sends the GETs. Looked up once per process (a scan
    of ``os.environ`` costs ~0.1 ms, per GET it would be a tenth of the GET)."""
    global _proxy_env
    if _proxy_env[0] != os.getpid():
        import urllib.request

        _proxy_env = (os.getpid(), bool(urllib.request.getproxies_environment()))
    return _proxy_env[1]


class _UrllibBody:
    """urllib3's response body received straight into the caller's buffer.

    urllib3's public ``HTTPResponse.readinto`` reads a new ``bytes`` of the size asked
    for and copies it in: for 1 MiB blocks a fresh 1 MiB object per block, page-faulted
    in each time (the cost ``_BufferPool`` exists to avoid; ~25% more CPU per record in
    ``bench_torch.py --s3``). The standard library's ``http.client.HTTPResponse`` under
    it has ``readinto`` receiving into the buffer itself; urllib3 keeps it as ``_fp``
    (not public), so it is used only when it is exactly that and the body is not
    content-encoded (urllib3 would decode it); otherwise urllib3's ``readinto``. Either
    way urllib3 gives the connection back to its pool once the body is read to its end
    (``release_conn``) and closes it otherwise (``close``)."""

    def __init__(self, resp: Any) -> None:
        import http.client

        self.resp = resp
        raw = getattr(resp, "_fp", None)
        plain = not resp.headers.get("content-encoding")
        self.src: Any = raw if plain and isinstance(raw, http.client.HTTPResponse) else resp

    def readinto(self, view: memoryview) -> int:
        """Fill ``view``: fewer bytes only where the body ended or broke off (the
        standard library returns 0 at a premature end; urllib3 raises)."""
        got = 0
        while got < len(view):
            n = self.src.readinto(view[got:])
            if not n:
                break
            got += n
        return got

    def close(self) -> None:
        if self.src is not self.resp and self.src.isclosed():  # read to its end (http.client closed it)
            self.resp.release_conn()
            return
        self.resp.close()  # not read to its end: the connection cannot be reused
        self.resp.release_conn()


def _open(obj: RemoteObject, start: int, end: int) -> Any:
    """A GET of bytes ``[start, end)`` of this version of the object (``If-Match`` on the
    listed ETag), its status, size and version checked; the body is still to be read.

    botocore retries a request that fails before its header (connection errors, 5xx,
    throttling) up to ``TRIES`` times with backoff; what still fails is an error naming
    the object. Refusals (403, expired credentials) are ``StorageAccessError``s, never
    retried as an outage; 412 (``If-Match``) and 404 mean the listed version is gone."""
    if is_gcs(obj.url):
        return _GcsBody(obj, start, end)  # counts its requests itself: one per block
    if is_azure(obj.url):
        return _AzureBody(obj, start, end)  # likewise
    bucket, key = obj.bucket_key
    rng = f"bytes={start}-{end - 1}"
    transport = _transport
    if transport == "presigned" and (_settings.client_factory is not None or _proxied()):
        transport = "botocore"
    if transport == "presigned":
        headers = {"Range": rng}
        if obj.etag:
            headers["If-Match"] = obj.etag
        try:
            resp = _presigner().get(obj, headers)
        except Exception as err:  # urllib3's errors after its retries, botocore's when presigning
            storage_errors.raise_access_error(err, obj.url)  # no credentials: not an outage
            raise TFRecordError(f"range read of bytes {start}-{end - 1} failed: {err}", obj.url, start) from err
        if resp.status not in (200, 206):
            try:
                text = resp.read(300).decode("utf-8", "replace")
            except Exception:  # noqa: BLE001 - the status says enough
                text = ""
            resp.close()
            resp.release_conn()
            if resp.status == 412:
                raise _changed(obj, start)
            if resp.status == 404:
                raise RemoteObjectChangedError("the object was deleted after it was listed", obj.url, start)
            refused = storage_errors.access_error_from_status(resp.status, text, obj.url, start)
            if refused is not None:  # credentials expired or revoked mid-read: not retried
                raise refused
            raise TFRecordError(f"range read of bytes {start}-{end - 1}: HTTP {resp.status}: {text}", obj.url, start)
        body: Any = _UrllibBody(resp)
        try:
            _check_version(obj, start, resp.headers.get("content-range", ""), resp.headers.get("etag"))
        except RemoteObjectChangedError:
            body.close()
            raise
        length = resp.headers.get("content-length")
    else:  # botocore's get_object
        args: Dict[str, Any] = {"Bucket": bucket, "Key": key, "Range": rng}
        if obj.etag:
            args["IfMatch"] = obj.etag
        try:
            response = client().get_object(**args)
        except Exception as err:  # botocore's ClientError, or its connection errors after the retries
            storage_errors.raise_access_error(err, obj.url)
            code = _error_code(err)
            if code in ("412", "PreconditionFailed"):
                raise _changed(obj, start) from None
            if code in ("404", "NoSuchKey", "NotFound"):
                raise RemoteObjectChangedError("the object was deleted after it was listed", obj.url, start) from None
            raise TFRecordError(f"range read of bytes {start}-{end - 1} failed: {err}", obj.url, start) from err
        body = _BotoBody(response["Body"])
        try:
            _check_version(obj, start, str(response.get("ContentRange", "")), response.get("ETag"))
        except RemoteObjectChangedError:
            body.close()
            raise
        length = response.get("ContentLength")
    if length is not None and int(length) != end - start:
        body.close()
        raise TruncatedRecordError(
            f"range read of bytes {start}-{end - 1} returned {length} bytes (the object has {obj.size})",
            obj.url,
            start,
        )
    with _stats_lock:
        STATS.requests += 1
    return body


class _RangeReader:
    """Bytes ``[start, end)`` of an object, read in order into the caller's buffers by
    one GET (plus one more for the rest whenever the connection breaks off in the
    middle; ``TRIES`` in a row without a byte received is an error)."""

    def __init__(self, obj: RemoteObject, start: int, end: int) -> None:
        self.obj = obj
        self.start, self.pos, self.end = start, start, end
        self._body: Any = None
        self._failures = 0

    def readinto(self, view: memoryview) -> None:
        """Fill ``view`` (at most the bytes left) with the next bytes of the range."""
        got = 0
        while got < len(view):
            if self._body is None:
                self._body = _open(self.obj, self.pos, self.end)
            try:
                n = self._body.readinto(view[got:])
                error: Optional[Exception] = None
            except _body_errors() as err:
                n, error = 0, err
            if n:
                got += n
                self.pos += n
                self._failures = 0
                with _stats_lock:
                    STATS.bytes += n
                continue
            self._drop()  # the body ended early or the connection broke: ask for the rest
            self._failures += 1
            if self._failures >= TRIES:
                what = f"failed ({error})" if error else "ended early"
                raise TruncatedRecordError(
                    f"range read of bytes {self.start}-{self.end - 1} {what} at byte {self.pos}, "
                    f"{TRIES} times in a row (the object has {self.obj.size})",
                    self.obj.url,
                    self.pos,
                ) from error

    def _drop(self) -> None:
        body, self._body = self._body, None
        if body is not None:
            body.close()

    def close(self) -> None:
        self._drop()


def _fetch(obj: RemoteObject, start: int, end: int, out: Optional[memoryview] = None) -> memoryview:
    """Bytes ``[start, end)`` of this version of the object, in ``out`` (or a buffer of
    their own)."""
    if out is None:
        out = memoryview(bytearray(end - start))
    reader = _RangeReader(obj, start, end)
    try:
        reader.readinto(out)
    finally:
        reader.close()
    return out


# ---------------------------------------------------------------------- cache


def _cache_file(obj: RemoteObject, chunk: int) -> str:
    name = hashlib.sha256(f"{obj.url}\0{obj.etag}\0{obj.size}\0{CACHE_CHUNK}".encode()).hexdigest()
    return os.path.join(str(_settings.cache_dir), name[:2], f"{name}.{chunk}")


def _cache_get(obj: RemoteObject, chunk: int, want: int, lo: int, hi: int) -> Optional[bytes]:
    """Bytes ``[lo, hi)`` of a cached chunk of ``want`` bytes (only those: a record of a
    global shuffle reads its own bytes, not the whole chunk), or None."""
    path = _cache_file(obj, chunk)
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size != want:
                return None
            data = os.pread(f.fileno(), hi - lo, lo)
    except OSError:
        return None
    if len(data) != hi - lo:
        return None
    try:
        os.utime(path)  # recently used
    except OSError:
        pass
    with _stats_lock:
        STATS.cache_hits += 1
        STATS.cache_bytes += len(data)
    return data


def _cache_put(obj: RemoteObject, chunk: int, data: Data) -> None:
    path = _cache_file(obj, chunk)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        _evict()
    except OSError:
        pass  # a full or read-only cache never fails a read


def _evict() -> None:
    """Remove least recently used chunks until the cache holds at most ``cache_bytes``."""
    root = str(_settings.cache_dir)
    entries = []
    total = 0
    for dirpath, _, names in os.walk(root):
        for name in names:
            if ".tmp-" in name:
                continue
            path = os.path.join(dirpath, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            entries.append((st.st_mtime, st.st_size, path))
            total += st.st_size
    if total <= _settings.cache_bytes:
        return
    for _, size, path in sorted(entries):
        try:
            os.remove(path)
        except OSError:
            continue
        total -= size
        if total <= _settings.cache_bytes:
            return


_inflight: Dict[Tuple[str, str, int], threading.Event] = {}
_inflight_lock = threading.Lock()


def _cached_chunk(obj: RemoteObject, chunk: int, c0: int, c1: int, lo: int, hi: int) -> Data:
    """Bytes ``[lo, hi)`` of chunk ``chunk`` (bytes ``[c0, c1)`` of the object) from the
    cache, else the chunk fetched once (a concurrent reader of the same chunk waits for
    that fetch instead of making its own) and stored."""
    key = (obj.url, obj.etag, chunk)
    while True:
        cached = _cache_get(obj, chunk, c1 - c0, lo, hi)
        if cached is not None:
            return cached
        with _inflight_lock:
            waiting = _inflight.get(key)
            if waiting is None:
                mine = _inflight[key] = threading.Event()
        if waiting is not None:
            waiting.wait(60)
            continue  # in the cache now (or the fetch failed: try it here)
        try:
            fetched = _fetch(obj, c0, c1)
            _cache_put(obj, chunk, fetched)
            return fetched if (lo, hi) == (0, c1 - c0) else fetched[lo:hi]
        finally:
            with _inflight_lock:
                del _inflight[key]
            mine.set()


def read_range(obj: RemoteObject, start: int, end: int) -> Data:
    """Bytes ``[start, end)`` of ``obj`` in a buffer of their own (through the cache for
    the whole chunks it covers)."""
    if end > obj.size or start < 0 or end < start:
        raise TruncatedRecordError(f"bytes {start}-{end} are not within the object's {obj.size}", obj.url, start)
    if start == end:
        return b""
    if not (_settings.cache_dir and _settings.cache_bytes):
        return _fetch(obj, start, end)
    parts: List[Data] = []
    pos = start
    while pos < end:
        chunk = pos // CACHE_CHUNK
        c0, c1 = chunk * CACHE_CHUNK, min((chunk + 1) * CACHE_CHUNK, obj.size)
        stop = min(end, c1)
        parts.append(_cached_chunk(obj, chunk, c0, c1, pos - c0, stop - c0))
        pos = stop
    return b"".join(parts) if len(parts) > 1 else parts[0]


# ---------------------------------------------------------------------- read-ahead


class _Failed:
    """An error of a producer thread, raised in the consumer where its data would be."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


_END = object()


def _requests(ranges: Iterable[Tuple[int, int]], request_size: int) -> Iterator[List[Tuple[int, int]]]:
    """Runs of consecutive adjacent ranges of up to ``request_size`` bytes (at least one
    range each): what one GET asks for."""
    run: List[Tuple[int, int]] = []
    for a, b in ranges:
        if run and (a != run[-1][1] or b - run[0][0] > request_size):
            yield run
            run = []
        run.append((a, b))
    if run:
        yield run


class _ReadAhead:
    """The bytes of ``ranges`` of one object, in order, fetched ahead of the consumer.

    Up to ``parallel`` threads of its own (not a shared pool: a producer waits while its
    request is ahead of the consumer, and threads shared between two readers read in
    turn could all be waiting for a consumer that waits for the other reader) take
    the GETs in order (``_requests``); each reads its response range by range into
    pooled buffers and queues them, at most ``AHEAD_BLOCKS`` ahead. The consumer takes
    the queues in request order, so what it gets is in ``ranges`` order. With the cache
    on, each range is read by ``read_range`` (whole chunks) instead."""

    def __init__(self, obj: RemoteObject, ranges: Iterable[Tuple[int, int]], parallel: int) -> None:
        self.obj = obj
        self._cached = bool(_settings.cache_dir and _settings.cache_bytes)
        self._requests = _requests(ranges, 0 if self._cached else _settings.request_size)
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._queues: Deque[queue.Queue[Any]] = deque()
        self._current: Optional[queue.Queue[Any]] = None
        self._exhausted = False
        self._closed = False
        self._parallel = max(1, parallel)
        self._threads: List[threading.Thread] = []
        self._start_thread()

    def _start_thread(self) -> None:
        """One more producer (up to ``parallel``): started when a request is taken and
        more may follow, so a piece that is one request costs one thread."""
        t = threading.Thread(target=self._work, name="tfrecord-io-s3-ahead", daemon=True)
        self._threads.append(t)
        t.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                if self._closed or self._exhausted:
                    return
                out: queue.Queue[Any] = queue.Queue(maxsize=AHEAD_BLOCKS)
                try:
                    run = next(self._requests, None)
                except BaseException as err:  # noqa: BLE001 - the ranges generator failed: the consumer raises it
                    run = None
                    out.put(_Failed(err))
                    self._queues.append(out)
                if run is None:
                    self._exhausted = True
                    self._ready.notify_all()
                    return
                self._queues.append(out)
                self._ready.notify_all()
                if len(self._threads) < self._parallel:
                    self._start_thread()
            self._produce(run, out)

    def _produce(self, run: List[Tuple[int, int]], out: queue.Queue[Any]) -> None:
        reader = None if self._cached else _RangeReader(self.obj, run[0][0], run[-1][1])
        try:
            for a, b in run:
                if self._closed:
                    return
                if reader is None:
                    data: Any = read_range(self.obj, a, b)
                else:
                    data = _BUFFERS.take(b - a)
                    reader.readinto(data)
                out.put(data)
            out.put(_END)
        except BaseException as err:  # noqa: BLE001 - handed to the consumer, which raises it
            out.put(_Failed(err))
        finally:
            if reader is not None:
                reader.close()

    def __iter__(self) -> Iterator[Data]:
        while True:
            with self._lock:
                while not self._queues and not self._exhausted:
                    self._ready.wait()
                if not self._queues:
                    return
                current = self._current = self._queues.popleft()
            while True:
                item = current.get()
                if item is _END:
                    break
                if isinstance(item, _Failed):
                    raise item.error
                yield item

    def close(self) -> None:
        """Stop: producers finish the range they are reading and leave (their
        connections are closed, as their responses are not read to the end)."""
        with self._lock:
            self._closed = True
            queues = list(self._queues) + ([self._current] if self._current is not None else [])
        for q in queues:  # a producer waiting to queue a range can do so, then sees _closed
            while True:
                try:
                    q.get_nowait()
                except queue.Empty:
                    break


def fetch_ahead(obj: RemoteObject, ranges: Iterable[Tuple[int, int]], parallel: Optional[int] = None) -> Iterator[Data]:
    """The bytes of each range in order, with up to ``parallel`` GETs in flight ahead of
    the consumer (each asking for a run of adjacent ranges of up to ``request_size``
    bytes), so fetching overlaps with the consumer's work. A yielded view's buffer is
    reused once no view of it is alive."""
    ahead = _ReadAhead(obj, ranges, parallel or _settings.parallel)
    try:
        yield from ahead
    finally:
        ahead.close()


_pool: Optional[ThreadPoolExecutor] = None
_pool_key: Tuple[int, int] = (0, 0)


def _executor() -> ThreadPoolExecutor:
    global _pool, _pool_key
    key = (os.getpid(), _settings.random_parallel)
    if _pool is None or _pool_key != key:  # threads do not survive a fork; a new size
        _pool = ThreadPoolExecutor(max_workers=_settings.random_parallel, thread_name_prefix="tfrecord-io-s3")
        _pool_key = key
    return _pool


def fetch_many(requests: Sequence[Tuple[RemoteObject, int, int]]) -> List[Data]:
    """The bytes of each ``(object, start, end)``, ``random_parallel`` GETs at a time
    (these tasks never wait for a consumer, so one thread pool serves every reader).

    The ranges are packed, in the order given, into pooled ``block_size`` buffers (a
    range larger than a block gets one of its own): a window of a global shuffle is
    thousands of record-sized reads, and fresh memory for each would cost more in page
    faults than the reads themselves. A buffer is reused once none of its ranges' views
    is alive, so a kept record holds at most one block. With the cache on, each range
    is a ``read_range``."""
    for obj, start, end in requests:
        if end > obj.size or start < 0 or end < start:
            raise TruncatedRecordError(f"bytes {start}-{end} are not within the object's {obj.size}", obj.url, start)
    if _settings.cache_dir and _settings.cache_bytes:
        jobs: List[Any] = [(read_range, r) for r in requests]
    else:
        block = _settings.block_size
        jobs, buf, used = [], memoryview(b""), 0
        for obj, start, end in requests:
            size = end - start
            if size > block or size < 1:
                view = memoryview(bytearray(size))
            else:
                if used + size > len(buf):
                    buf, used = _BUFFERS.take(block), 0
                view, used = buf[used : used + size], used + size
            jobs.append((_fetch_into, (obj, start, end, view)))
        del buf
    if len(jobs) == 1:
        fn, args = jobs[0]
        return [fn(*args)]
    return list(_executor().map(lambda job: job[0](*job[1]), jobs))


def _fetch_into(obj: RemoteObject, start: int, end: int, view: memoryview) -> Data:
    return _fetch(obj, start, end, view) if end > start else b""


class RangeStream(io.RawIOBase):
    """A read-only stream over bytes ``[start, object end)`` of an object, in
    ``block_size`` ranges: up to ``stop`` (default: the end) read ahead by
    ``fetch_ahead``, after it one block at a time as asked for (a piece that ends
    inside the object reads past its end only as far as its last record goes). What
    ``FrameStream`` scans for unindexed and compressed objects."""

    def __init__(
        self, obj: RemoteObject, start: int = 0, block_size: Optional[int] = None, stop: Optional[int] = None
    ) -> None:
        super().__init__()
        self._obj = obj
        self._size = block_size or _settings.block_size
        self._stop = obj.size if stop is None else max(start, min(int(stop), obj.size))
        size = self._size
        self._blocks = fetch_ahead(obj, ((a, min(a + size, self._stop)) for a in range(start, self._stop, size)))
        self._next = self._stop  # where reading goes on after the read-ahead part
        self._buf = memoryview(b"")
        self._eof = start >= obj.size

    def readable(self) -> bool:
        return True

    def _refill(self) -> bool:
        nxt = next(self._blocks, None)
        if nxt is None and self._next < self._obj.size:
            a, self._next = self._next, min(self._next + self._size, self._obj.size)
            nxt = read_range(self._obj, a, self._next)
        if nxt is None:
            self._eof = True
            return False
        self._buf = memoryview(nxt)
        return True

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            rest = [bytes(self._buf)]
            self._buf = memoryview(b"")
            while self._refill():
                rest.append(bytes(self._buf))
                self._buf = memoryview(b"")
            return b"".join(rest)
        while not self._buf and not self._eof:
            self._refill()
        out = bytes(self._buf[:size])
        self._buf = self._buf[size:]
        return out

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        close = getattr(self._blocks, "close", None)
        if close is not None:
            close()
        super().close()


def frame_blocks(
    offsets: np.ndarray, sizes: np.ndarray, first: int, last: int, block_size: Optional[int] = None
) -> List[Tuple[int, int, int, int]]:
    """``(start, end, i, j)``: blocks of whole frames ``i .. j-1`` of about ``block_size``
    bytes covering frames ``first .. last-1`` (at least one frame each)."""
    size = block_size or _settings.block_size
    out = []
    ends = offsets[first:last] + sizes[first:last]
    i = first
    while i < last:
        start = int(offsets[i])
        j = max(i + 1, first + int(np.searchsorted(ends, start + size, side="right")))
        j = min(j, last)
        out.append((start, int(ends[j - 1 - first]), i, j))
        i = j
    return out


__all__ = [
    "CACHE_CHUNK",
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_RANDOM_PARALLEL",
    "DEFAULT_REQUEST_SIZE",
    "RangeStream",
    "ReadStats",
    "RemoteObject",
    "RemoteObjectChangedError",
    "STATS",
    "configure",
    "fetch_ahead",
    "fetch_many",
    "frame_blocks",
    "is_s3",
    "read_range",
    "stat",
]


def remote_records(
    obj: RemoteObject,
    start: int = 0,
    end: Optional[int] = None,
    index: Any = None,
    compression: str = "",
    check_crc: bool = True,
) -> Iterator[Tuple[int, memoryview]]:
    """``(offset, data)`` of each record that begins in ``[start, end)`` of an object, as
    ``sharding.read_piece`` gives them for local files (``end=None``: to the end).

    Indexed plain objects: blocks of whole frames, read ahead, scanned with both CRCs
    and checked against the index. Otherwise a ``RangeStream`` from ``start`` scanned
    by ``FrameStream`` (resynchronising when ``start`` is not known to be a boundary);
    a compressed object is decompressed from its first byte (``start`` is then a
    position in the decompressed stream, reached by decompressing up to it).
    """
    from ..storage import files
    from .framing import BAD_DATA_CRC, BAD_LENGTH_CRC, HEADER_SIZE, FrameStream, _scan_frames
    from .random_access import _raise_block_error

    if index is not None and not compression:
        first = index.first_at_or_after(start)
        last = len(index) if end is None else index.first_at_or_after(end)
        if first >= last:
            return
        if int(index.offsets[last - 1] + index.sizes[last - 1]) > obj.size:
            raise TruncatedRecordError(
                f"truncated object: the index gives frames up to byte "
                f"{int(index.offsets[last - 1] + index.sizes[last - 1])} but it has {obj.size}",
                obj.url,
                obj.size,
            )
        blocks = frame_blocks(index.offsets, index.sizes, first, last)
        for (a, b, i, j), buf in zip(blocks, fetch_ahead(obj, ((a, b) for a, b, _, _ in blocks))):
            out: List[int] = []
            pos, status = _scan_frames(buf, 0, b - a, check_crc, out)
            starts = out[0::2]
            expected = (index.offsets[i:j] - a + HEADER_SIZE).tolist()
            if status in (BAD_LENGTH_CRC, BAD_DATA_CRC) or pos != b - a or starts != expected:
                _raise_block_error(obj.url, buf, a, index.offsets[i:j], index.sizes[i:j], starts, expected, check_crc)
            mv = memoryview(buf)
            lengths = out[1::2]
            for k in range(j - i):
                s = starts[k]
                yield a + s - HEADER_SIZE, mv[s : s + lengths[k]]
        return
    if compression:
        raw: Any = RangeStream(obj, 0)
        if compression == files.GZIP:
            raw = files._OwningGzipFile(raw, "rb")
        else:
            raw = files.ZlibReader(raw)
        skipped = 0
        while skipped < start:  # no seeking inside a compressed stream
            got = raw.read(min(start - skipped, 1 << 20))
            if not got:
                return
            skipped += len(got)
        stream = FrameStream(raw, path=obj.url, offset=start, size=None, check_crc=check_crc)
        with raw:
            yield from stream.frames()
        return
    if end is not None and end <= start:
        return
    raw = RangeStream(obj, start, stop=end)
    with raw:
        stream = FrameStream(raw, path=obj.url, offset=start, size=obj.size, check_crc=check_crc)
        if start > 0 and not stream.resync(limit=end):
            return
        yield from stream.frames(stop=end)


__all__ += ["remote_records"]


def read_object(url: str) -> bytes:
    """The whole content of a small object (an index file)."""
    obj = stat(url)
    return bytes(read_range(obj, 0, obj.size)) if obj.size else b""


def _exists(url: str) -> bool:
    try:
        stat(url)
        return True
    except FileNotFoundError:
        return False


def describe(
    path: str, index_path: Optional[str] = None, compression_type: Optional[str] = None
) -> Tuple[Any, RemoteObject]:
    """``sharding.describe_file`` for an ``s3://`` object, by HEAD and GET requests (no
    listing): ``(FileInfo, RemoteObject)``, the object pinned to the ETag it has now.
    ``index_path="auto"`` looks for the index beside it by the usual names."""
    from ..errors import IndexFileError
    from ..storage import files
    from .index import RecordIndex, parse_index
    from .sharding import FileInfo

    kind = files.normalize_compression(compression_type, path)
    obj = stat(path)
    if index_path == "auto":
        index_path = None
        if not kind:
            stem = path.rsplit(".", 1)[0] if "." in path.rsplit("/", 1)[-1] else path
            for candidate in (path + ".index", path + ".idx", stem + ".tfindex", stem + ".index"):
                if candidate != path and _exists(candidate):
                    index_path = candidate
                    break
    index = None
    if index_path:
        if kind:
            raise IndexFileError(f"an index cannot describe a {kind.upper()} file; pass index_path=None for it", path)
        index = parse_index(read_object(index_path), index_path)
        if not index.matches(obj.size):
            raise IndexFileError(
                f"index {index_path} does not describe this object (stale or for another file: it covers "
                f"{index.data_size} bytes in {len(index)} records, the object has {obj.size}); rebuild it",
                path,
            )
    elif obj.size == 0 and not kind:
        index = RecordIndex(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    return FileInfo(path, kind, obj.size, index), obj


__all__ += ["describe", "read_object", "reset_client"]
