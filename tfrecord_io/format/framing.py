"""TFRecord framing: write frames, read them back with both CRCs checked, read byte
ranges, and find record boundaries from any offset (resynchronisation).

A frame is::

    uint64 length (little endian) | uint32 masked_crc32c(length bytes)
    | data[length] | uint32 masked_crc32c(data)

Reading never trusts a length field: before bytes are allocated for a record, its
length is checked against its CRC, against ``max_record_bytes`` (a record over it
raises ``RecordTooLargeError`` naming file, offset and size) and against the bytes the
file can still hold. A record is read into one buffer of its size, in slices, so a
record of N bytes costs about N bytes of memory, also from a GZIP/ZLIB stream.

Records come back as read-only ``memoryview`` slices of the read buffers: no copy is
made, and each view stays valid after iteration has moved on (it keeps its buffer
alive), unlike the ``tfrecord`` package, whose views are overwritten by the next read.
A buffer is reused for later reads only once no view of it is alive any more (see
``FrameStream._refill``), which saves allocating fresh memory for every chunk.

Hot path: scanning a buffer for frames is done by ``_speedups.RecordScanner`` (C, with
hardware CRC32C; an iterator of ``(offset, view)`` with ``scan_frames``'s stopping
rules) when the extension is built, else by :func:`_scan_frames_py`, which makes a
constant number of C calls per record (no per-byte Python loop).
"""

from __future__ import annotations

import gzip
import struct
import zlib
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterator, List, Literal, Optional, Protocol, Tuple, Union, overload

import numpy as np

from ..errors import CorruptRecordError, RecordTooLargeError, TFRecordError, TruncatedRecordError
from .crc import masked_crc32c

HEADER_SIZE = 12
FOOTER_SIZE = 4
FRAME_OVERHEAD = HEADER_SIZE + FOOTER_SIZE
DEFAULT_CHUNK_SIZE = 1 << 19  # two buffers in use (see FrameStream._refill) stay in a 1-2 MiB L2 cache
# The largest record a reader accepts unless told otherwise. TensorFlow's own Example
# parser cannot take 2 GiB and real records are far smaller; past this a length field
# is far likelier a mistake (or a file of something else) than data worth the memory.
DEFAULT_MAX_RECORD_BYTES = 1 << 30
# A stream is read into a buffer in slices of at most this size: GzipFile.readinto
# decompresses into a temporary as large as the slice before copying it over.
_READ_SLICE = 1 << 23

# The frame's fields, for every module that packs or unpacks them (writer, random access).
LENGTH_FIELD = struct.Struct("<Q")  # the data length
HEADER_FIELDS = struct.Struct("<QI")  # the data length and its masked CRC32C
CRC_FIELD = struct.Struct("<I")  # a masked CRC32C

# Status codes shared by the Python and C scanners.
NEED_MORE = 0  # the frame at pos is not complete in the buffer (or the buffer is used up)
STOPPED = 1  # the frame at pos begins at or after the stop position
BAD_LENGTH_CRC = 2  # the frame at pos has a length that does not match its CRC
BAD_DATA_CRC = 3  # the frame at pos has data that does not match its CRC
TOO_LARGE = 4  # the frame at pos has a (CRC-checked) length over max_len


def frame_header(length: int) -> bytes:
    """The 12 header bytes of a frame of ``length`` data bytes."""
    length_bytes = LENGTH_FIELD.pack(length)
    return length_bytes + CRC_FIELD.pack(masked_crc32c(length_bytes))


def encode_frame(data) -> bytes:
    """One whole frame around ``data`` (any bytes-like object), in one join."""
    length_bytes = LENGTH_FIELD.pack(len(data))
    return b"".join(
        (length_bytes, CRC_FIELD.pack(masked_crc32c(length_bytes)), data, CRC_FIELD.pack(masked_crc32c(data)))
    )


