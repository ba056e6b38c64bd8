"""Opening TFRecord files: local or remote paths, plain, GZIP or ZLIB.

Local paths use the operating system directly. Paths with a scheme (``gs://``,
``s3://``, ``hdfs://`` ...) go through Apache Beam's ``FileSystems``, imported only
when such a path is used, so the format core runs without Beam installed.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import os
import sys
import threading
import time
import zlib
from typing import Any, BinaryIO, Dict, Iterator, List, Optional, Set, Tuple, cast

from ..errors import StorageUnavailableError, TFRecordError
from . import storage_errors

PLAIN = ""
GZIP = "gzip"
ZLIB = "zlib"

_SUFFIXES = {".gz": GZIP, ".gzip": GZIP, ".zz": ZLIB, ".zlib": ZLIB, ".deflate": ZLIB}  # .deflate: Beam's DEFLATE


def normalize_compression(compression_type: Optional[str], path: Optional[str] = None) -> str:
    """Map the spellings TensorFlow, Beam and the ``tfrecord`` package use to one of
    ``""``, ``"gzip"``, ``"zlib"``.

    ``None``/``""``/``"NONE"`` mean plain; ``"auto"`` (or ``None`` when ``path`` ends in a
    known suffix such as ``.gz``) detects the type from the file name.
    Beam's ``CompressionTypes`` values are accepted as their string values.
    """
    value = getattr(compression_type, "value", compression_type)  # Beam CompressionTypes
    if value is None or str(value).lower() == "auto":
        if path is not None:
            for suffix, kind in _SUFFIXES.items():
                if str(path).lower().endswith(suffix):
                    return kind
        return PLAIN
    text = str(value).lower()
    if text in ("", "none", "uncompressed", "plain"):
        return PLAIN
    if text in ("gzip", "gz"):
        return GZIP
    if text in ("zlib", "deflate"):
        return ZLIB
    raise ValueError(f"unknown compression_type {compression_type!r}: use None or '' (plain), 'gzip' or 'zlib'")


def compression_suffix(compression_type: Optional[str]) -> str:
    """The file-name suffix written for a compression type: ``""``, ``".gz"`` or ``".zz"``
    (the ones :func:`normalize_compression` reads back)."""
    return {PLAIN: "", GZIP: ".gz", ZLIB: ".zz"}[normalize_compression(compression_type)]


def is_remote(path: str) -> bool:
    """True for ``scheme://`` paths that need Beam's FileSystems."""
    head, sep, _ = str(path).partition("://")
    return bool(sep) and head.isalnum() and len(head) > 1 and head.lower() != "file"


def beam_filesystems():
    """Beam's ``FileSystems``, for remote paths, with this process made ready for them:
    every use of Beam's filesystems in this package goes through here."""
    try:
        from apache_beam.io.filesystems import FileSystems
    except ImportError as err:  # pragma: no cover - Beam is a hard dependency (pyproject.toml)
        raise TFRecordError(
            "remote paths need Apache Beam's FileSystems: pip install apache-beam[gcp|aws|...]"
        ) from err
    from . import gcs_clients, s3_clients, storage_retry

    # Beam retries a failing store for up to ~10 minutes per request, silently: bound
    # it and report it (see tfrecord_io/storage/storage_retry.py).
    storage_retry.install()
    # Beam's S3 filesystem makes a new boto3 session and client per call: one per
    # process instead (see tfrecord_io/storage/s3_clients.py).
    s3_clients.install()
    # Beam's GCS filesystem probes for Google credentials for ~40 s in every process
    # before its first request, even against an emulator: anonymous when asked, missing
    # credentials an error at once (see tfrecord_io/storage/gcs_clients.py).
    gcs_clients.install()
    return FileSystems


def filesystem_options() -> Any:
    """The pipeline options Beam's ``FileSystems`` were given in this process (``--no_auth``
    and the like, for the package's own reads of remote objects), or None when Beam is not
    loaded or none were set. Does not import Beam."""
    module = sys.modules.get("apache_beam.io.filesystems")
    return getattr(getattr(module, "FileSystems", None), "_pipeline_options", None)


def _local(path: str) -> str:
    path = str(path)
    return path[len("file://") :] if path.startswith("file://") else path


