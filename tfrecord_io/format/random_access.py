"""Random access to records by number, through index files: one positioned read
(``os.pread`` for local files) per record, with the frame's length and both CRCs
checked against what the index promised.

Open files are per process: a reader that is pickled (to a DataLoader worker, a Beam
worker) or inherited through ``fork`` opens its own handles on first use, so parallel
readers never share a file position. Nothing here imports torch or Beam.
"""

from __future__ import annotations

import mmap
import os
from typing import Any, BinaryIO, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import CorruptRecordError, IndexFileError, TruncatedRecordError
from ..storage import files
from .crc import masked_crc32c
from .framing import (
    BAD_DATA_CRC,
    BAD_LENGTH_CRC,
    CRC_FIELD,
    FOOTER_SIZE,
    FRAME_OVERHEAD,
    HEADER_SIZE,
    LENGTH_FIELD,
    FrameStream,
    _scan_frames,
    length_crc_ok,
)
from .index import RecordIndex, build_index, find_index, load_index
from .reader import read_records


def decode_frame(frame, path: str = "<buffer>", offset: int = 0, check_crc: bool = True) -> memoryview:
    """The data of one whole frame (header + data + footer, nothing more), checked.

    Raises ``TruncatedRecordError`` when ``frame`` is shorter than its header says and
    ``CorruptRecordError`` when the length is not the frame's or a CRC does not match;
    each names ``path`` and ``offset`` (the frame's offset in its file).
    """
    mv = memoryview(frame)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    n = len(mv)
    if n < FRAME_OVERHEAD:
        raise TruncatedRecordError(f"truncated record: {n} bytes, less than a 16-byte empty frame", path, offset)
    length = LENGTH_FIELD.unpack_from(mv, 0)[0]
    if check_crc and not length_crc_ok(mv):
        raise CorruptRecordError(
            f"corrupt record header: the length field ({length}) does not match its CRC32C", path, offset
        )
    if length + FRAME_OVERHEAD != n:
        raise CorruptRecordError(
            f"record length mismatch: the header says {length} data bytes but the index gives the "
            f"frame {n} bytes ({n - FRAME_OVERHEAD} of data); is the index for this file?",
            path,
            offset,
        )
    data = mv[HEADER_SIZE : n - FOOTER_SIZE]
    if check_crc and masked_crc32c(data) != CRC_FIELD.unpack_from(mv, n - FOOTER_SIZE)[0]:
        raise CorruptRecordError(
            f"corrupt record data: the {length} data bytes do not match their CRC32C", path, offset
        )
    return data


IndexArg = Union[None, str, RecordIndex]

DEFAULT_BLOCK_SIZE = 1 << 20


def _read_at(handle: Any, offset: int, size: int) -> bytes:
    if isinstance(handle, int):
        return os.pread(handle, size, offset)
    handle.seek(offset)
    return handle.read(size)


def _raise_block_error(path, buf, start, offsets, sizes, starts, expected, check_crc) -> None:
    """Name the first frame of a block that the scan and the index disagree on."""
    mismatch = next((k for k, (a, b) in enumerate(zip(starts, expected)) if a != b), None)
    # a frame whose length field is wrong shifts the start of the one after it
    bad = mismatch - 1 if mismatch is not None else min(len(starts), len(offsets) - 1)
    offset, size = int(offsets[bad]), int(sizes[bad])
    decode_frame(buf[offset - start : offset - start + size], path, offset, check_crc)
    raise CorruptRecordError("record does not match the index; is the index for this file?", path, offset)