def write_frame(stream: BinaryIO, data) -> int:
    """Write one frame to ``stream``; returns the number of bytes written."""
    n = len(data)
    stream.write(frame_header(n))
    stream.write(data)
    stream.write(CRC_FIELD.pack(masked_crc32c(data)))
    return n + FRAME_OVERHEAD


def _scan_frames_py(
    buf: bytes, pos: int, stop: int, check_crc: bool, out: List[int], max_len: Optional[int] = None
) -> Tuple[int, int]:
    """Scan whole frames of ``buf`` from ``pos``; append ``data_start, length`` per frame.

    Stops before a frame that begins at or after ``stop`` (STOPPED), one that is not
    complete in ``buf`` (NEED_MORE; if its header is complete, its length CRC has
    been checked), one whose CRC fails (BAD_*), or one whose length is over
    ``max_len`` (TOO_LARGE, checked after the length CRC). Returns ``(pos, status)``
    with ``pos`` the start of the frame the scan stopped at.
    """
    limit = (1 << 64) if max_len is None else max(int(max_len), 0)
    n = len(buf)
    unpack_header = HEADER_FIELDS.unpack_from
    unpack_u32 = CRC_FIELD.unpack_from
    append = out.append
    masked = masked_crc32c
    mv = memoryview(buf)
    while True:
        if pos >= stop:
            return pos, STOPPED
        if pos + HEADER_SIZE > n:
            return pos, NEED_MORE
        length, length_crc = unpack_header(buf, pos)
        if check_crc and masked(mv[pos : pos + 8]) != length_crc:
            return pos, BAD_LENGTH_CRC
        if length > limit:
            return pos, TOO_LARGE
        data_start = pos + HEADER_SIZE
        data_end = data_start + length
        if data_end + FOOTER_SIZE > n:
            return pos, NEED_MORE
        if check_crc and masked(mv[data_start:data_end]) != unpack_u32(buf, data_end)[0]:
            return pos, BAD_DATA_CRC
        append(data_start)
        append(length)
        pos = data_end + FOOTER_SIZE


try:  # the compiled scanner, when setup.py could build it
    from .._speedups import RecordScanner as _RecordScanner
    from .._speedups import scan_frames as _scan_frames

    HAVE_SPEEDUPS = True
except ImportError:  # pragma: no cover - exercised when the extension is absent
    _scan_frames = _scan_frames_py
    _RecordScanner = None
    HAVE_SPEEDUPS = False


@dataclass(frozen=True)
class CorruptRegion:
    """Bytes ``[start, end)`` of ``path`` that hold no readable record, and why.

    ``end`` is the offset of the next good record (or the end of the file).
    """

    path: str
    start: int
    end: int
    reason: str

    @property
    def size(self) -> int:
        return self.end - self.start


def length_crc_ok(buf, pos: int = 0) -> bool:
    """Does the length field of the frame header at ``pos`` of ``buf`` (12 bytes there)
    match its masked CRC32C? The one header check of the Python readers outside the
    scanners' loops (resynchronisation, random access, the Beam source's index check)."""
    return masked_crc32c(memoryview(buf)[pos : pos + 8]) == CRC_FIELD.unpack_from(buf, pos + 8)[0]


class ByteStream(Protocol):
    """What :class:`FrameStream` reads: any object with ``read(n)`` (a file, a Beam
    file, a decompressor, a memory map's view); ``readinto`` is used when it has one."""

    def read(self, size: int = -1, /) -> Union[bytes, memoryview]: ...