@contextlib.contextmanager
def refusals(path: str) -> Iterator[None]:
    """Raise a store's refusal inside the block (missing or refused credentials, no such
    bucket, access denied) as :class:`~tfrecord_io.errors.StorageAccessError` naming
    ``path`` and what to set (:mod:`tfrecord_io.storage.storage_errors`); anything else as it was."""
    try:
        yield
    except Exception as err:
        storage_errors.raise_access_error(err, path)
        raise


_buckets_seen: Set[str] = set()
_buckets_lock = threading.Lock()


def check_bucket(path: str) -> None:
    """Raise :class:`~tfrecord_io.errors.StorageAccessError` if ``path``'s ``s3://``
    bucket does not exist (or may not be used with these credentials).

    Why: Beam's S3 filesystem reads a listing's "no such bucket" (404) as "nothing
    there", and a HEAD of a key in a missing bucket is a plain 404, so a misspelt bucket
    would look like a missing file. Called only when a lookup found nothing; one HEAD
    of the bucket per bucket and process (a bucket found is remembered)."""
    if not str(path).startswith("s3://"):
        return
    bucket = storage_errors.bucket_of(path)
    if not bucket or bucket in _buckets_seen:
        return
    try:
        client, _, _ = _s3_client(path)
    except Exception:  # noqa: BLE001 - a Beam without these internals: nothing to check with
        return
    try:
        client.head_bucket(Bucket=bucket)
    except Exception as err:  # noqa: BLE001 - a missing bucket or a refusal is raised, anything else left to the caller
        status = storage_errors.status_of(err)
        if status == 404:
            raise storage_errors.no_such_bucket(path, f"HEAD of the bucket: HTTP {status}") from None
        storage_errors.raise_access_error(err, path)
        return  # anything else (an outage ...): the caller's own answer stands
    with _buckets_lock:
        _buckets_seen.add(bucket)


def open_raw(path: str, mode: str = "rb") -> BinaryIO:
    """Open the bytes of ``path`` as stored (no decompression)."""
    # The casts here and below: io's file classes are binary files, but not typing.BinaryIO
    # to a type checker.
    if is_remote(path):
        from apache_beam.io.filesystem import CompressionTypes

        fs = beam_filesystems()
        with refusals(path):
            try:
                if "r" in mode:
                    return fs.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
                writer = fs.create(path, compression_type=CompressionTypes.UNCOMPRESSED)
            except FileNotFoundError:
                check_bucket(path)
                raise
        return cast(BinaryIO, _EmptySafeWriter(writer, path))
    return cast(BinaryIO, open(_local(path), mode))


class _EmptySafeWriter(io.RawIOBase):
    """A remote file being written, that may also be written empty.

    Beam 2.62's S3 writer is a multipart upload that uploads no part at all for an empty
    file, and S3 refuses to complete an upload without parts (MalformedXML), so an
    empty shard or index could not be written. On close of an empty file this uploads
    one empty part first (through the writer Beam returned; other filesystems are left
    as they are).
    """

    def __init__(self, inner: BinaryIO, path: str = ""):
        self._inner = inner
        self._path = path
        self._written = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        with refusals(self._path):
            n = self._inner.write(data)
        self._written += len(data) if n is None else n
        return len(data) if n is None else n

    def tell(self) -> int:
        return self._written

    def flush(self) -> None:
        if not self._inner.closed:
            self._inner.flush()

    def close(self) -> None:
        if self.closed:
            return
        try:
            with refusals(self._path):
                if self._written == 0:
                    uploader = getattr(getattr(self._inner, "raw", None), "_uploader", None)
                    if (
                        uploader is not None
                        and hasattr(uploader, "_write_to_s3")
                        and not getattr(uploader, "parts", True)
                    ):
                        uploader._write_to_s3(b"")
                self._inner.close()
        finally:
            super().close()


def _storage_error(err: Exception, path: str = "") -> Exception:
    """The :class:`~tfrecord_io.errors.StorageUnavailableError` (or its
    :class:`~tfrecord_io.errors.StorageAccessError`) inside a ``BeamIOError`` (Beam's
    FileSystems wraps each path's error, and a match's error wraps its listing's), or the
    refusal one of its errors amounts to, else ``err``: a job stopped by an unreachable or
    refusing store says so first, not "exists() operation failed"."""
    details = getattr(err, "exception_details", None) or {}
    for detail in details.values():
        if isinstance(detail, StorageUnavailableError):
            return detail
        inner = _storage_error(detail, path) if isinstance(detail, Exception) else detail
        if isinstance(inner, StorageUnavailableError):
            return inner
    for where, detail in details.items():
        if isinstance(detail, BaseException):
            refused = storage_errors.access_error(detail, str(where) if "://" in str(where) else path)
            if refused is not None:
                return refused
    return err


