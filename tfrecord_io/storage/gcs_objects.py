"""GCS objects for range reads: ``stat`` (the object's size and generation) and the range
GETs (``open_range``), each pinned to the generation that was listed.

Transport: google-cloud-storage (``gcs_clients.storage_client``: one client per process,
anonymous with an emulator in ``STORAGE_EMULATOR_HOST``), its default retries, one GET
per block; Google's default credentials. Refusals (403, no credentials) are
``StorageAccessError`` via ``storage_errors``, never retried as an outage.

Why a module of its own: the store's library, its errors and its way of pinning a
version (the generation, asked for by number and with ``if_generation_match``) are
GCS's alone; the range reader (``range_reads``) only reads the body ``open_range``
returns. Nothing here imports torch or Beam.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from ..errors import TFRecordError, TruncatedRecordError
from . import storage_errors
from .remote_objects import STATS, RemoteObject, RemoteObjectChangedError, _check_listed, _Sink, _stats_lock, split_url


def _gcs_client() -> Any:
    """This process's google-cloud-storage client (``gcs_clients.storage_client``: one
    per process, so a forked DataLoader worker makes its own; anonymous with an emulator
    in ``STORAGE_EMULATOR_HOST`` or ``TFRECORD_IO_GCS_ANONYMOUS``, or when the options
    Beam's filesystems were given in this process say ``--no_auth`` (a command's own
    reads, e.g. ``tfrecord-io lookup``'s, take the flags its Beam reads take), else
    Google's default credentials)."""
    from . import gcs_clients
    from .files import filesystem_options

    return gcs_clients.storage_client(filesystem_options())


def stat(url: str, listed_size: Optional[int] = None) -> RemoteObject:
    """The object's size and generation (one metadata GET); ``listed_size`` (from a
    listing) must match. The generation is what every range read of it is pinned to
    (``if_generation_match``): a replaced object, even by one of the same size, is a new
    generation."""
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
    return _check_listed(RemoteObject(url, int(blob.size or 0), str(blob.generation or "")), listed_size)


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

    @property
    def version(self) -> str:
        """The generation that answered the last read (google-cloud-storage takes it from
        the response's ``X-Goog-Generation``): what ``range_reads.PinOnFirstRead`` pins."""
        return str(self.blob.generation or "")

    def close(self) -> None:
        pass


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


def open_range(obj: RemoteObject, start: int, end: int) -> _GcsBody:
    """Bytes ``[start, end)`` of this generation of the object, to be read into the
    caller's buffers (it counts its requests itself: one per block)."""
    return _GcsBody(obj, start, end)


__all__ = ["open_range", "stat"]
