"""The key index of a built dataset's split: key -> (shard, record offset, record length,
content hash), sorted by key, in one file per split (``<version>/<name>-<split>.keyindex``).

Why this format and not Parquet or a SQLite file: a lookup on an object store must cost
one ranged GET for the index and one for the record. Here the file is a run of blocks of
``BLOCK_ENTRIES`` entries sorted by key, then a footer with each block's first key,
position, size and CRC32C, then a fixed 32-byte trailer. A reader loads the footer once
(one ranged read from the end: the trailer and, for up to a few million rows, the
footer with it), then each key costs one bisect over the first keys and one ranged read
of one block (about 15 KB), checked against its CRC32C. Parquet's reader asks for the
footer, then each column chunk (several GETs per probe) and would pull pyarrow into the
format layer; a sorted table of our own is 150 lines, streams from a sort without
holding the table twice, and is read the same way locally (``pread``) and remotely.

Layout (little-endian)::

    block*    u32 n | u32 key_bytes | u32[n+1] key offsets | key bytes
              | u32[n] shard | u64[n] record offset | u32[n] record length | 16 B[n] hash
    footer    u32 blocks | u64[b] block offset | u32[b] block size | u32[b] block CRC32C
              | u32[b] entries | u32[b+1] first-key offsets | first keys
    trailer   u64 footer offset | u32 footer size | u32 footer CRC32C | u64 entries | b"TFRKEYS1"

Keys are UTF-8 strings compared as bytes (so the order is the same in every language);
``offset`` is the frame's offset in its shard, ``length`` the record's data length (the
frame is ``length + 16`` bytes), ``hash`` the first 16 bytes of the BLAKE2b digest of
the encoded Example (what ``diff`` compares). Size: 36 bytes per entry plus the key
(12-character keys: 48 MB per million rows, measured; 0.1% of a dataset of 50 KB
images), and a footer of a block's first key per 256 entries. Nothing here imports Beam or torch.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import struct
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, cast

import numpy as np

from ..errors import CorruptRecordError, TFRecordError
from ..storage import files
from .crc import masked_crc32c

MAGIC = b"TFRKEYS1"
TRAILER = struct.Struct("<QIIQ8s")
BLOCK_ENTRIES = 256
HASH_BYTES = 16
#: bytes read from the end on open: the trailer and, for indexes up to ~2M rows, the footer too
TAIL_READ = 256 << 10
SUFFIX = ".keyindex"


class KeyIndexError(TFRecordError):
    """A key index is missing, unreadable or corrupt (names the file)."""


class Entry(NamedTuple):
    """One row of a key index."""

    key: str
    shard: int
    offset: int
    length: int
    hash: bytes


def content_hash(data: Any) -> bytes:
    """The content hash of an encoded Example as the index stores it (16 bytes of BLAKE2b:
    faster than SHA-256 where the CPU has no SHA instructions, and collision-safe at any
    dataset size; CRC32C would collide within a hundred thousand rows)."""
    return hashlib.blake2b(data, digest_size=HASH_BYTES).digest()


def key_index_name(name: str, split: str) -> str:
    """The key index file of ``split`` in a version directory."""
    return f"{name}-{split}{SUFFIX}"


def _encode_block(keys: Sequence[bytes], shards, offsets, lengths, hashes: bytes) -> bytes:
    key_offsets = np.zeros(len(keys) + 1, dtype="<u4")
    if len(keys):
        np.cumsum(list(map(len, keys)), out=key_offsets[1:])
    return _encode_columns(key_offsets, b"".join(keys), shards, offsets, lengths, hashes)


def _encode_columns(key_offsets: Any, blob: bytes, shards, offsets, lengths, hashes: bytes) -> bytes:
    """One block from its columns (``key_offsets``: n + 1 offsets into ``blob``, from 0)."""
    n = len(key_offsets) - 1
    return b"".join(
        (
            struct.pack("<II", n, len(blob)),
            np.asarray(key_offsets, dtype="<u4").tobytes(),
            blob,
            np.asarray(shards, dtype="<u4").tobytes(),
            np.asarray(offsets, dtype="<u8").tobytes(),
            np.asarray(lengths, dtype="<u4").tobytes(),
            hashes,
        )
    )


class _KeyView:
    """The keys of a block as a sequence, each cut from the block's key bytes when asked
    for: a probe bisects about eight of a block's keys, so cutting all 256 would cost more
    than the probe."""

    def __init__(self, blob: bytes, bounds: List[int]):
        self._blob = blob
        self._bounds = bounds

    def __len__(self) -> int:
        return len(self._bounds) - 1

    def __getitem__(self, i: int) -> bytes:
        return self._blob[self._bounds[i] : self._bounds[i + 1]]


@dataclass
class Block:
    """One decoded block: its keys (bytes, cut on demand) and their columns."""

    blob: bytes
    bounds: List[int]
    shards: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray
    hashes: bytes

    def __len__(self) -> int:
        return len(self.bounds) - 1

    @property
    def keys(self) -> List[bytes]:
        """Every key of the block (for scans)."""
        b = self.bounds
        return list(map(self.blob.__getitem__, map(slice, b[:-1], b[1:])))

    def key(self, i: int) -> bytes:
        return self.blob[self.bounds[i] : self.bounds[i + 1]]

    def entry(self, i: int) -> Entry:
        return Entry(
            self.key(i).decode("utf-8"),
            int(self.shards[i]),
            int(self.offsets[i]),
            int(self.lengths[i]),
            self.hashes[i * HASH_BYTES : (i + 1) * HASH_BYTES],
        )

    def find(self, key: bytes) -> Optional[int]:
        view = _KeyView(self.blob, self.bounds)
        i = bisect.bisect_left(view, key)  # type: ignore[unused-ignore]  # a sequence, as bisect takes
        return i if i < len(view) and view[i] == key else None


def _decode_block(buf: Any, path: str, offset: int) -> Block:
    koff, blob, shards, offsets, lengths, hashes = _decode_arrays(buf, path, offset)
    return Block(blob, koff.tolist(), shards, offsets, lengths, hashes)


def _decode_arrays(buf: Any, path: str, offset: int) -> Tuple[np.ndarray, bytes, Any, Any, Any, bytes]:
    """A block's key offsets (n + 1), key bytes, shard, offset and length columns, hashes."""
    mv = memoryview(buf)
    try:
        n, kbytes = struct.unpack_from("<II", mv, 0)
        pos = 8
        koff = np.frombuffer(mv, dtype="<u4", count=n + 1, offset=pos)
        pos += 4 * (n + 1)
        blob = bytes(mv[pos : pos + kbytes])
        pos += kbytes
        shards = np.frombuffer(mv, dtype="<u4", count=n, offset=pos)
        pos += 4 * n
        offsets = np.frombuffer(mv, dtype="<u8", count=n, offset=pos)
        pos += 8 * n
        lengths = np.frombuffer(mv, dtype="<u4", count=n, offset=pos)
        pos += 4 * n
        hashes = bytes(mv[pos : pos + HASH_BYTES * n])
    except (struct.error, ValueError) as err:
        raise KeyIndexError(f"corrupt key index block ({err})", path, offset) from None
    return koff, blob, shards, offsets, lengths, hashes


