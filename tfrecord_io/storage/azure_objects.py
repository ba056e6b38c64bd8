"""Azure Blob Storage objects for range reads (``azfs://account/container/blob``, Beam's
form of a blob's path): ``stat`` (the blob's size and ETag) and the ranged downloads
(``open_range``), each pinned to the ETag that was listed (``If-Match``).

Transport: azure-storage-blob, a client per process and account from
``AZURE_STORAGE_CONNECTION_STRING``, else ``DefaultAzureCredential`` (azure-identity);
azure-core's retries. Refusals (403, no credentials) are ``StorageAccessError`` via
``storage_errors``, never retried as an outage.

Why a module of its own: the store's library, its clients and its errors are Azure's
alone; the range reader (``range_reads``) only reads the body ``open_range`` returns.
Nothing here imports torch or Beam.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Dict, Optional, Tuple

from ..errors import StorageAccessError, TFRecordError, TruncatedRecordError
from . import storage_errors
from .remote_objects import (
    STATS,
    RemoteObject,
    RemoteObjectChangedError,
    _changed,
    _check_listed,
    _check_version,
    _Sink,
    _stats_lock,
    split_url,
)

_azure_clients: Dict[Tuple[int, str, str], Any] = {}
_client_lock = threading.Lock()


def _azure_blob(url: str) -> Any:
    """azure-storage-blob's client of the blob at ``url``, from this process's service
    client of its account (one per process: a forked worker makes its own, with its own
    connections): the connection string Beam's ``azfs://`` filesystem would use
    (:func:`_connection_string`), else ``https://<account>.blob.core.windows.net`` with
    azure-identity's ``DefaultAzureCredential``."""
    account = str(url)[len("azfs://") :].partition("/")[0]
    container, blob = split_url(url)
    conn = _connection_string()
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


#: (the options last read, the connection string they gave): reading them costs ~4 ms,
#: and a look-up asks once per read; Beam sets a new object when they change
_job_conn_of: Tuple[Any, str] = (None, "")


def _connection_string() -> str:
    """The connection string Beam's ``azfs://`` filesystem would use in this process: the
    ``--azure_connection_string`` flag a command's Beam reads were given (which wins in
    Beam too), else ``AZURE_STORAGE_CONNECTION_STRING``; "" for neither.

    Why the flag: a command's own ranged reads (``tfrecord-io lookup``'s key-index probe
    and record) must reach the store with the credentials its Beam reads got, not only
    with what the environment has (which the machine need not have)."""
    from .files import filesystem_options

    global _job_conn_of
    options = filesystem_options()
    given = ""
    if options is not None:
        if options is _job_conn_of[0]:
            given = _job_conn_of[1]
        else:
            try:
                given = str(options.get_all_options(drop_default=True).get("azure_connection_string") or "")
            except Exception:  # noqa: BLE001 - options of another shape: the environment's
                given = ""
            _job_conn_of = (options, given)
    return given or os.environ.get("AZURE_STORAGE_CONNECTION_STRING", "")


def stat(url: str, listed_size: Optional[int] = None) -> RemoteObject:
    """The blob's size and ETag (one HEAD); every range read is pinned to the ETag.
    ``listed_size`` (from a listing) must match."""
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
    return _check_listed(RemoteObject(url, int(props.size), str(props.etag or "")), listed_size)


class _AzureBody:
    """Bytes ``[start, end)`` of one version of a blob, read into the caller's buffers by
    azure-storage-blob: one ranged download per ``readinto`` (``StorageStreamDownloader.
    readinto`` into the buffer), ``If-Match`` on the listed ETag (``match_condition``),
    retried by azure-core's retry policy on connection errors and 5xx."""

    def __init__(self, obj: RemoteObject, start: int, end: int) -> None:
        self.obj, self.pos, self.end = obj, start, end
        self.blob = _azure_blob(obj.url)
        #: the ETag of the version that answered the last read (what
        #: ``range_reads.PinOnFirstRead`` pins when the object had none yet)
        self.version = ""

    def readinto(self, view: memoryview) -> int:
        from azure.core import MatchConditions

        want = min(len(view), self.end - self.pos)
        if want <= 0:
            return 0
        sink = _Sink(view[:want])
        kw: Dict[str, Any] = {"etag": self.obj.etag, "match_condition": MatchConditions.IfNotModified}
        try:
            download = self.blob.download_blob(
                offset=self.pos, length=want, max_concurrency=1, **(kw if self.obj.etag else {})
            )
            download.readinto(sink)
        except Exception as err:  # azure.core's errors (after its retries)
            raise _azure_error(err, self.obj, self.pos, self.end) from err
        finally:
            with _stats_lock:
                STATS.requests += 1
        props = download.properties
        self.version = str(props.etag or "")
        # the blob's size from Content-Range (an unpinned first read's only check), its ETag
        _check_version(self.obj, self.pos, str(props.content_range or ""), self.version or None)
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


def open_range(obj: RemoteObject, start: int, end: int) -> _AzureBody:
    """Bytes ``[start, end)`` of this version of the blob, to be read into the caller's
    buffers (it counts its requests itself: one per block)."""
    return _AzureBody(obj, start, end)


__all__ = ["open_range", "stat"]
