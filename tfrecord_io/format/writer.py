"""Writing TFRecord files: frames byte-identical to TensorFlow's ``TFRecordWriter``.

``TFRecordWriter`` has the ``tfrecord`` package's interface (``write(datum,
sequence_datum=None)``, ``close()``) and is also a context manager. With
``atomic=True`` it writes to a hidden temporary file beside the target and renames it
into place on a clean close, so a crash never leaves a half-written file under the
final name. With ``index_path`` it also writes the index (offset, frame size) of what
it wrote, without reading the file back.
"""

from __future__ import annotations

import os
from typing import Any, BinaryIO, List, Mapping, Optional, cast

import numpy as np

from ..storage import files
from .codec import serialize_example, serialize_sequence_example
from .crc import masked_crc32c
from .framing import CRC_FIELD, FRAME_OVERHEAD, LENGTH_FIELD, encode_frame
from .index import RecordIndex, write_index_atomic

try:  # one C call frames a whole batch (CRCs included) into one buffer
    from .._speedups import encode_frames as _encode_frames
except ImportError:  # pragma: no cover - exercised when the extension is absent
    _encode_frames = None


class RecordWriter:
    """Writes raw records (bytes-like payloads) as frames.

    ``digest``: keep the SHA-256 and size of the file as stored while writing it
    (``sha256``, ``stored_bytes`` after ``close``), for a manifest of what was written
    without reading it back."""

    def __init__(
        self,
        data_path: str,
        compression_type: Optional[str] = None,
        *,
        atomic: bool = False,
        index_path: Optional[str] = None,
        digest: bool = False,
    ):
        self.path = str(data_path)
        self.compression = files.normalize_compression(compression_type, self.path)
        if index_path and self.compression:
            raise ValueError("an index can only be written for uncompressed files")
        self._atomic = atomic
        self._target = self.path
        if atomic:
            self._target = files.temp_path_beside(self.path)
        raw = files.open_raw(self._target, "wb")
        self._digesting = files.DigestingWriter(raw) if digest else None
        if self._digesting is not None:
            raw = cast(BinaryIO, self._digesting)
        self._file = files.compressing_writer(raw, self.compression)
        # with ``digest``, after close: the file's SHA-256 and size as stored (compressed)
        self.sha256: Optional[str] = None
        self.stored_bytes: Optional[int] = None
        self._index_path = index_path
        self._offsets: List[int] = []
        self._position = 0
        self.records_written = 0
        self.closed = False

    @property
    def bytes_written(self) -> int:
        """Uncompressed bytes of frames written so far."""
        return self._position

    def write_record(self, data) -> None:
        """Write one payload (bytes, bytearray or memoryview) as one frame."""
        self._write(encode_frame(data))
        if self._index_path:
            self._offsets.append(self._position)
        self._position += len(data) + FRAME_OVERHEAD
        self.records_written += 1

    def write_records(self, records) -> None:
        """Write many payloads; one buffered write per batch."""
        if _encode_frames is not None:
            batch = records if isinstance(records, (list, tuple)) else list(records)
            data = _encode_frames(batch)
            if self._index_path:
                pos = self._position
                for record in batch:
                    self._offsets.append(pos)
                    pos += len(record) + FRAME_OVERHEAD
            self._write(data)
            self._position += len(data)
            self.records_written += len(batch)
            return
        pack_len, pack_crc, crc = LENGTH_FIELD.pack, CRC_FIELD.pack, masked_crc32c
        parts: List[bytes] = []
        pos = self._position
        offsets = self._offsets if self._index_path else None
        count = 0
        for data in records:
            n = len(data)
            lb = pack_len(n)
            parts += (lb, pack_crc(crc(lb)), data, pack_crc(crc(data)))
            if offsets is not None:
                offsets.append(pos)
            pos += n + FRAME_OVERHEAD
            count += 1
        self._write(b"".join(parts))
        self._position = pos
        self.records_written += count

    def write_frames(self, frames, sizes) -> None:
        """Write records that are already frames (``encode_frames`` output: what a job
        framed where the records were, so they crossed a shuffle as one ``bytes``), with
        ``sizes`` the payload length of each (for the index and the counts)."""
        lengths = np.asarray(sizes, dtype=np.int64)
        if int(lengths.sum()) + FRAME_OVERHEAD * len(lengths) != len(frames):
            raise ValueError(
                f"{self.path}: {len(frames)} bytes of frames do not hold records of sizes {lengths[:8]}..."
            )
        self._write(frames)
        if self._index_path and len(lengths):
            starts = np.empty(len(lengths), dtype=np.int64)
            starts[0] = 0
            np.cumsum(lengths[:-1] + FRAME_OVERHEAD, out=starts[1:])
            self._offsets.extend((starts + self._position).tolist())
        self._position += len(frames)
        self.records_written += len(lengths)

    def _write(self, data) -> None:
        try:
            self._file.write(data)
        except OSError as err:
            raise self._named(err) from None

    def _named(self, err: OSError) -> OSError:
        """``err`` naming the file being written (its final path; a full disk's ENOSPC names none), so a
        failed job can say which file it was."""
        return files.named_os_error(err, self.path)

    def close(self) -> None:
        """Flush and close; with ``atomic=True`` move the file into place; write the index."""
        if self.closed:
            return
        self.closed = True
        try:
            self._file.close()
        except OSError as err:
            raise self._named(err) from None
        if self._digesting is not None:
            self.sha256, self.stored_bytes = self._digesting.hexdigest(), self._digesting.size
        if self._atomic:
            os.replace(self._target, self.path)
        if self._index_path:
            offsets = np.array(self._offsets, dtype=np.int64)
            ends = np.append(offsets[1:], self._position) if len(offsets) else offsets
            write_index_atomic(RecordIndex(offsets, ends - offsets), self._index_path)

    def abort(self) -> None:
        """Close and remove what was written (for atomic writers: the temporary file)."""
        if self.closed:
            return
        self.closed = True
        try:
            files.close_quietly(self._file)
        finally:
            if os.path.exists(self._target):
                os.unlink(self._target)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and self._atomic:
            self.abort()
        else:
            self.close()
        return False


class TFRecordWriter(RecordWriter):
    """Drop-in for ``tfrecord.writer.TFRecordWriter``.

    ``write(datum)``: ``datum`` is already-serialised bytes (written as is), or a dict
    ``{key: (value, type)}`` / ``{key: value}`` encoded as an ``Example``; with
    ``sequence_datum`` (``{key: (steps, type)}``) a ``SequenceExample`` whose context is
    ``datum``.
    """

    def write(self, datum: Any, sequence_datum: Optional[Mapping[str, Any]] = None) -> None:
        if isinstance(datum, (bytes, bytearray, memoryview)):
            if sequence_datum is not None:
                raise ValueError("sequence_datum cannot go with an already-serialised datum")
            self.write_record(datum)
        elif sequence_datum is not None:
            self.write_record(serialize_sequence_example(datum, sequence_datum))
        elif isinstance(datum, Mapping):
            self.write_record(serialize_example(datum))
        else:
            raise TypeError(f"write() takes bytes or a dict of features, not {type(datum).__name__}")

    @staticmethod
    def serialize_tf_example(datum: Mapping[str, Any]) -> bytes:
        """As in the ``tfrecord`` package: a dict -> serialised Example bytes."""
        return serialize_example(datum)

    @staticmethod
    def serialize_tf_sequence_example(context: Mapping[str, Any], features: Mapping[str, Any]) -> bytes:
        return serialize_sequence_example(context, features)
