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


class RecordTooLargeError(TFRecordError):
    """A record's length is over the reader's ``max_record_bytes``; raised from its
    header, before any memory is allocated for the record."""
