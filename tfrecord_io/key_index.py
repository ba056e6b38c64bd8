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

from . import files
from .crc import masked_crc32c
from .errors import CorruptRecordError, TFRecordError

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
    n = len(keys)
    key_offsets = np.zeros(n + 1, dtype="<u4")
    if n:
        np.cumsum(list(map(len, keys)), out=key_offsets[1:])
    blob = b"".join(keys)
    return b"".join(
        (
            struct.pack("<II", n, len(blob)),
            key_offsets.tobytes(),
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
    return Block(blob, koff.tolist(), shards, offsets, lengths, hashes)


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
        data = _encode_block(keys, shards, offsets, lengths, hashes)
        with files.errors_named(self.path):
            self._digest.write(data)
        self._blocks.append((bytes(keys[0]), self._pos, len(data), masked_crc32c(data), len(keys)))
        self._pos += len(data)
        self.entries += len(keys)

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
    """Positioned reads of one file: ``os.pread`` locally, one ranged GET on S3 and on GCS
    (the size known from ``tfrecord_io_info.json``, so no HEAD or metadata GET; on GCS
    through google-cloud-storage, ``gcs_clients.read_range``), Beam's filesystems elsewhere."""

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
        elif self.path.startswith("s3://") and not self._via_filesystems:
            from . import remote_reader

            if self._obj is None:
                self._obj = remote_reader.RemoteObject(self.path, int(cast(int, self.size)), "")
            data = remote_reader.read_range(self._obj, offset, offset + size)
        elif self.path.startswith("gs://") and not self._via_filesystems:
            from . import gcs_clients

            data = gcs_clients.read_range(self.path, offset, offset + size, files.filesystem_options())
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
        if sum(self._block_counts) != self.entries:
            raise KeyIndexError("corrupt key index: block counts do not add up to its entries", path)

    def __len__(self) -> int:
        return int(self.entries)

    @property
    def blocks(self) -> int:
        return len(self._firsts)

    def block(self, i: int, data: Any = None) -> Block:
        """Block ``i``, its CRC32C checked (``data``: its bytes, when already read)."""
        offset, size = self._block_offsets[i], self._block_sizes[i]
        if data is None:
            data = self._src.read(offset, size)
        if masked_crc32c(data) != self._block_crcs[i]:
            raise KeyIndexError(f"corrupt key index: block {i} does not match its CRC32C", self.path, offset)
        blk = _decode_block(data, self.path, offset)
        if len(blk) != self._block_counts[i]:
            raise KeyIndexError(
                f"corrupt key index: block {i} holds {len(blk)} entries, its footer says {self._block_counts[i]}",
                self.path,
                offset,
            )
        return blk

    def get(self, key: str) -> Optional[Entry]:
        """The entry of ``key``, or None: one bisect in memory, one block read."""
        k = key.encode("utf-8")
        i = bisect.bisect_right(self._firsts, k) - 1
        if i < 0:
            return None
        blk = self.block(i)
        j = blk.find(k)
        return None if j is None else blk.entry(j)

    def blocks_in_order(self) -> Iterator[Block]:
        """Every block, first to last (reads the file in runs of about 8 MB)."""
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
                yield self.block(b, run[pos : pos + self._block_sizes[b]])
                pos += self._block_sizes[b]
            i = j

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
    "KeyIndexError",
    "KeyIndexReader",
    "KeyIndexWriter",
    "check_frame_matches",
    "content_hash",
    "key_index_name",
    "write_key_index",
]