class FrameStream:
    """A buffered reader of frames from a binary stream, tracking file offsets.

    ``offset`` is the file offset of the stream's current position. The stream is
    read in ``chunk_size`` pieces; frames are returned as views into those pieces.
    """

    def __init__(
        self,
        stream: ByteStream,
        *,
        path: str = "<stream>",
        offset: int = 0,
        size: Optional[int] = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        check_crc: bool = True,
        max_record_bytes: Optional[int] = DEFAULT_MAX_RECORD_BYTES,
    ):
        self._stream = stream
        self.path = path
        self._buf: Union[bytes, bytearray] = b""
        self._spare: Optional[bytearray] = None  # an older buffer to reuse (see _refill)
        self._base = offset  # file offset of self._buf[0]
        self._pos = 0  # position in self._buf
        self._size = size  # total file size when known (plain files)
        self._eof = False
        self._chunk = max(int(chunk_size), 64)
        self.check_crc = check_crc
        self.max_record_bytes = check_max_record_bytes(max_record_bytes)

    @property
    def offset(self) -> int:
        return self._base + self._pos

    def _remaining_in_file(self) -> Optional[int]:
        return None if self._size is None else self._size - self.offset

    def _fill(self, need: int) -> bool:
        """Make at least ``need`` bytes available from the current position.

        Returns False when the stream ends first. Reads in chunks, so a huge ``need``
        (from a corrupt length) only allocates what the stream really holds.
        """
        avail = len(self._buf) - self._pos
        if avail >= need:
            return True
        if self._eof:
            return False
        if hasattr(self._stream, "readinto"):
            if self._size is not None:
                # never past the size, so a corrupt length cannot make the buffer large
                target = min(max(need, self._chunk), self._size - self.offset)
                if target <= avail:
                    self._eof = True
                    return False
            else:
                # a stream of unknown size: one buffer of the frame's size. A length
                # that passed its CRC (and max_record_bytes) is allocated at once;
                # unchecked, the buffer grows geometrically, so a corrupt huge length
                # costs at most about twice the bytes that really arrive.
                target = max(need, self._chunk)
                step = max(2 * avail, self._chunk)
                while not self.check_crc and step < need:
                    if not self._refill(step, step, avail):
                        return False
                    avail = len(self._buf)
                    step *= 2
            return self._refill(target, need, avail)
        parts = [self._buf[self._pos :]] if avail else []
        self._base += self._pos
        self._pos = 0
        have = avail
        target = max(need, self._chunk)
        while have < target:
            want = min(target - have, 1 << 26)
            if self._size is None:
                # a stream of unknown size: grow geometrically, so a corrupt huge length
                # costs at most about twice the bytes that really arrive
                want = min(want, max(have, self._chunk))
            piece = self._read(max(self._chunk, want))
            if not piece:
                self._eof = True
                break
            parts.append(piece)
            have += len(piece)
            if have >= need and self._size is None:
                break
        self._buf = parts[0] if len(parts) == 1 else b"".join(parts)
        return have >= need

    def _refill(self, target: int, need: int, avail: int) -> bool:
        """Make a buffer of ``target`` bytes: the unread ``avail`` bytes, then the file.

        The buffer is the one before last when nothing uses it any more (the caller
        usually still holds a view of the current one), which saves the page faults
        of fresh memory, about as much time as the read itself. A ``bytearray`` with
        exported buffers refuses to be resized: that is the test that no view of it
        is alive. Views are handed out read-only, so nobody writes into them.
        """
        old, pos = self._buf, self._pos
        candidate, self._spare = self._spare, (old if type(old) is bytearray else None)
        buf = None
        if candidate is not None and len(candidate) == target:
            try:
                del candidate[-1:]  # raises BufferError while any view of it exists
                candidate.append(0)
                buf = candidate
            except BufferError:
                pass
        del candidate
        if buf is None:
            buf = bytearray(target)
        view = memoryview(buf)
        if avail:
            view[:avail] = memoryview(old)[pos : pos + avail]
        del old
        self._buf = b""
        self._base += pos
        self._pos = 0
        have = avail
        while have < target:
            # in slices: GzipFile.readinto decompresses into a temporary of the slice's size
            got = self._read(view[have : have + _READ_SLICE])
            if not got:
                self._eof = True
                break
            have += got
        view.release()
        if have < target:  # the file is shorter than when it was opened
            del buf[have:]
        self._buf = buf
        return have >= need

    def _read(self, n_or_view: Union[int, memoryview]) -> Any:
        """Read ``n`` bytes from the stream, or into a view (returning the count); a
        GZIP/ZLIB stream that is cut short or damaged raises our errors (path + offset
        of the record being read), not ``EOFError``/``zlib.error``."""
        try:
            if isinstance(n_or_view, int):
                return self._stream.read(n_or_view)
            return self._stream.readinto(n_or_view)  # type: ignore[attr-defined]
        except EOFError as err:
            raise TruncatedRecordError(
                f"the compressed stream ends before its end marker (file truncated?): {err}; "
                "the offset is in the decompressed data",
                self.path,
                self._base,
            ) from None
        except (zlib.error, gzip.BadGzipFile) as err:
            raise CorruptRecordError(
                f"the compressed stream is corrupt: {err}; the offset is in the decompressed data",
                self.path,
                self._base,
            ) from None

    def _too_large(self, length: int, offset: int) -> RecordTooLargeError:
        return RecordTooLargeError(
            f"record of {length} bytes is over max_record_bytes={self.max_record_bytes} "
            "(pass a larger max_record_bytes to read it)",
            self.path,
            offset,
        )

    def _error(self, status: int, pos: int) -> TFRecordError:
        off = self._base + pos
        if status == TOO_LARGE:
            length = LENGTH_FIELD.unpack_from(self._buf, pos)[0]
            remaining = None if self._size is None else self._size - off
            if remaining is not None and length + FRAME_OVERHEAD > remaining:
                return TruncatedRecordError(  # a file that cannot hold it: say so first
                    f"truncated record: its header claims {length} data bytes but only "
                    f"{max(remaining - FRAME_OVERHEAD, 0)} can follow before the end of the file",
                    self.path,
                    off,
                )
            return self._too_large(length, off)
        if status == BAD_LENGTH_CRC:
            length = LENGTH_FIELD.unpack_from(self._buf, pos)[0]
            return CorruptRecordError(
                f"corrupt record header: the length field ({length}) does not match its CRC32C",
                self.path,
                off,
            )
        length = LENGTH_FIELD.unpack_from(self._buf, pos)[0]
        return CorruptRecordError(
            f"corrupt record data: the {length} data bytes do not match their CRC32C", self.path, off
        )

    def _check_incomplete(self) -> Optional[TFRecordError]:
        """At NEED_MORE: fetch the rest of the frame at the current position.

        Returns None when the frame is now complete (or the file ended cleanly
        exactly at a boundary, then ``self._eof`` and no bytes remain), else the error.
        """
        if not self._fill(HEADER_SIZE):
            left = len(self._buf) - self._pos
            if left == 0:
                return None
            return TruncatedRecordError(
                f"truncated record header: the file ends {left} bytes into the 12-byte header",
                self.path,
                self.offset,
            )
        length = LENGTH_FIELD.unpack_from(self._buf, self._pos)[0]
        if self.check_crc and not length_crc_ok(self._buf, self._pos):
            return self._error(BAD_LENGTH_CRC, self._pos)
        remaining = self._remaining_in_file()
        frame = length + FRAME_OVERHEAD
        if remaining is not None and frame > remaining:
            return TruncatedRecordError(
                f"truncated record: its header claims {length} data bytes but only "
                f"{max(remaining - FRAME_OVERHEAD, 0)} can follow before the end of the file",
                self.path,
                self.offset,
            )
        if self.max_record_bytes is not None and length > self.max_record_bytes:
            return self._too_large(length, self.offset)
        if not self._fill(frame):
            left = len(self._buf) - self._pos
            return TruncatedRecordError(
                f"truncated record: its header claims {length} data bytes but the stream ends "
                f"after {max(left - HEADER_SIZE, 0)}",
                self.path,
                self.offset,
            )
        return None

    @overload
    def frames(
        self, stop: Optional[int] = None, report_corrupt: Literal[False] = False
    ) -> Iterator[Tuple[int, memoryview]]: ...

    @overload
    def frames(
        self, stop: Optional[int] = None, report_corrupt: bool = False
    ) -> Iterator[Tuple[int, Union[memoryview, CorruptRegion]]]: ...

    def frames(
        self, stop: Optional[int] = None, report_corrupt: bool = False
    ) -> Iterator[Tuple[int, Union[memoryview, CorruptRegion]]]:
        """Yield ``(offset, data)`` for each frame that begins before file offset ``stop``.

        With ``report_corrupt``, a bad region is yielded as ``(offset, CorruptRegion)``
        and reading resumes at the next good record; otherwise it raises. A record
        over ``max_record_bytes`` always raises: it is a limit the caller set, not
        damage to skip.
        """
        scan = _scan_frames
        scanner = _RecordScanner
        check = self.check_crc
        max_len = self.max_record_bytes
        out: List[int] = []
        big = 1 << 62
        while True:
            stop_rel = big if stop is None else stop - self._base
            buf = self._buf
            out.clear()
            if scanner is not None:  # C iterator: makes the (offset, view) pairs itself
                it = scanner(buf, memoryview(buf).toreadonly(), self._base, self._pos, stop_rel, check, False, max_len)
                yield from it
                pos, status = it.pos, it.status
                del it  # it holds a view of buf: let _refill reuse buf later
            else:
                pos, status = scan(buf, self._pos, stop_rel, check, out, max_len)
                if out:
                    mv = memoryview(buf).toreadonly()
                    base = self._base
                    it = iter(out)
                    for start in it:
                        length = next(it)
                        yield base + start - HEADER_SIZE, mv[start : start + length]
                    del mv
            self._pos = pos
            if status == STOPPED:
                return
            if status == NEED_MORE:
                err = self._check_incomplete()
                if err is None:
                    if len(self._buf) - self._pos == 0 and self._eof:
                        return
                    continue
            else:
                err = self._error(status, pos)
            if not report_corrupt or isinstance(err, RecordTooLargeError):
                raise err
            bad = self.offset
            self._pos += 1
            found = self.resync(limit=None)
            end = self.offset if found else self.offset + (len(self._buf) - self._pos)
            if not found:
                self._pos = len(self._buf)
            yield bad, CorruptRegion(self.path, bad, end, err.reason)
            if not found:
                return

    def resync(self, limit: Optional[int] = None, window: int = 1 << 16) -> bool:
        """Advance to the next offset that begins a valid frame.

        A candidate must have a length that fits in the rest of the file, a length
        CRC that matches, and a data CRC that matches. For bytes that are not frames,
        each position passes by chance with probability 2**-64 (two independent
        32-bit CRCs), so over a search of N bytes a false boundary has probability at
        most N * 2**-64. Data that *embeds* TFRecord frames (a TFRecord file stored
        as a record) can defeat this; read such files with an index.

        Returns False (positioned at the end) when no frame begins before ``limit``
        (a file offset) or the end of the file.
        """
        while True:
            self._fill(min(window, 1 << 24))
            buf, pos = self._buf, self._pos
            n = len(buf)
            if n - pos < FRAME_OVERHEAD:
                if self._eof:
                    self._pos = n
                    return False
                self._fill(FRAME_OVERHEAD)
                if len(self._buf) - self._pos < FRAME_OVERHEAD:
                    self._pos = len(self._buf)
                    return False
                continue
            last = n - FRAME_OVERHEAD  # last position whose header+footer fit in buf
            if limit is not None:
                last = min(last, limit - self._base - 1)
                if last < pos:
                    return False
            # Candidates as file offsets: filling the buffer below may move it, but it
            # never drops bytes at or after the current position, and candidates rise.
            base = self._base
            for cand in [base + p for p in _candidates(buf, pos, last, base, self._size)]:
                self._pos = cand - self._base
                if not length_crc_ok(self._buf, self._pos):
                    continue
                length = LENGTH_FIELD.unpack_from(self._buf, self._pos)[0]
                remaining = self._remaining_in_file()
                if remaining is not None and length + FRAME_OVERHEAD > remaining:
                    continue
                if self.max_record_bytes is not None and length > self.max_record_bytes:
                    continue  # never gather more than a record may hold
                if not self._fill(length + FRAME_OVERHEAD):
                    continue
                p = self._pos
                data_end = p + HEADER_SIZE + length
                data_crc = CRC_FIELD.unpack_from(self._buf, data_end)[0]
                if masked_crc32c(memoryview(self._buf)[p + HEADER_SIZE : data_end]) == data_crc:
                    return True
            last = last + base - self._base  # translate to the (possibly moved) buffer
            # nothing in this window: keep the last bytes that could start a header
            self._pos = last + 1
            if limit is not None and self.offset >= limit:
                return False
            if self._eof and len(self._buf) - self._pos < FRAME_OVERHEAD:
                self._pos = len(self._buf)
                return False


