"""Copy a byte range of whole TFRecord frames from one file into a ``RecordWriter``, with
both CRCs of every frame checked on the way, without decoding a record.

Why: a reshard whose plan comes from the inputs' indexes knows which bytes each output
shard holds; the fastest correct copy is to move those frames as they are (same bytes,
no re-framing) while the compiled scanner (``_speedups.scan_frames``) checks them a
buffer at a time. The range's bounds come from an index, and an index is never
trusted: the frames must tile the range exactly and number what the index says, or
the copy fails naming the file and the byte offset where they disagree. A bad frame is
reported with the reader's own message (``FrameStream``'s), so a corrupt region reads
the same whichever job found it.
"""

from __future__ import annotations

from typing import List, Optional

import numpy as np

from ..errors import IndexFileError, TFRecordError, TruncatedRecordError
from ..storage import files
from .framing import (
    BAD_DATA_CRC,
    BAD_LENGTH_CRC,
    DEFAULT_MAX_RECORD_BYTES,
    FRAME_OVERHEAD,
    HEADER_SIZE,
    LENGTH_FIELD,
    NEED_MORE,
    TOO_LARGE,
    FrameStream,
    _scan_frames,
)
from .writer import RecordWriter

#: Bytes read per step: large enough that the per-step Python work is noise, small
#: enough to stay far from a worker's memory limit.
COPY_CHUNK = 1 << 22


def _frame_error(path: str, offset: int, end: int) -> TFRecordError:
    """The error for the frame at ``offset`` of ``path``: the reader's own error when the
    frame is bad, else (the frame is sound, but it does not end where the index says the
    range ends) an ``IndexFileError`` saying the index does not describe the file."""
    size = files.file_size(path)
    with files.open_raw(path, "rb") as f:
        f.seek(offset)
        stream = FrameStream(f, path=path, offset=offset, size=size)
        try:
            for _ in stream.frames(stop=offset + 1):
                pass
        except TFRecordError as err:
            return err
    if offset >= size:
        return TruncatedRecordError(f"the file ends at byte {size}, before byte {end} where its index ends", path, size)
    return IndexFileError(
        f"the record here runs past byte {end}, where the file's index says a record ends: "
        "the index does not describe this file (rebuild it with `tfrecord-io index`)",
        path,
        offset,
    )


def copy_frames(
    path: str,
    start: int,
    end: int,
    count: int,
    writer: RecordWriter,
    *,
    chunk_size: int = COPY_CHUNK,
    max_record_bytes: Optional[int] = DEFAULT_MAX_RECORD_BYTES,
) -> None:
    """Append the frames in bytes ``[start, end)`` of ``path`` (``count`` of them, as its
    index says) to ``writer`` unchanged, checking both CRCs of each first.

    Raises the reader's ``TFRecordError`` (file and byte offset) for a bad frame, and
    ``IndexFileError`` when the frames do not tile ``[start, end)`` or are not ``count``.
    Frames before the bad one may already be in ``writer``: the caller aborts it.
    """
    if start == end and count == 0:
        return
    copied = 0
    out: List[int] = []
    with files.open_raw(path, "rb") as f:
        f.seek(start)
        carry = b""  # the start of a frame that the last read cut
        base = start  # file offset of carry[0]
        want = chunk_size
        while base + len(carry) < end:
            chunk = f.read(min(want, end - base - len(carry)))
            if not chunk:
                raise _frame_error(path, base, end)
            buf = carry + chunk if carry else chunk
            pos, status = _scan_frames(buf, 0, len(buf), True, out, max_record_bytes)
            if out:
                sizes = np.array(out[1::2], dtype=np.int64)
                writer.write_frames(memoryview(buf)[:pos], sizes)
                copied += len(sizes)
                out.clear()
            if status in (BAD_LENGTH_CRC, BAD_DATA_CRC, TOO_LARGE):
                raise _frame_error(path, base + pos, end)
            carry = buf[pos:]
            base += pos
            want = chunk_size
            if status == NEED_MORE and len(carry) >= HEADER_SIZE:
                # The header's CRC was checked by the scan: read the rest of this frame
                # in one go (a record larger than a chunk is not re-joined chunk by chunk).
                frame = LENGTH_FIELD.unpack_from(carry, 0)[0] + FRAME_OVERHEAD
                if base + frame > end:
                    raise _frame_error(path, base, end)
                want = max(chunk_size, frame - len(carry))
    if carry:
        raise _frame_error(path, base, end)
    if copied != count:
        raise IndexFileError(
            f"bytes [{start}, {end}) hold {copied} records but the file's index says {count}: "
            "the index does not describe this file (rebuild it with `tfrecord-io index`)",
            path,
            start,
        )


__all__ = ["COPY_CHUNK", "copy_frames"]