def _only_missing_blobs(err: Exception) -> bool:
    """Whether a ``BeamIOError`` of ``exists`` says only "the blob does not exist".

    Why: Beam's Azure filesystem (2.62) turns the SDK's ``ResourceNotFoundError`` into its
    own ``BlobStorageError`` before its ``exists`` looks for the former, so ``exists`` of
    a missing ``azfs://`` blob raises instead of answering False."""
    details = list((getattr(err, "exception_details", None) or {}).values())
    return bool(details) and all(
        type(d).__name__ == "BlobStorageError" and getattr(d, "code", None) == 404 for d in details
    )


def match(patterns: List[str]) -> List[Any]:
    """Beam's ``FileSystems.match(patterns)``, with a store's refusal raised as
    :class:`~tfrecord_io.errors.StorageAccessError` (a pattern in a bucket that does not
    exist too, where Beam would answer "no match"). For every direct use of ``match``
    on remote patterns in this package."""
    from apache_beam.io.filesystem import BeamIOError

    try:
        with refusals(patterns[0] if patterns else ""):
            results = beam_filesystems().match(patterns)
    except BeamIOError as err:
        if _storage_error(err, patterns[0] if patterns else "") is not err:
            raise _storage_error(err, patterns[0]) from err
        raise
    for pattern, result in zip(patterns, results):
        if not result.metadata_list:
            check_bucket(pattern)
    return results


def file_size(path: str) -> int:
    """Size in bytes of the stored file."""
    if is_remote(path):
        # Beam's FileSystems has no metadata() (not in 2.62 nor 2.77, the ends of the
        # supported range); match() on the exact path gives it.
        from apache_beam.io.filesystem import BeamIOError

        try:
            with refusals(path):
                found = beam_filesystems().match([path])[0].metadata_list
        except BeamIOError as err:
            if _storage_error(err, path) is not err:
                raise _storage_error(err, path) from err
            raise FileNotFoundError(f"{path}: {err}") from None
        for meta in found:
            if meta.path.rstrip("/") == str(path).rstrip("/"):
                return int(meta.size_in_bytes)
        check_bucket(path)
        raise FileNotFoundError(f"no such file: {path}")
    return os.path.getsize(_local(path))


def exists(path: str) -> bool:
    if is_remote(path):
        from apache_beam.io.filesystem import BeamIOError

        fs = beam_filesystems()
        try:
            with refusals(path):
                found = fs.exists(path)
        except BeamIOError as err:
            if _storage_error(err, path) is not err:
                raise _storage_error(err, path) from err
            if not _only_missing_blobs(err):
                raise
            found = False
        if not found:
            check_bucket(path)
        return found
    return os.path.exists(_local(path))


def glob(pattern: str) -> List[str]:
    """Sorted paths matching ``pattern`` (local glob, or Beam's match for remote)."""
    if is_remote(pattern):
        result = match([pattern])[0]
        return sorted(m.path for m in result.metadata_list)
    import glob as _glob

    return sorted(_glob.glob(_local(pattern)))


def join(base: str, *parts: str) -> str:
    """``base/part/...`` for local paths and URLs alike (URLs always use ``/``)."""
    if is_remote(base):
        return "/".join([str(base).rstrip("/"), *[p.strip("/") for p in parts]])
    return os.path.join(_local(base), *parts)


def check_filesystem(path: str) -> None:
    """Raise ``ValueError`` with one clear line if no filesystem can open ``path``.

    A URL whose scheme Beam has no filesystem for (or whose extra is not installed,
    e.g. ``s3://`` without ``apache-beam[aws]``) would otherwise fail late, or, through
    plain ``open``, silently create a local directory named ``s3:``.
    """
    if "://" in str(path) and not is_remote(path) and not str(path).startswith("file://"):
        raise ValueError(f"{path}: not a path or URL any filesystem here opens")
    if not is_remote(path):
        return
    try:
        beam_filesystems().get_filesystem(path)
    except ValueError as err:
        scheme = str(path).split("://", 1)[0]
        hint = {
            "s3": "apache-beam[aws]",
            "gs": "apache-beam[gcp]",
            "azfs": "tfrecord-io[azure]",
            "hdfs": "apache-beam with --hdfs_host",
        }.get(scheme)
        extra = f" (install {hint})" if hint else ""
        raise ValueError(f"{path}: no filesystem for the {scheme}:// scheme{extra}: {err}") from None


