"""Reading TFRecord objects from S3, GCS and Azure Blob Storage with range requests: the
records of a piece (``remote_records``), the blocks of whole frames an indexed piece is
read in (``frame_blocks``), and an object described as ``sharding.describe_file``
describes a local file (``describe``).

Frames are checked (length, both CRCs) by the same scanners as local files. An indexed
plain piece is read as blocks of whole frames of about ``block_size`` bytes, fetched
ahead (``fetch_ahead``), each checked against the index; an unindexed or compressed one
as a ``RangeStream`` of consecutive ``block_size`` ranges scanned by ``FrameStream``. An
unindexed piece that ends inside the object reads past its end one block at a time,
only as far as its last record needs. A set of records (a window of a global shuffle)
is one request per run of adjacent frames (``fetch_many``).

The bytes come from the storage layer, which knows nothing of frames:
``tfrecord_io.storage.range_reads`` (read-ahead, parallel fetches, the optional local
cache, ``configure``), ``tfrecord_io.storage.remote_objects`` (object versions pinned
to what was listed, settings, counters) and one module per store (``s3_objects``,
``gcs_objects``, ``azure_objects``). Their public names are re-exported here
(``remote_reader.stat``, ``remote_reader.configure`` ...): this module's names are what
users and the torch readers have always imported, and they stay supported. Nothing
here imports torch or Beam.
"""

from __future__ import annotations

from typing import Any, Iterator, List, Optional, Tuple

import numpy as np

from ..errors import TruncatedRecordError
from ..storage.range_reads import (
    CACHE_CHUNK,
    RangeStream,
    _exists,
    configure,
    fetch_ahead,
    fetch_many,
    read_object,
    read_range,
    stat,
)
from ..storage.remote_objects import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_PARALLEL,
    DEFAULT_RANDOM_PARALLEL,
    DEFAULT_REQUEST_SIZE,
    STATS,
    ReadStats,
    RemoteObject,
    RemoteObjectChangedError,
    handles,
    is_azure,
    is_gcs,
    is_s3,
    settings,
    split_url,
)
from ..storage.s3_objects import reset_client


def frame_blocks(
    offsets: np.ndarray, sizes: np.ndarray, first: int, last: int, block_size: Optional[int] = None
) -> List[Tuple[int, int, int, int]]:
    """``(start, end, i, j)``: blocks of whole frames ``i .. j-1`` of about ``block_size``
    bytes covering frames ``first .. last-1`` (at least one frame each)."""
    size = block_size or settings().block_size
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


def describe(
    path: str, index_path: Optional[str] = None, compression_type: Optional[str] = None
) -> Tuple[Any, RemoteObject]:
    """``sharding.describe_file`` for an object on S3, GCS or Azure, by a metadata request
    and range GETs (no listing): ``(FileInfo, RemoteObject)``, the object pinned to the
    version it has now (its ETag, or on GCS its generation).
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


__all__ = [
    # the TFRecord parts, here
    "describe",
    "frame_blocks",
    "remote_records",
    # object access, from tfrecord_io.storage (range_reads, remote_objects, s3_objects)
    "CACHE_CHUNK",
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_PARALLEL",
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
    "handles",
    "is_azure",
    "is_gcs",
    "is_s3",
    "read_object",
    "read_range",
    "reset_client",
    "settings",
    "split_url",
    "stat",
]