def _map_local(path: str) -> memoryview:
    """A read-only memory map of a local file, as a memoryview (kept alive by its views)."""
    with open(files._local(path), "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    if hasattr(mapped, "madvise") and hasattr(mmap, "MADV_SEQUENTIAL"):
        mapped.madvise(mmap.MADV_SEQUENTIAL)
    return memoryview(mapped)


class _MappedReader:
    """A read-only stream over a memoryview whose ``read`` returns views, not copies,
    so a ``FrameStream`` over it scans a memory-mapped file in place."""

    def __init__(self, view: memoryview, position: int = 0):
        self._view = view
        self._pos = position

    def read(self, size: int = -1) -> memoryview:
        end = len(self._view) if size is None or size < 0 else min(self._pos + size, len(self._view))
        out = self._view[self._pos : end]
        self._pos = end
        return out


def scan_mapped(
    path: str, start: int = 0, end: Optional[int] = None, check_crc: bool = True
) -> Iterator[Tuple[int, memoryview]]:
    """``reader.read_records`` for a local uncompressed file without an index, in place:
    the file is memory-mapped and scanned by ``FrameStream`` (same checks, same
    resynchronisation at ``start``) with no copy; records are views of the mapping
    (see ``read_indexed`` about files truncated while mapped)."""
    size = files.file_size(path)
    if size == 0 or (end is not None and end <= start) or start >= size:
        return
    try:
        view = _map_local(path)
    except (OSError, ValueError):  # a file system without mmap: stream it instead
        yield from read_records(path, start, end, compression_type="", check_crc=check_crc)  # type: ignore[misc]
        return
    if start > 0:
        # resynchronise in small windows: resync examines its whole buffer at once, and
        # the first boundary is usually within a record's length of ``start``
        probe = FrameStream(
            _MappedReader(view, start), path=path, offset=start, size=size, chunk_size=1 << 16, check_crc=check_crc
        )
        if not probe.resync(limit=end):
            return
        start = probe.offset
    # one buffer for the rest of the file, so that no frame straddles two reads
    stream = FrameStream(
        _MappedReader(view, start), path=path, offset=start, size=size, chunk_size=size, check_crc=check_crc
    )
    yield from stream.frames(stop=end)


def _open_indexed(path: str, need: int) -> Tuple[Optional[memoryview], Any]:
    """``(mapping, None)`` for a local file that can be memory-mapped (checked to hold
    the ``need`` bytes the index gives), else ``(None, stream)`` to read blocks from."""
    if not files.is_remote(path):
        try:
            whole = _map_local(path)
        except (OSError, ValueError):  # a file system without mmap: read blocks instead
            whole = None
        if whole is not None:
            if len(whole) < need:
                raise TruncatedRecordError(
                    f"truncated file: the index gives frames up to byte {need} but the file ends at {len(whole)}",
                    path,
                    len(whole),
                )
            return whole, None
    return None, files.open_raw(path, "rb")


def _block(path: str, whole: Optional[memoryview], handle: Any, start: int, size: int) -> Tuple[Any, int]:
    """A buffer holding bytes ``start .. start + size`` of the file and the file offset
    of the buffer's first byte: the whole mapping, or those bytes read from ``handle``."""
    if whole is not None:
        return whole, 0
    buf = _read_at(handle, start, size)
    if len(buf) < size:
        raise TruncatedRecordError(
            f"truncated file: the index gives frames up to byte {start + size} but the file ends at {start + len(buf)}",
            path,
            start,
        )
    return buf, start


def read_indexed(
    path: str,
    index: RecordIndex,
    first: int = 0,
    last: Optional[int] = None,
    check_crc: bool = True,
    block_size: int = DEFAULT_BLOCK_SIZE,
) -> Iterator[Tuple[int, memoryview]]:
    """Yield ``(offset, data)`` for records ``first`` .. ``last - 1`` of an indexed file.

    Because the index gives every frame's bounds, no byte has to be copied to find
    them: a local file is memory-mapped and each record is a view of the mapping (no
    copy at all); a remote file is read in blocks of whole frames of about
    ``block_size`` bytes, each into a buffer of its own. Frames are scanned a block at
    a time with both CRCs checked; a length that disagrees with the index is a
    ``CorruptRecordError`` too, naming the file and the offset. The views stay valid
    after iteration moves on (they keep the mapping alive); as with any memory map, a
    file truncated by another process while mapped makes reading its pages fail
    (SIGBUS), so do not rewrite files that are being read.
    """
    count = len(index)
    last = count if last is None else min(last, count)
    if first >= last:
        return
    offsets, sizes = index.offsets, index.sizes
    ends = offsets[first:last] + sizes[first:last]
    whole, handle = _open_indexed(path, int(ends[-1]))
    try:
        i = first
        while i < last:
            start = int(offsets[i])
            # frames i .. j-1: at least one, as many more as fit in block_size
            j = max(i + 1, first + int(np.searchsorted(ends, start + block_size, side="right")))
            j = min(j, last)
            size = int(ends[j - 1 - first]) - start
            buf, base = _block(path, whole, handle, start, size)
            out: List[int] = []
            pos, status = _scan_frames(buf, start - base, start - base + size, check_crc, out)
            starts = out[0::2]
            expected = (offsets[i:j] - base + HEADER_SIZE).tolist()
            if status in (BAD_LENGTH_CRC, BAD_DATA_CRC) or pos != start - base + size or starts != expected:
                _raise_block_error(path, buf, base, offsets[i:j], sizes[i:j], starts, expected, check_crc)
            mv = buf if isinstance(buf, memoryview) else memoryview(buf)
            lengths = out[1::2]
            for k in range(j - i):
                a = starts[k]
                yield base + a - HEADER_SIZE, mv[a : a + lengths[k]]
            i = j
    finally:
        if handle is not None:
            handle.close()


def resolve_index(data_path: str, index: IndexArg = "auto") -> RecordIndex:
    """The index of ``data_path``: a ``RecordIndex`` as given, loaded from a path, or with
    ``"auto"``/``None`` the index file beside it (``find_index``) or, when there is none,
    one built by reading (and validating) the whole file once. Checked against the file."""
    if files.normalize_compression(None, data_path):
        raise IndexFileError("random access needs an uncompressed file", data_path)
    if isinstance(index, RecordIndex):
        idx = index
    elif index in (None, "auto"):
        found = find_index(data_path)
        idx = load_index(found) if found else build_index(data_path)
    else:
        idx = load_index(index)
    size = files.file_size(data_path)
    if not idx.matches(size):
        raise IndexFileError(
            f"index does not describe this file (stale or for another file: it covers "
            f"{idx.data_size} bytes in {len(idx)} records, the file has {size}); rebuild it",
            data_path,
        )
    return idx


class IndexedRecordReader:
    """Records of one or more files by global number (file after file), via their indexes.

    ``reader[i]`` is the data of record ``i`` (a ``memoryview`` of a fresh buffer); ``locate(i)`` gives
    ``(path, offset, frame_size)``. Negative numbers count from the end.
    """

    def __init__(
        self,
        paths: Union[str, Sequence[str]],
        indexes: Union[IndexArg, Sequence[IndexArg]] = "auto",
        check_crc: bool = True,
    ):
        self.paths: List[str] = [paths] if isinstance(paths, str) else list(paths)
        if not self.paths:
            raise ValueError("no data files given")
        if isinstance(indexes, (str, RecordIndex)) or indexes is None:
            if len(self.paths) > 1 and indexes not in (None, "auto"):
                raise ValueError("give one index per data file (a list), or 'auto'")
            index_list: List[IndexArg] = [indexes] * len(self.paths)
        else:
            index_list = list(indexes)
            if len(index_list) != len(self.paths):
                raise ValueError(f"{len(self.paths)} data files but {len(index_list)} indexes")
        self.indexes = [resolve_index(p, i) for p, i in zip(self.paths, index_list)]
        counts = np.array([len(i) for i in self.indexes], dtype=np.int64)
        self._ends = np.cumsum(counts)  # record number just after each file
        self.check_crc = check_crc
        self._handles: Dict[int, Any] = {}
        self._pid = os.getpid()

    def __len__(self) -> int:
        return int(self._ends[-1])

    def locate(self, i: int) -> Tuple[int, int, int]:
        """``(file number, offset, frame size)`` of record ``i``."""
        n = len(self)
        if i < 0:
            i += n
        if not (0 <= i < n):
            raise IndexError(f"record {i} out of range: the files hold {n} records")
        f = int(np.searchsorted(self._ends, i, side="right"))
        local = i - (int(self._ends[f - 1]) if f else 0)
        idx = self.indexes[f]
        return f, int(idx.offsets[local]), int(idx.sizes[local])

    def _handle(self, f: int) -> Any:
        if self._pid != os.getpid():  # forked: handles of the parent are not ours
            self._handles = {}
            self._pid = os.getpid()
        h = self._handles.get(f)
        if h is None:
            path = self.paths[f]
            h = files.open_raw(path, "rb") if files.is_remote(path) else os.open(path, os.O_RDONLY)
            self._handles[f] = h
        return h

    def read_frame(self, f: int, offset: int, size: int) -> bytes:
        h = self._handle(f)
        if isinstance(h, int):
            buf = os.pread(h, size, offset)
        else:
            stream: BinaryIO = h
            stream.seek(offset)
            buf = stream.read(size)
        if len(buf) < size:
            raise TruncatedRecordError(
                f"truncated record: the index gives a {size}-byte frame but the file ends after {len(buf)}",
                self.paths[f],
                offset,
            )
        return buf

    def record(self, i: int) -> Tuple[str, int, memoryview]:
        """``(path, offset, data)`` of record ``i``, checked."""
        f, offset, size = self.locate(i)
        path = self.paths[f]
        return path, offset, decode_frame(self.read_frame(f, offset, size), path, offset, self.check_crc)

    def __getitem__(self, i: int) -> memoryview:
        return self.record(i)[2]

    def close(self) -> None:
        for h in self._handles.values():
            if isinstance(h, int):
                os.close(h)
            else:
                h.close()
        self._handles = {}

    def __getstate__(self) -> Dict[str, Any]:
        state = self.__dict__.copy()
        state["_handles"] = {}
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._pid = os.getpid()

    def __del__(self) -> None:
        try:
            if self._pid == os.getpid():
                self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


__all__ = ["IndexedRecordReader", "decode_frame", "read_indexed", "resolve_index", "scan_mapped"]