def read_bytes(path: str, max_bytes: Optional[int] = None) -> bytes:
    """The whole stored content of ``path`` (with ``max_bytes``: at most its first
    ``max_bytes + 1`` bytes, enough to tell that it is larger).

    An ``s3://`` object is fetched with one GET (:func:`_s3_object`); Beam's S3 ``open``
    costs a HEAD for the size and then ranged GETs: 3.0 ms of CPU per 30 KB object
    against 1.3 for one GET, measured here, which is most of a build's time over S3
    media."""
    if path.startswith("s3://"):
        data = _s3_object(path, max_bytes)
        if data is not None:
            return data
    with open_raw(path, "rb") as f, refusals(path):
        return f.read() if max_bytes is None else f.read(max_bytes + 1)


def _s3_object(path: str, max_bytes: Optional[int]) -> Optional[bytes]:
    """The object behind ``s3://bucket/key`` in one GET through Beam's S3 client for the
    current options (shared per process: :mod:`tfrecord_io.storage.s3_clients`), or None when
    anything goes wrong: a missing object, an empty one (S3 refuses a range of it), a
    failing store, a Beam without these internals. The caller then reads through Beam's
    ``open``, which reports each of those as it always has (a missing file, the storage
    timeout and its retry notes). A refusal (credentials, permissions, no such bucket) is
    raised at once as :class:`~tfrecord_io.errors.StorageAccessError`."""
    try:
        client, bucket, key = _s3_client(path)
        ranged = {"Range": f"bytes=0-{max_bytes}"} if max_bytes is not None else {}
        body = client.get_object(Bucket=bucket, Key=key, **ranged)["Body"]
        try:
            return body.read()
        finally:
            body.close()
    except Exception as err:  # noqa: BLE001 - any other failure: Beam's open reads it, and names what is wrong
        storage_errors.raise_access_error(err, path)
        return None


def _s3_client(path: str) -> Tuple[Any, str, str]:
    """Beam's boto3 client for the current S3 options (shared per process:
    :mod:`tfrecord_io.storage.s3_clients`), and ``path``'s bucket and key. Raises where Beam lacks
    these internals."""
    from apache_beam.io.aws import s3io

    filesystem = beam_filesystems().get_filesystem(path)
    bucket, key = s3io.parse_s3_path(path)
    return s3io.S3IO(options=filesystem._options).client.client, bucket, key


def s3_folder_client(folder: str) -> Optional[Tuple[Any, str, str]]:
    """``(client, bucket, key prefix ending in /)`` for an ``s3://`` folder (Beam's
    client: :func:`_s3_client`), or None for other schemes or where Beam lacks these
    internals (the caller then uses Beam's match)."""
    if not folder.startswith("s3://"):
        return None
    try:
        return _s3_client(folder.rstrip("/") + "/")
    except Exception:  # noqa: BLE001 - a Beam without these internals, a bucket-only URL: Beam's match
        return None


def put_if_absent(path: str, data: bytes) -> Optional[bool]:
    """Create the object ``path`` holding ``data`` unless it exists: True when created and
    the store vouches that nothing was there, False when something is there (nothing
    written), None when ``data`` was written but the store cannot vouch (last writer
    wins: a caller that must be the only writer waits and reads it back).

    For ``s3://``: a conditional PUT (``If-None-Match: *``), which S3 and servers such as
    versitygw and MinIO honour atomically. A store may ignore the condition, so a first
    PUT is followed by a second that must be refused; when it is not, the store gave
    no promise (None). A store or client that cannot send the condition (an older
    botocore, a server answering 501 Not Implemented) gets a plain write (None). Any
    other failure of the conditional PUT is raised: a plain write after it could
    replace what another writer has just created with the store's promise.

    For ``gs://``: an upload with ``if_generation_match=0`` (GCS's precondition "no live
    object of this name") through google-cloud-storage with the client Beam's GCS
    filesystem makes for the current options (its credentials: ``gcs_clients``); the
    library retries it as a conditional request. Refused (412): False. Other schemes: a
    plain write (None). Local paths: use ``os.open`` with ``O_EXCL``."""
    if path.startswith("s3://"):
        with refusals(path):
            created = _s3_put_if_absent(path, data)
        if created is not None:
            return created
    if path.startswith("gs://"):
        created = _gcs_put_if_absent(path, data)
        if created is not None:
            return created
    write_bytes(path, data)
    return None