def check_max_record_bytes(value: Optional[int]) -> Optional[int]:
    """``max_record_bytes`` as given to a reader: a positive int, or None for no limit."""
    if value is None:
        return None
    if isinstance(value, bool) or int(value) < 1:
        raise ValueError(f"max_record_bytes must be a positive number of bytes or None, not {value!r}")
    return int(value)


def _candidates(buf: Union[bytes, bytearray], pos: int, last: int, base: int, size: Optional[int]) -> Iterator[int]:
    """Positions p in ``[pos, last]`` whose 8-byte length field could be true and
    whose length CRC matches.

    Vectorised with NumPy: a length must leave room for itself within the file
    (``size``) or, for a stream, be below 2**40; then the stored length CRC must match,
    computed once per distinct length value. Zero-filled data (padding, silence) makes
    every position a plausible length-0 header: checking those one by one in Python
    cost microseconds per byte; here it is one CRC and a vector compare.
    ``last + 12 <= len(buf)`` is required (the caller keeps room for a whole header).
    """
    count = last - pos + 1
    if count <= 0:
        return iter(())
    # the 8-byte length and 4-byte CRC at every position, from unaligned zero-copy views
    lengths = np.empty(count, dtype=np.uint64)
    for k in range(8):
        n_k = (count - k + 7) // 8
        if n_k > 0:
            lengths[k::8] = np.frombuffer(buf, dtype="<u8", count=n_k, offset=pos + k)
    if size is not None:
        room = (size - base - FRAME_OVERHEAD - pos) - np.arange(count, dtype=np.int64)
        ok = lengths <= np.maximum(room, -1).astype(np.uint64)
        ok &= room >= 0
    else:
        ok = lengths < np.uint64(1 << 40)
    idx = np.flatnonzero(ok)
    if idx.size:
        stored = np.empty(count, dtype=np.uint32)
        for k in range(4):
            n_k = (count - k + 3) // 4
            if n_k > 0:
                stored[k::4] = np.frombuffer(buf, dtype="<u4", count=n_k, offset=pos + 8 + k)
        cand_len, cand_crc = lengths[idx], stored[idx]
        zero = cand_len == 0
        keep = np.zeros(idx.size, dtype=bool)
        keep[zero] = cand_crc[zero] == _ZERO_LENGTH_CRC
        nonzero = ~zero
        if nonzero.any():
            unique, inverse = np.unique(cand_len[nonzero], return_inverse=True)
            want = np.array([masked_crc32c(LENGTH_FIELD.pack(int(v))) for v in unique.tolist()], dtype=np.uint32)
            keep[nonzero] = want[inverse.reshape(-1)] == cand_crc[nonzero]
        idx = idx[keep]
    return (pos + int(i) for i in idx)


_ZERO_LENGTH_CRC = masked_crc32c(bytes(8))
