"""One exception family for everything that can go wrong with a TFRecord file.

Every error subclasses ``RuntimeError`` because users of the ``tfrecord`` package
catch that; each carries the file path and the byte offset of the record at fault,
so a person can find the bad bytes with ``xxd -s OFFSET FILE``.
"""

from __future__ import annotations

from typing import Optional


class TFRecordError(RuntimeError):
    """Base class: a TFRecord file (or a record in it) could not be read or written."""

    def __init__(self, reason: str, path: Optional[str] = None, offset: Optional[int] = None):
        self.reason = reason
        self.path = path
        self.offset = offset
        super().__init__(self._message())

    def _message(self) -> str:
        where = []
        if self.path is not None:
            where.append(str(self.path))
        if self.offset is not None:
            where.append(f"byte offset {self.offset}")
        return f"{', '.join(where)}: {self.reason}" if where else self.reason

    def __reduce__(self):  # keep path/offset when pickled across Beam or DataLoader workers
        return (self.__class__, (self.reason, self.path, self.offset))


class CorruptRecordError(TFRecordError):
    """A record's length or data does not match its masked CRC32C."""


class TruncatedRecordError(TFRecordError):
    """The file ends inside a record's header, data or footer."""


class IndexFileError(TFRecordError):
    """An index file is malformed, stale, or cannot describe this file."""


class ExampleCodecError(TFRecordError, ValueError):
    """A value cannot be encoded into, or decoded from, a tf.train.Example."""


class UnknownFeatureError(ExampleCodecError):
    """A record has a feature that the columns being filled do not have: the schema was
    inferred from earlier records, so reading on would drop that feature's values.
    ``key`` names the feature; file and byte offset are in the message."""

    def __init__(self, key: str, reason: str, path: Optional[str] = None, offset: Optional[int] = None):
        self.key = key
        super().__init__(reason, path, offset)

    def __reduce__(self):
        return (self.__class__, (self.key, self.reason, self.path, self.offset))


class RecordTooLargeError(TFRecordError):
    """A record's length is over the reader's ``max_record_bytes``; raised from its
    header, before any memory is allocated for the record."""


class StorageUnavailableError(TFRecordError, OSError):
    """A store (``s3://``, ``gs://`` ...) kept failing, or could not be reached, for longer
    than the storage timeout (raised by ``tfrecord_io/storage/storage_retry.py``). Not a fault of
    the file or row at hand: code that turns per-file errors into per-row rejections
    lets this one through, so the job fails instead of rejecting everything."""


class StorageAccessError(StorageUnavailableError, PermissionError):
    """A store refused this process: credentials are missing or rejected, the bucket or
    container does not exist, or access was denied (HTTP 401/403/404 on the bucket).

    Retrying cannot help, so it is raised at once, never waited on as an outage. The
    message names the store, the object and what to set (``store`` and ``hint``). It
    subclasses :class:`StorageUnavailableError` so that code which lets an outage fail
    the job (instead of rejecting rows) does the same for it."""

    def __init__(self, reason: str, path: Optional[str] = None, offset: Optional[int] = None, hint: str = ""):
        self.hint = hint
        super().__init__(reason, path, offset)

    def _message(self) -> str:
        message = super()._message()
        return f"{message} ({self.hint})" if self.hint else message

    def __reduce__(self):
        return (self.__class__, (self.reason, self.path, self.offset, self.hint))