def _gcs_put_if_absent(path: str, data: bytes) -> Optional[bool]:
    """:func:`put_if_absent` for ``gs://``; None when Beam lacks the internals used here
    (the caller writes plainly and reads back)."""
    try:
        from apache_beam.io.gcp import gcsio
        from apache_beam.options.pipeline_options import PipelineOptions
        from google.api_core.exceptions import PreconditionFailed

        options = beam_filesystems().get_filesystem(path)._pipeline_options or PipelineOptions([])
        bucket, name = gcsio.parse_gcs_path(path)
        make_client = gcsio.create_storage_client
    except (ImportError, AttributeError):
        return None
    blob = make_client(options).bucket(bucket).blob(name)
    try:
        blob.upload_from_string(data, content_type="application/octet-stream", if_generation_match=0)
    except PreconditionFailed:
        return False
    return True


_S3_EXISTS = ("PreconditionFailed", "412")
_S3_CONFLICT = ("ConditionalRequestConflict", "409")  # another conditional write to the key, under way
_S3_NO_CONDITIONS = ("NotImplemented", "501")


def _s3_put_if_absent(path: str, data: bytes) -> Optional[bool]:
    """:func:`put_if_absent` for ``s3://`` through Beam's S3 client for the current
    options (shared per process: :mod:`tfrecord_io.storage.s3_clients`, with boto3's own
    retries); None when no conditional PUT can be made (the caller writes plainly)."""
    try:
        client, bucket, key = _s3_client(path)
    except Exception:  # noqa: BLE001 - a Beam without these internals: a plain write
        return None

    def put() -> Optional[bool]:
        attempts = 3
        for attempt in range(attempts):
            try:
                client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
                return True
            except Exception as err:
                code = str(getattr(err, "response", {}).get("Error", {}).get("Code", ""))
                if code in _S3_CONFLICT and attempt < attempts - 1:
                    time.sleep(0.2 * (attempt + 1))  # AWS: retry; the other write decides it
                    continue
                if code in _S3_EXISTS or code in _S3_CONFLICT:
                    return False
                if code in _S3_NO_CONDITIONS or type(err).__name__ == "ParamValidationError":
                    return None
                raise
        raise AssertionError("unreachable: the last attempt returns or raises")

    first = put()
    if first is not True:
        return first
    try:  # does the store keep its promise? A second conditional PUT must be refused
        second = put()
    except Exception:  # noqa: BLE001 - no answer: no promise (the caller reads back)
        second = None
    return True if second is False else None


def named_os_error(err: OSError, path: str) -> OSError:
    """``err`` naming ``path`` when it names no file: a write or flush on a full disk
    says only "No space left on device", and a failed job must say which file it was."""
    if err.filename is not None or err.errno is None:
        return err
    return type(err)(err.errno, err.strerror, path)


@contextlib.contextmanager
def errors_named(path: str) -> Iterator[None]:
    """Re-raise an ``OSError`` that names no file as one naming ``path``."""
    try:
        yield
    except OSError as err:
        named = named_os_error(err, path)
        if named is err:
            raise
        raise named from None


def close_quietly(f: Any) -> None:
    """Close ``f`` on an abort path, dropping an ``OSError`` from its last flush: the
    file is removed next, and the write that failed first is the error worth raising
    (on a full disk, closing flushes the buffer and fails again, without a file name)."""
    try:
        f.close()
    except OSError:
        pass


def temp_path_beside(path: str) -> str:
    """A hidden, unique temporary name in ``path``'s directory for a local file that is
    renamed over ``path`` when whole: the rename is atomic (same filesystem), and a
    leftover is never taken for data (dot-files are skipped, a glob such as
    ``data-*.tfrecord`` does not match it)."""
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}.tmp-{os.getpid()}-{os.urandom(4).hex()}")


