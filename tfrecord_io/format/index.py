"""Index files: one line per record, ``offset size``, where ``size`` is the whole frame
(data + 16 bytes). This is the text format the ``tfrecord`` package's ``tfrecord2idx``
writes and NVIDIA DALI reads, so indexes made here keep working with those tools.

Building an index reads and validates every record first; the index is written to a
temporary file that is renamed over the destination only when the whole data file
validated, so a corrupt file leaves no index (and an old index stays as it was).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import List, Optional, Tuple, Union

import numpy as np

from ..errors import IndexFileError, TFRecordError
from ..storage import files
from .framing import (
    DEFAULT_MAX_RECORD_BYTES,
    FRAME_OVERHEAD,
    HEADER_SIZE,
    LENGTH_FIELD,
    NEED_MORE,
    STOPPED,
    FrameStream,
    _scan_frames,
)

try:  # the compiled index text parser and formatter, when setup.py could build them
    from .._speedups import format_index as _format_index
    from .._speedups import parse_index_numbers as _parse_index_numbers
except ImportError:  # pragma: no cover - exercised when the extension is absent
    _format_index = None
    _parse_index_numbers = None

#: Bytes read per step when indexing (as ``frame_copy.COPY_CHUNK``).
_SCAN_CHUNK = 1 << 22

# Suffixes of the index sidecars find_index looks for; readers that expand globs skip them.
INDEX_SUFFIXES = (".index", ".idx", ".tfindex")
# The one this package writes, beside its data file: x.tfrecord -> x.tfrecord.index.
INDEX_SUFFIX = ".index"


def index_path_for(data_path: str) -> str:
    """Where the index of ``data_path`` is written (the sink, the build job, ``tfrecord-io
    index``): ``x.tfrecord.index``, the first name :func:`find_index` looks for."""
    return data_path + INDEX_SUFFIX


@dataclass(frozen=True)
class RecordIndex:
    """Offsets and frame sizes of every record of one file, as int64 arrays."""

    offsets: np.ndarray
    sizes: np.ndarray

    def __len__(self) -> int:
        return int(self.offsets.shape[0])

    @property
    def data_size(self) -> int:
        """Bytes the indexed file must have: the end of its last frame."""
        if len(self) == 0:
            return 0
        return int(self.offsets[-1] + self.sizes[-1])

    def matches(self, file_size: int) -> bool:
        """A cheap staleness check: frames are contiguous from 0 and end at ``file_size``."""
        if len(self) == 0:
            return file_size == 0
        if self.offsets[0] != 0 or self.data_size != file_size:
            return False
        return bool(np.all(self.offsets[1:] == self.offsets[:-1] + self.sizes[:-1]))

    def first_at_or_after(self, offset: int) -> int:
        """Record number of the first record that begins at or after ``offset``."""
        return int(np.searchsorted(self.offsets, offset, side="left"))

    def to_text(self) -> str:
        """The index file's text: ``offset size`` per line."""
        return self.to_bytes().decode("ascii")

    def to_bytes(self) -> bytes:
        """The index file's text as ASCII bytes (the compiled core formats it: ~10x the
        Python twin, which matters at a million records per shard)."""
        if _format_index is not None:
            offsets = np.ascontiguousarray(self.offsets, dtype=np.int64)
            sizes = np.ascontiguousarray(self.sizes, dtype=np.int64)
            return _format_index(offsets, sizes)
        return self._to_text_py().encode("ascii")

    def _to_text_py(self) -> str:
        pairs = np.empty(2 * len(self.offsets), dtype=np.int64)
        pairs[0::2] = self.offsets
        pairs[1::2] = self.sizes
        return ("%d %d\n" * len(self.offsets)) % tuple(pairs.tolist())  # one formatting call: ~2x a join


_NUMBER = re.compile(rb"[+-]?[0-9]+")


def _parse_index_numbers_py(data: bytes) -> np.ndarray:
    """Every whitespace-separated number of an index file's text, as int64s: an optional
    sign and ASCII digits that fit int64, else ``ValueError`` naming the token and its
    byte offset. The twin of the compiled ``parse_index_numbers``."""
    if b"_" not in data:  # int() takes "1_000"; nothing else it takes from bytes is refused here
        try:
            return np.array(data.split(), dtype=np.int64)
        except (ValueError, OverflowError):
            pass  # find the token, for the message
    for token in re.finditer(rb"\S+", data):
        if not _NUMBER.fullmatch(token.group()):
            raise ValueError(f"not a number: {token.group()[:40]!r} at byte {token.start()}")
        if not -(1 << 63) <= int(token.group()) < (1 << 63):
            raise ValueError(f"number out of the int64 range: {token.group()[:40]!r} at byte {token.start()}")
    raise AssertionError("unreachable: every token is a number in range")  # pragma: no cover


def parse_index(text: Union[str, bytes], path: str = "<index>") -> RecordIndex:
    """Parse the ``offset size`` text format, with clear errors for malformed lines."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    try:
        if _parse_index_numbers is not None:
            numbers = np.frombuffer(_parse_index_numbers(data), dtype=np.int64)
        else:
            numbers = _parse_index_numbers_py(data)
    except ValueError as err:
        raise IndexFileError(f"malformed index: {err}", path) from None
    if len(numbers) % 2:
        raise IndexFileError("malformed index: expected two numbers per line (offset size)", path)
    arr = numbers.reshape(-1, 2)
    offsets, sizes = arr[:, 0].copy(), arr[:, 1].copy()
    if len(offsets) and (np.any(sizes < FRAME_OVERHEAD) or np.any(offsets < 0) or np.any(np.diff(offsets) <= 0)):
        raise IndexFileError("malformed index: offsets must rise and sizes be >= 16", path)
    return RecordIndex(offsets, sizes)


def load_index(path: str) -> RecordIndex:
    """Load an index file written here, by ``tfrecord2idx`` or by DALI's tool."""
    try:
        with files.open_raw(path, "rb") as f:
            data = f.read()
    except OSError as err:
        raise IndexFileError(f"cannot read index: {err}", path) from None
    return parse_index(data, path)