@dataclass
class KeyColumns:
    """Entries as columns, the keys back to back in one blob (``bounds``: each key's start,
    and the end): what a merge of two key indexes moves as whole arrays, so that
    carrying a million entries into the next version costs numpy's time, not a Python
    step per entry. Keys ascend where a method says so."""

    blob: bytes
    bounds: np.ndarray  # int64, len n + 1
    shards: np.ndarray  # int64
    offsets: np.ndarray  # int64
    lengths: np.ndarray  # int64
    hashes: bytes  # HASH_BYTES per entry

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def key(self, i: int) -> bytes:
        return self.blob[int(self.bounds[i]) : int(self.bounds[i + 1])]

    @classmethod
    def empty(cls) -> KeyColumns:
        z = np.zeros(0, dtype=np.int64)
        return cls(b"", np.zeros(1, dtype=np.int64), z, z, z, b"")

    @classmethod
    def from_entries(cls, keys: Sequence[bytes], shards: Any, offsets: Any, lengths: Any, hashes: bytes) -> KeyColumns:
        bounds = np.zeros(len(keys) + 1, dtype=np.int64)
        if len(keys):
            np.cumsum(list(map(len, keys)), out=bounds[1:])
        return cls(
            b"".join(keys),
            bounds,
            np.asarray(shards, dtype=np.int64),
            np.asarray(offsets, dtype=np.int64),
            np.asarray(lengths, dtype=np.int64),
            bytes(hashes),
        )

    @classmethod
    def concat(cls, parts: Sequence[KeyColumns]) -> KeyColumns:
        """The parts one after the other (sorted only if they are and do not overlap)."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        shifted = [parts[0].bounds[:1]]
        base = 0
        for p in parts:
            shifted.append(p.bounds[1:] - p.bounds[0] + base)
            base += int(p.bounds[-1] - p.bounds[0])
        return cls(
            b"".join(p.blob[int(p.bounds[0]) : int(p.bounds[-1])] for p in parts),
            np.concatenate(shifted) - parts[0].bounds[0],
            np.concatenate([p.shards for p in parts]),
            np.concatenate([p.offsets for p in parts]),
            np.concatenate([p.lengths for p in parts]),
            b"".join(p.hashes for p in parts),
        )

    def _hash_rows(self) -> np.ndarray:
        return np.frombuffer(self.hashes, dtype=f"V{HASH_BYTES}")

    def take(self, rows: np.ndarray) -> KeyColumns:
        """The entries at ``rows`` (indices, in that order): a Python step per entry, for
        the few entries an append adds."""
        idx = rows.tolist()
        return KeyColumns.from_entries(
            [self.key(i) for i in idx],
            self.shards[rows],
            self.offsets[rows],
            self.lengths[rows],
            self._hash_rows()[rows].tobytes() if len(idx) else b"",
        )

    def sorted(self) -> KeyColumns:
        """The entries by key; a key twice is a ``ValueError`` naming it."""
        keys = [self.key(i) for i in range(len(self))]
        order = sorted(range(len(keys)), key=keys.__getitem__)
        for a, b in zip(order, order[1:]):
            if keys[a] == keys[b]:
                raise ValueError(f"key {keys[a].decode('utf-8', 'replace')!r} given twice")
        return self.take(np.asarray(order, dtype=np.int64))

    def kept(self, keep: np.ndarray) -> KeyColumns:
        """The entries where ``keep`` is True, in order: the key bytes cut in runs (one
        slice per run of kept entries), so dropping a few of a million costs a few slices."""
        if bool(keep.all()):
            return self
        rows = np.flatnonzero(keep)
        lens = (self.bounds[1:] - self.bounds[:-1])[rows]
        bounds = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lens, out=bounds[1:])
        # runs of consecutive kept rows: [starts[i], ends[i])
        breaks = np.flatnonzero(np.diff(rows) != 1) + 1
        starts = np.concatenate(([0], breaks)) if len(rows) else np.zeros(0, dtype=np.int64)
        ends = np.concatenate((breaks, [len(rows)])) if len(rows) else np.zeros(0, dtype=np.int64)
        b = self.bounds
        blob = b"".join(
            self.blob[int(b[rows[s]]) : int(b[rows[e - 1] + 1])] for s, e in zip(starts.tolist(), ends.tolist())
        )
        return KeyColumns(
            blob,
            bounds,
            self.shards[rows],
            self.offsets[rows],
            self.lengths[rows],
            self._hash_rows()[rows].tobytes() if len(rows) else b"",
        )

    def merged(self, other: KeyColumns) -> KeyColumns:
        """Both sorted sets of entries as one, by key: ``other`` (the few) placed into
        ``self`` (the many) by one bisect per entry, the rest moved as whole arrays. A key
        in both is a ``ValueError`` naming it (a merge's caller removes replaced keys first)."""
        if not len(other):
            return self
        view = _KeyView(self.blob, self.bounds.tolist())
        at: List[int] = []
        for i in range(len(other)):
            k = other.key(i)
            j = bisect.bisect_left(view, k)  # type: ignore[unused-ignore]  # a sequence, as bisect takes
            if j < len(view) and view[j] == k:
                raise ValueError(f"key {k.decode('utf-8', 'replace')!r} given twice")
            at.append(j)
        pos = np.asarray(at, dtype=np.int64)
        cut = [0, *self.bounds[pos].tolist(), int(self.bounds[-1])]
        pieces: List[bytes] = []
        for i in range(len(other)):
            pieces.append(self.blob[cut[i] : cut[i + 1]])
            pieces.append(other.key(i))
        pieces.append(self.blob[cut[-2] : cut[-1]])
        lens = np.insert(self.bounds[1:] - self.bounds[:-1], pos, other.bounds[1:] - other.bounds[:-1])
        bounds = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(lens, out=bounds[1:])
        hashes = np.insert(self._hash_rows(), pos, other._hash_rows())
        return KeyColumns(
            b"".join(pieces),
            bounds,
            np.insert(self.shards, pos, other.shards),
            np.insert(self.offsets, pos, other.offsets),
            np.insert(self.lengths, pos, other.lengths),
            hashes.tobytes(),
        )


class KeyIndexWriter:
    """Writes a key index from entries given in strictly ascending key order.

    ``sha256``, ``bytes`` and ``entries`` are set on :meth:`close` (for the version's
    ``tfrecord_io_info.json``). Local files are written under a temporary name and
    renamed; on an object store the upload becomes visible only once complete."""

    def __init__(self, path: str, block_entries: int = BLOCK_ENTRIES):
        self.path = path
        self._block_entries = block_entries
        self._atomic = not files.is_remote(path)
        self._target = files.temp_path_beside(path) if self._atomic else path
        if self._atomic:
            os.makedirs(os.path.dirname(os.path.abspath(self._target)), exist_ok=True)
        self._digest = files.DigestingWriter(files.open_raw(self._target, "wb"))
        self._pos = 0
        self._pending: List[Tuple[bytes, int, int, int, bytes]] = []
        self._last: Optional[bytes] = None
        self._blocks: List[Tuple[bytes, int, int, int, int]] = []  # first key, offset, size, crc, n
        self.entries = 0
        self.sha256: Optional[str] = None
        self.bytes: Optional[int] = None

    def add(self, key: Any, shard: int, offset: int, length: int, hash_: bytes) -> None:
        k = key.encode("utf-8") if isinstance(key, str) else bytes(key)
        if self._last is not None and k <= self._last:
            what = "twice" if k == self._last else "out of order"
            raise ValueError(f"{self.path}: key {k.decode('utf-8', 'replace')!r} given {what}")
        if len(hash_) != HASH_BYTES:
            raise ValueError(f"a content hash has {HASH_BYTES} bytes, got {len(hash_)}")
        self._last = k
        self._pending.append((k, shard, offset, length, hash_))
        if len(self._pending) >= self._block_entries:
            self._flush()

    def add_all(self, entries: Iterable[Entry]) -> None:
        for e in entries:
            self.add(e.key, e.shard, e.offset, e.length, e.hash)

    def add_many(self, keys: Sequence[bytes], shards, offsets, lengths, hashes: bytes) -> None:
        """Many entries at once (columns; ``hashes`` the 16-byte hashes back to back), in
        ascending key order: the bulk path of the build's merge, without a call per entry."""
        n = len(keys)
        if len(hashes) != HASH_BYTES * n:
            raise ValueError(f"{n} keys but {len(hashes) // HASH_BYTES} content hashes")
        if n == 0:
            return
        first = keys[0]
        if self._last is not None and first <= self._last:
            raise ValueError(f"{self.path}: key {first.decode('utf-8', 'replace')!r} given twice or out of order")
        bad = next((i for i in range(1, n) if keys[i] <= keys[i - 1]), None)
        if bad is not None:
            what = "twice" if keys[bad] == keys[bad - 1] else "out of order"
            raise ValueError(f"{self.path}: key {keys[bad].decode('utf-8', 'replace')!r} given {what}")
        self._flush_pending()
        shards = np.asarray(shards, dtype="<u4")
        offsets = np.asarray(offsets, dtype="<u8")
        lengths = np.asarray(lengths, dtype="<u4")
        step = self._block_entries
        for a in range(0, n, step):
            b = min(a + step, n)
            self._write_block(
                keys[a:b], shards[a:b], offsets[a:b], lengths[a:b], hashes[a * HASH_BYTES : b * HASH_BYTES]
            )
        self._last = keys[-1]

    def add_columns(self, cols: KeyColumns) -> None:
        """Entries given as columns, already in ascending key order (read from key indexes,
        whose order was checked when they were written, and combined by
        :meth:`KeyColumns.merged`): each block cut from the arrays, no Python step per
        entry. The seam with what was written before is checked."""
        n = len(cols)
        if n == 0:
            return
        first = cols.key(0)
        self._flush_pending()
        if self._last is not None and first <= self._last:
            raise ValueError(f"{self.path}: key {first.decode('utf-8', 'replace')!r} given twice or out of order")
        bounds = cols.bounds
        step = self._block_entries
        for a in range(0, n, step):
            b = min(a + step, n)
            lo, hi = int(bounds[a]), int(bounds[b])
            self._write_encoded(
                _encode_columns(
                    bounds[a : b + 1] - lo,
                    cols.blob[lo:hi],
                    cols.shards[a:b],
                    cols.offsets[a:b],
                    cols.lengths[a:b],
                    cols.hashes[a * HASH_BYTES : b * HASH_BYTES],
                ),
                cols.blob[lo : int(bounds[a + 1])],
                b - a,
            )
        self._last = cols.key(n - 1)

    def _flush_pending(self) -> None:
        """Write what ``add`` gathered (a last, shorter block when more follows in bulk)."""
        self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        keys, shards, offsets, lengths, hashes = zip(*self._pending)
        self._pending = []
        self._write_block(keys, shards, offsets, lengths, b"".join(hashes))

    def _write_block(self, keys: Sequence[bytes], shards, offsets, lengths, hashes: bytes) -> None:
        self._write_encoded(_encode_block(keys, shards, offsets, lengths, hashes), bytes(keys[0]), len(keys))

    def _write_encoded(self, data: bytes, first_key: bytes, entries: int) -> None:
        with files.errors_named(self.path):
            self._digest.write(data)
        self._blocks.append((first_key, self._pos, len(data), masked_crc32c(data), entries))
        self._pos += len(data)
        self.entries += entries

    def close(self) -> None:
        self._flush()
        b = len(self._blocks)
        firsts = [blk[0] for blk in self._blocks]
        first_offsets = np.zeros(b + 1, dtype="<u4")
        if b:
            np.cumsum([len(k) for k in firsts], out=first_offsets[1:])
        footer = b"".join(
            (
                struct.pack("<I", b),
                np.array([blk[1] for blk in self._blocks], dtype="<u8").tobytes(),
                np.array([blk[2] for blk in self._blocks], dtype="<u4").tobytes(),
                np.array([blk[3] for blk in self._blocks], dtype="<u4").tobytes(),
                np.array([blk[4] for blk in self._blocks], dtype="<u4").tobytes(),
                first_offsets.tobytes(),
                b"".join(firsts),
            )
        )
        with files.errors_named(self.path):
            self._digest.write(footer)
            self._digest.write(TRAILER.pack(self._pos, len(footer), masked_crc32c(footer), self.entries, MAGIC))
            self._digest.close()
        self.sha256 = self._digest.hexdigest()
        self.bytes = self._digest.size
        if self._atomic:
            os.replace(self._target, files._local(self.path))

    def abort(self) -> None:
        try:
            files.close_quietly(self._digest)
        finally:
            if self._atomic and os.path.exists(self._target):
                os.remove(self._target)


def write_key_index(path: str, entries: Iterable[Entry]) -> KeyIndexWriter:
    """Write ``entries`` (ascending keys) to ``path``; the closed writer (sha256, bytes)."""
    writer = KeyIndexWriter(path)
    try:
        writer.add_all(entries)
        writer.close()
    except BaseException:
        writer.abort()
        raise
    return writer


class _Source:
    """Positioned reads of one file: ``os.pread`` locally, one ranged GET on S3, GCS and
    Azure (the size known from ``tfrecord_io_info.json``, so no HEAD or metadata GET;
    with the credentials the command's Beam reads were given), Beam's filesystems
    elsewhere.

    On S3, GCS and Azure each object is pinned to the version its first read got
    (``range_reads.PinOnFirstRead``: that read's ETag or generation, taken from its own
    response, so a look-up still costs one GET per read), and every later read asks for
    that version: an index or shard replaced between two look-ups is a
    ``RemoteObjectChangedError`` naming it, not bytes of two versions that its CRCs would
    call corrupt. On S3 and Azure the first read's ``Content-Range`` total must also be
    ``size``."""

    def __init__(
        self, path: str, size: Optional[int] = None, data: Optional[bytes] = None, via_filesystems: bool = False
    ):
        self.path = path
        self._data = data
        self._via_filesystems = via_filesystems
        self.size = len(data) if data is not None else size
        self._fd: Optional[int] = None
        self._pid = os.getpid()
        self._obj: Any = None
        self._handle: Optional[BinaryIO] = None
        if self.size is None:
            self.size = files.file_size(path)

    def read(self, offset: int, size: int) -> Any:
        if self._data is not None:
            data: Any = memoryview(self._data)[offset : offset + size]
            if len(data) != size:
                raise KeyIndexError(f"short read: {len(data)} of {size} bytes at {offset}", self.path, offset)
            return data
        if self._pid != os.getpid():
            self._fd, self._handle, self._pid = None, None, os.getpid()
        if not files.is_remote(self.path):
            if self._fd is None:
                self._fd = os.open(files._local(self.path), os.O_RDONLY)
            data = os.pread(self._fd, size, offset)
        elif self.path.startswith(("s3://", "gs://", "azfs://")) and not self._via_filesystems:
            if self._obj is None:
                from ..storage import range_reads

                self._obj = range_reads.PinOnFirstRead(self.path, int(cast(int, self.size)))
            data = self._obj.read(offset, offset + size)
        else:
            if self._handle is None:
                self._handle = files.open_raw(self.path, "rb")
            self._handle.seek(offset)
            data = self._handle.read(size)
        if len(data) != size:
            raise KeyIndexError(f"short read: {len(data)} of {size} bytes at {offset}", self.path, offset)
        return data

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = None
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class KeyIndexReader:
    """Probes and scans of one key index. Opening reads the footer (one read from the
    end); :meth:`get` then costs one read of one block. ``size``: the file's size when
    known (``tfrecord_io_info.json``: no stat, no HEAD); ``data``: the whole file, already
    read (a Beam worker reads it through Beam's filesystems, with the job's credentials);
    ``via_filesystems``: a remote file read through Beam's filesystems rather than ranged
    GETs of our own (which take boto3's or Google's usual credentials, not the job's
    ``--s3_*`` options): for whole scans by a command given pipeline flags (``diff``)."""

    def __init__(
        self, path: str, size: Optional[int] = None, data: Optional[bytes] = None, via_filesystems: bool = False
    ):
        self.path = path
        self._src = _Source(path, size, data, via_filesystems)
        total = int(cast(int, self._src.size))
        if total < TRAILER.size:
            raise KeyIndexError(f"not a key index: {total} bytes, shorter than its trailer", path)
        tail_start = max(0, total - TAIL_READ)
        tail = self._src.read(tail_start, total - tail_start)
        footer_at, footer_size, footer_crc, self.entries, magic = TRAILER.unpack_from(tail, len(tail) - TRAILER.size)
        if magic != MAGIC:
            raise KeyIndexError(f"not a key index (magic {bytes(magic)!r}, expected {MAGIC!r})", path)
        if footer_at + footer_size + TRAILER.size != total:
            raise KeyIndexError("corrupt key index: its trailer does not match its size", path)
        if footer_at >= tail_start:
            footer = memoryview(tail)[footer_at - tail_start : footer_at - tail_start + footer_size]
        else:
            footer = memoryview(self._src.read(footer_at, footer_size))
        if masked_crc32c(footer) != footer_crc:
            raise KeyIndexError("corrupt key index: its footer does not match its CRC32C", path, footer_at)
        (b,) = struct.unpack_from("<I", footer, 0)
        pos = 4
        self._block_offsets = np.frombuffer(footer, dtype="<u8", count=b, offset=pos).tolist()
        pos += 8 * b
        self._block_sizes = np.frombuffer(footer, dtype="<u4", count=b, offset=pos).tolist()
        pos += 4 * b
        self._block_crcs = np.frombuffer(footer, dtype="<u4", count=b, offset=pos).tolist()
        pos += 4 * b
        self._block_counts = np.frombuffer(footer, dtype="<u4", count=b, offset=pos).tolist()
        pos += 4 * b
        bounds = np.frombuffer(footer, dtype="<u4", count=b + 1, offset=pos).tolist()
        pos += 4 * (b + 1)
        blob = bytes(footer[pos : pos + (bounds[-1] if b else 0)])
        self._firsts = [blob[bounds[i] : bounds[i + 1]] for i in range(b)]
        self._last_block: Optional[Tuple[int, Block]] = None
        if sum(self._block_counts) != self.entries:
            raise KeyIndexError("corrupt key index: block counts do not add up to its entries", path)

    def __len__(self) -> int:
        return int(self.entries)

    @property
    def blocks(self) -> int:
        return len(self._firsts)

    def block(self, i: int, data: Any = None) -> Block:
        """Block ``i``, its CRC32C checked (``data``: its bytes, when already read)."""
        koff, blob, shards, offsets, lengths, hashes = self._block_arrays(i, data)
        return Block(blob, koff.tolist(), shards, offsets, lengths, hashes)

    def _block_arrays(self, i: int, data: Any = None) -> Tuple[np.ndarray, bytes, Any, Any, Any, bytes]:
        offset, size = self._block_offsets[i], self._block_sizes[i]
        if data is None:
            data = self._src.read(offset, size)
        if masked_crc32c(data) != self._block_crcs[i]:
            raise KeyIndexError(f"corrupt key index: block {i} does not match its CRC32C", self.path, offset)
        arrays = _decode_arrays(data, self.path, offset)
        if len(arrays[2]) != self._block_counts[i]:
            raise KeyIndexError(
                f"corrupt key index: block {i} holds {len(arrays[2])} entries, its footer says {self._block_counts[i]}",
                self.path,
                offset,
            )
        return arrays

    def get(self, key: str) -> Optional[Entry]:
        """The entry of ``key``, or None: one bisect in memory, one block read (none when
        the block is the one the last probe read: keys probed in order, as an append's
        new keys are, mostly share blocks)."""
        k = key.encode("utf-8")
        i = bisect.bisect_right(self._firsts, k) - 1
        if i < 0:
            return None
        last = self._last_block  # one read of the attribute: safe beside other threads
        if last is not None and last[0] == i:
            blk = last[1]
        else:
            blk = self.block(i)
            self._last_block = (i, blk)
        j = blk.find(k)
        return None if j is None else blk.entry(j)

    def blocks_in_order(self) -> Iterator[Block]:
        """Every block, first to last (reads the file in runs of about 8 MB)."""
        for i, data in self._raw_blocks():
            yield self.block(i, data)

    def _raw_blocks(self) -> Iterator[Tuple[int, Any]]:
        """Each block's number and bytes, unchecked, first to last, read in runs of ~8 MB."""
        i = 0
        n = len(self._firsts)
        while i < n:
            j, size = i, 0
            while j < n and (size == 0 or size + self._block_sizes[j] <= 8 << 20):
                size += self._block_sizes[j]
                j += 1
            run = memoryview(self._src.read(self._block_offsets[i], size))
            pos = 0
            for b in range(i, j):
                yield b, run[pos : pos + self._block_sizes[b]]
                pos += self._block_sizes[b]
            i = j

    def columns(self) -> KeyColumns:
        """Every entry as columns, in key order (each block's CRC32C checked)."""
        blobs: List[bytes] = []
        bounds: List[np.ndarray] = [np.zeros(1, dtype=np.int64)]
        shards: List[np.ndarray] = []
        offsets: List[np.ndarray] = []
        lengths: List[np.ndarray] = []
        hashes: List[bytes] = []
        base = 0
        for i, data in self._raw_blocks():
            koff, blob, shard, offset, length, hash_ = self._block_arrays(i, data)
            blobs.append(blob)
            bounds.append(koff[1:].astype(np.int64) + base)
            base += int(koff[-1])
            shards.append(shard)
            offsets.append(offset)
            lengths.append(length)
            hashes.append(hash_)
        if not blobs:
            return KeyColumns.empty()
        return KeyColumns(
            b"".join(blobs),
            np.concatenate(bounds),
            np.concatenate(shards).astype(np.int64),
            np.concatenate(offsets).astype(np.int64),
            np.concatenate(lengths).astype(np.int64),
            b"".join(hashes),
        )

    def __iter__(self) -> Iterator[Entry]:
        for blk in self.blocks_in_order():
            for i in range(len(blk)):
                yield blk.entry(i)

    def close(self) -> None:
        self._src.close()

    def __enter__(self) -> KeyIndexReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def check_frame_matches(entry: Entry, data: Any, path: str) -> None:
    """The record read for ``entry`` is the one indexed (its content hash)."""
    if content_hash(data) != entry.hash:
        raise CorruptRecordError(
            f"record of key {entry.key!r} does not match the key index's content hash", path, entry.offset
        )


__all__ = [
    "BLOCK_ENTRIES",
    "Entry",
    "KeyColumns",
    "KeyIndexError",
    "KeyIndexReader",
    "KeyIndexWriter",
    "check_frame_matches",
    "content_hash",
    "key_index_name",
    "write_key_index",
]