def write_bytes(path: str, data: bytes, create_dirs: bool = True) -> None:
    """Write ``data`` as the whole content of ``path``, all or nothing: the one atomic
    small-file write (index files, ``tfrecord_io_info.json``, ``LATEST``, reports ...).

    Local: a temporary name beside it (:func:`temp_path_beside`), fsync, rename; the
    temporary file is removed if the write fails. Object stores: one PUT (an object
    becomes visible only once its upload completed). ``create_dirs=False``: a missing
    local directory is an error (FileNotFoundError) instead of being made.
    """
    if is_remote(path):
        with refusals(path), open_raw(path, "wb") as f:
            f.write(data)
        return
    path = _local(path)
    if create_dirs:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = temp_path_beside(path)
    unnamed: Optional[OSError] = None
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if not (isinstance(err, OSError) and err.errno and not err.filename):
            raise
        unnamed = err
    if unnamed is not None:
        # a failed write or fsync says only "No space left on device": name the file
        # (raised outside the handler, so the error's chain ends with the named one)
        raise OSError(unnamed.errno, unnamed.strerror, path)


def delete(paths: List[str]) -> None:
    """Delete files (missing ones are ignored)."""
    if not paths:
        return
    remote = [p for p in paths if is_remote(p)]
    if remote:
        from apache_beam.io.filesystem import BeamIOError

        try:
            with refusals(remote[0]):
                beam_filesystems().delete(remote)
        except BeamIOError as err:
            real = {
                p: e
                for p, e in err.exception_details.items()
                if not isinstance(e, FileNotFoundError) and "404" not in str(e) and "Not Found" not in str(e)
            }
            if real:
                if _storage_error(err, remote[0]) is not err:
                    raise _storage_error(err, remote[0]) from err
                raise
    for p in paths:
        if not is_remote(p):
            try:
                os.remove(_local(p))
            except FileNotFoundError:
                pass


def list_prefix(prefix: str) -> List[str]:
    """Every file under ``prefix`` (a directory or key prefix), sorted."""
    if is_remote(prefix):
        return glob(str(prefix).rstrip("/") + "/**")
    out: List[str] = []
    for dirpath, _dirs, names in os.walk(_local(prefix)):
        out.extend(os.path.join(dirpath, n) for n in names)
    return sorted(out)


def delete_prefix(prefix: str) -> None:
    """Delete everything under ``prefix`` (and, locally, the directory itself)."""
    if is_remote(prefix):
        delete(list_prefix(prefix))
        return
    import shutil

    shutil.rmtree(_local(prefix), ignore_errors=True)


def stat_many(paths: List[str], s3_listings: Any = None) -> Dict[str, Optional[Tuple[int, float]]]:
    """``{path: (size, mtime)}`` for many files, ``None`` for a missing one.

    Remote files are listed per parent prefix (one listing per directory, not one
    request per file), so a manifest of many files in few folders stays cheap; on S3
    only the part of the folder around the files asked for (``s3_listing.stat_under``),
    so a batch of paths costs about what it holds, not what its folder holds
    (``s3_listings``: a ``s3_listing.FolderListings`` a caller keeps between batches,
    for paths spread over big folders).
    """
    out: Dict[str, Optional[Tuple[int, float]]] = {}
    remote_by_parent: Dict[str, List[str]] = {}
    for p in paths:
        if is_remote(p):
            remote_by_parent.setdefault(str(p).rsplit("/", 1)[0], []).append(p)
            continue
        try:
            st = os.stat(_local(p))
            out[p] = (int(st.st_size), float(st.st_mtime)) if not os.path.isdir(_local(p)) else None
        except OSError:
            out[p] = None
    if remote_by_parent:
        for parent, wanted in sorted(remote_by_parent.items()):
            client = s3_folder_client(parent)
            if client is not None:
                from . import s3_listing

                with refusals(parent + "/"):
                    out.update(s3_listing.stat_under(*client, wanted, s3_listings))
                continue
            found = {}
            for meta in match([parent + "/*"])[0].metadata_list:
                found[meta.path] = (int(meta.size_in_bytes), float(meta.last_updated_in_seconds or 0.0))
            for p in wanted:
                out[p] = found.get(p)
    return out