def build_index(data_path: str, compression_type: Optional[str] = None) -> RecordIndex:
    """Read every record of ``data_path`` with both CRCs checked and return its index.

    Raises ``TFRecordError`` (with path and offset) at the first bad record, and
    ``IndexFileError`` for compressed files, whose records have no byte offsets
    that a reader could seek to.
    """
    kind = files.normalize_compression(compression_type, data_path)
    if kind:
        raise IndexFileError(
            f"cannot index a {kind.upper()} file: record offsets in the decompressed stream "
            "cannot be seeked to; index the uncompressed file instead",
            data_path,
        )
    size = files.file_size(data_path)
    with files.open_raw(data_path, "rb") as f:
        scanned = _scan_whole_frames(f, size)
    if scanned is not None:
        return RecordIndex(*scanned)
    # Something is not a sound frame: read again record by record, for the reader's own
    # error (what is wrong, at which byte offset).
    offsets = []
    sizes = []
    with files.open_raw(data_path, "rb") as f:
        stream = FrameStream(f, path=data_path, size=size, chunk_size=_SCAN_CHUNK)
        try:
            for offset, data in stream.frames():
                offsets.append(offset)
                sizes.append(len(data) + FRAME_OVERHEAD)
        except TFRecordError as err:
            if not offsets:
                kind = _sniff_compression(data_path)
                if kind:
                    raise IndexFileError(
                        f"cannot index this file: it looks {kind}-compressed (its first bytes are a "
                        f"{kind} header, not a TFRecord frame); record offsets in a compressed stream "
                        "cannot be seeked to; index the uncompressed file instead",
                        data_path,
                        0,
                    ) from err
            raise
    return RecordIndex(np.array(offsets, dtype=np.int64), np.array(sizes, dtype=np.int64))


def _scan_whole_frames(f, size: int) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """``(offsets, frame sizes)`` of every frame of the open file ``f`` (``size`` bytes),
    both CRCs of each checked by the compiled scanner a chunk at a time, no Python object
    per record (``FrameStream.frames`` makes an ``(offset, view)`` pair for each: twice the
    time of the scan). None as soon as anything is not a whole, sound frame within
    ``DEFAULT_MAX_RECORD_BYTES``, for the caller to find out what with ``FrameStream``."""
    offsets: List[np.ndarray] = []
    sizes: List[np.ndarray] = []
    out: List[int] = []
    carry = b""  # the start of a frame that the last read cut
    base = 0  # file offset of carry[0]
    want = _SCAN_CHUNK
    while True:
        chunk = f.read(want)
        if not chunk:
            break
        buf = carry + chunk if carry else chunk
        out.clear()
        pos, status = _scan_frames(buf, 0, len(buf), True, out, DEFAULT_MAX_RECORD_BYTES)
        if out:
            pairs = np.array(out, dtype=np.int64)  # data start, length per frame
            offsets.append(pairs[0::2] + (base - HEADER_SIZE))
            sizes.append(pairs[1::2] + FRAME_OVERHEAD)
        if status not in (NEED_MORE, STOPPED):  # a bad CRC or a length over the limit
            return None
        carry = buf[pos:]
        base += pos
        want = _SCAN_CHUNK
        if len(carry) >= HEADER_SIZE:  # its length's CRC was checked: read the whole frame at once
            frame = LENGTH_FIELD.unpack_from(carry, 0)[0] + FRAME_OVERHEAD
            want = max(_SCAN_CHUNK, min(frame, size - base) - len(carry))
    if carry:  # the file ends inside a frame
        return None
    if not offsets:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(offsets), np.concatenate(sizes)


def _sniff_compression(data_path: str) -> str:
    """``"GZIP"`` / ``"ZLIB"`` when the file starts with that header, else ``""`` (used only to
    explain why a file whose first record is unreadable cannot be indexed)."""
    with files.open_raw(data_path, "rb") as f:
        head = f.read(2)
    if head == b"\x1f\x8b":
        return "GZIP"
    if len(head) == 2 and head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0:
        return "ZLIB"
    return ""


def write_index_atomic(index: RecordIndex, index_path: str) -> None:
    """Write ``index`` as the whole content of ``index_path``, all or nothing
    (:func:`files.write_bytes`: a temporary file renamed in place, or one PUT). The
    directory must exist, as for the data file."""
    files.write_bytes(index_path, index.to_bytes(), create_dirs=False)


def create_index(data_path: str, index_path: str, compression_type: Optional[str] = None) -> RecordIndex:
    """Validate ``data_path`` and write its index to ``index_path`` atomically."""
    index = build_index(data_path, compression_type)
    write_index_atomic(index, index_path)
    return index


def find_index(data_path: str) -> Optional[str]:
    """The index file beside ``data_path`` by the usual names, if one exists:
    ``x.tfrecord.index``, ``x.tfrecord.idx``, ``x.tfindex`` (DALI / tfrecord2idx DIR),
    ``x.index``."""
    stem, _ = os.path.splitext(data_path)
    for candidate in (data_path + ".index", data_path + ".idx", stem + ".tfindex", stem + ".index"):
        if candidate != data_path and files.exists(candidate):
            return candidate
    return None


__all__ = [
    "INDEX_SUFFIX",
    "INDEX_SUFFIXES",
    "RecordIndex",
    "TFRecordError",
    "build_index",
    "create_index",
    "find_index",
    "index_path_for",
    "load_index",
    "parse_index",
    "write_index_atomic",
]