class ZlibReader(io.RawIOBase):
    """A readable stream over ZLIB-compressed data, as TensorFlow's ZLIB option writes it.

    Concatenated zlib streams are read one after the other.
    """

    def __init__(self, raw: BinaryIO, chunk_size: int = 1 << 20):
        self._raw = raw
        self._chunk = chunk_size
        self._dec = zlib.decompressobj()
        self._pending = b""
        self._eof = False
        self._started = False  # the current zlib stream has been fed input
        self._truncated = False  # the input ended inside a zlib stream

    def readable(self) -> bool:
        return True

    def _fill(self, want: int) -> None:
        while len(self._pending) < want and not self._eof:
            data = self._dec.unconsumed_tail or self._raw.read(self._chunk)
            if not data:
                self._eof = True
                # a stream cut short may end at a record boundary: records would be lost
                # silently; read() raises once the data before the cut is delivered
                self._truncated = self._started and not self._dec.eof
                break
            self._started = True
            out = self._dec.decompress(data, max(want - len(self._pending), self._chunk))
            self._pending += out
            if self._dec.eof:
                rest = self._dec.unused_data
                self._dec = zlib.decompressobj()
                self._started = bool(rest)
                if rest:
                    self._pending += self._dec.decompress(rest, self._chunk)

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            while not self._eof:
                self._fill(len(self._pending) + self._chunk)
            if self._truncated:
                raise EOFError("the ZLIB stream ends before its end marker")
            out, self._pending = self._pending, b""
            return out
        self._fill(size)
        if self._truncated and not self._pending and size:
            raise EOFError("the ZLIB stream ends before its end marker")
        out, self._pending = self._pending[:size], self._pending[size:]
        return out

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()


class _OwningGzipFile(gzip.GzipFile):
    """A GzipFile that also closes the file object it wraps (GzipFile does not)."""

    def __init__(self, raw: BinaryIO, mode: str):
        self._owned_raw = raw
        # mtime=0 and no file name in the header keep written output byte-identical
        # from run to run: GzipFile would otherwise store the name of the file it writes,
        # a temporary one with a random part when the sink or a build writes (Beam's and
        # TensorFlow's GZIP writers store no name either).
        super().__init__(filename="", fileobj=raw, mode=mode, mtime=0)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._owned_raw.close()


def open_read(path: str, compression_type: Optional[str] = None) -> BinaryIO:
    """Open ``path`` for reading its decompressed bytes."""
    kind = normalize_compression(compression_type, path)
    raw = open_raw(path, "rb")
    if kind == GZIP:
        return cast(BinaryIO, _OwningGzipFile(raw, "rb"))
    if kind == ZLIB:
        return cast(BinaryIO, ZlibReader(raw))
    return raw


class ZlibWriter(io.RawIOBase):
    """A writable stream that ZLIB-compresses (zlib header, one stream) like TensorFlow."""

    def __init__(self, raw: BinaryIO, level: int = zlib.Z_DEFAULT_COMPRESSION):
        self._raw = raw
        self._comp = zlib.compressobj(level)

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self._raw.write(self._comp.compress(data))
        return len(data)

    def close(self) -> None:
        if not self.closed:
            try:
                self._raw.write(self._comp.flush())
                self._raw.close()
            finally:
                super().close()


def open_write(path: str, compression_type: Optional[str] = None) -> BinaryIO:
    """Open ``path`` for writing, compressing as asked (or as its suffix says)."""
    kind = normalize_compression(compression_type, path)
    return compressing_writer(open_raw(path, "wb"), kind)


def compressing_writer(raw: BinaryIO, kind: str) -> BinaryIO:
    """``raw`` (a file as stored) behind the writer of compression ``kind`` (a
    :func:`normalize_compression` result); closing the writer closes ``raw``."""
    if kind == GZIP:
        return cast(BinaryIO, _OwningGzipFile(raw, "wb"))
    if kind == ZLIB:
        return cast(BinaryIO, ZlibWriter(raw))
    return raw


class DigestingWriter(io.RawIOBase):
    """A file being written that keeps the SHA-256 and the count of the bytes passed on
    to it, so a writer knows what it stored without reading it back (on an object store
    that read is a whole GET of the object)."""

    def __init__(self, raw: BinaryIO):
        self._raw = raw
        self._sha256 = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        size = memoryview(data).nbytes
        written = self._raw.write(data)
        if written is not None and written != size:  # the digest would no longer match the file
            raise OSError(f"a short write: {written} of {size} bytes")
        self._sha256.update(data)
        self.size += size
        return size

    def flush(self) -> None:
        if not self._raw.closed:
            self._raw.flush()

    def hexdigest(self) -> str:
        return self._sha256.hexdigest()

    def close(self) -> None:
        if not self.closed:
            try:
                self._raw.close()
            finally:
                super().close()
