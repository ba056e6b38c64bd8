"""Cutting a set of TFRecord files into ``n`` disjoint shards that together hold every
record exactly once, for readers that run as many parallel copies (DataLoader workers
times distributed ranks, or any other pool).

The files are laid end to end in the order given, as one virtual file, and that is cut
into ``n`` contiguous parts, so each shard opens only about ``files / n + 1`` files and
the parts are balanced however the records are spread over files:

- every plain file has an index: the cut is by **record count** (shard sizes differ by at
  most one record, and the records of the shards ``[r*k, (r+1)*k)`` are exactly the
  records of part ``r`` of a cut into ``n/k`` parts, whatever ``k`` is);
- otherwise the cut is by **bytes**, and a record belongs to the part in which it
  *begins* (``read_piece`` finds the first boundary of a part by the file's index, or by
  resynchronisation where it has none);
- compressed files cannot be cut: with at least as many compressed files as shards,
  file ``j`` goes whole to shard ``j % n``; with fewer, the shards ``s`` with
  ``s % files == j`` all read file ``j`` and each keeps every ``m``-th record
  (``m`` = how many shards share it), which costs each of them a full decompression.

Nothing here imports torch or Beam.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import IndexFileError
from ..storage import files
from .index import RecordIndex, find_index, load_index
from .random_access import read_indexed, scan_mapped
from .reader import read_records


@dataclass(frozen=True)
class FileInfo:
    """What the planner needs to know about one file."""

    path: str
    compression: str  # "" (plain), "gzip" or "zlib"
    size: int  # bytes as stored
    index: Optional[RecordIndex] = None
    #: only records ``first`` .. ``last - 1`` of the file (``last=None``: to its end), for
    #: reading a slice of a dataset; needs the index (``with_records``)
    first: int = 0
    last: Optional[int] = None

    @property
    def count(self) -> Optional[int]:
        """Records of the file this describes, when an index says (plain files only)."""
        if self.index is None:
            return None
        return (len(self.index) if self.last is None else self.last) - self.first

    def with_records(self, first: int, last: int) -> FileInfo:
        """This file restricted to records ``first`` .. ``last - 1`` (by its index)."""
        if self.index is None or self.compression:
            raise IndexFileError("reading part of a file by record number needs a plain file with an index", self.path)
        base_last = len(self.index) if self.last is None else self.last
        if not (0 <= first <= last <= base_last - self.first):
            raise ValueError(f"records [{first}, {last}) are not within the {base_last - self.first} of {self.path}")
        return replace(self, first=self.first + first, last=self.first + last)


@dataclass(frozen=True)
class Piece:
    """One contiguous read a shard makes: the records of ``path`` that begin in
    ``[start, end)`` (``end=None``: to the end), of which it keeps those whose running
    number ``k`` (from 0, counted over the piece) has ``k % every[1] == every[0]``."""

    path: str
    compression: str = ""
    start: int = 0
    end: Optional[int] = None
    index: Optional[RecordIndex] = None
    every: Tuple[int, int] = (0, 1)


def describe_file(path: str, index_path: Optional[str] = None, compression_type: Optional[str] = None) -> FileInfo:
    """Stat ``path`` and load its index (``index_path="auto"``: the one beside it, if any).

    A stale index (one that does not tile the file) is an ``IndexFileError``, since
    splitting by it would lose or repeat records; so is an index for a compressed file.
    """
    kind = files.normalize_compression(compression_type, path)
    size = files.file_size(path)
    if index_path == "auto":
        index_path = None if kind else find_index(path)
    index = None
    if index_path:
        if kind:
            raise IndexFileError(
                f"an index cannot describe a {kind.upper()} file (offsets in a compressed stream "
                f"cannot be seeked to); pass index_path=None for it",
                path,
            )
        index = load_index(index_path)
        if not index.matches(size):
            raise IndexFileError(
                f"index {index_path} does not describe this file (stale or for another file: it "
                f"covers {index.data_size} bytes in {len(index)} records, the file has {size}); rebuild it",
                path,
            )
    elif size == 0 and not kind:  # an empty plain file needs no index file to be counted
        index = RecordIndex(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    return FileInfo(path, kind, size, index)


def describe_files(
    paths: Sequence[str],
    index_paths: Optional[Sequence[Optional[str]]] = None,
    compression_type: Optional[str] = None,
) -> List[FileInfo]:
    """``describe_file`` for each path; ``index_paths`` is parallel to ``paths``."""
    if index_paths is None:
        index_paths = [None] * len(paths)
    if len(index_paths) != len(paths):
        raise ValueError(f"{len(paths)} data files but {len(index_paths)} index paths")
    return [describe_file(p, i, compression_type) for p, i in zip(paths, index_paths)]


def cut(total: int, shard: int, num_shards: int) -> Tuple[int, int]:
    """``[lo, hi)``: part ``shard`` of ``num_shards`` near-equal contiguous parts of ``range(total)``."""
    return total * shard // num_shards, total * (shard + 1) // num_shards


_cut = cut


def _check_shard(shard: int, num_shards: int) -> None:
    if num_shards < 1 or not (0 <= shard < num_shards):
        raise ValueError(f"shard {shard} is not in [0, {num_shards})")


def total_records(infos: Sequence[FileInfo]) -> Optional[int]:
    """Records of all the files (their ranges), or None when one is compressed or has no index."""
    if any(f.compression or f.index is None for f in infos):
        return None
    return sum(f.count or 0 for f in infos)


def plan_records(infos: Sequence[FileInfo], lo: int, hi: int) -> List[Piece]:
    """The pieces holding records ``lo`` .. ``hi - 1`` of the files laid end to end
    (each file's ``first``/``last`` range only); every file must be plain and indexed."""
    pieces: List[Piece] = []
    before = 0
    for f in infos:
        idx = f.index
        if idx is None or f.compression:
            raise IndexFileError("planning by record number needs plain files with indexes", f.path)
        extent = f.count or 0
        a, b = max(lo - before, 0), min(hi - before, extent)
        before += extent
        if a >= b:
            continue
        a, b = a + f.first, b + f.first
        start = int(idx.offsets[a])
        end = int(idx.offsets[b]) if b < len(idx) else None
        pieces.append(Piece(f.path, "", start, end, idx))
    return pieces


def _plain_pieces(plain: Sequence[FileInfo], shard: int, num_shards: int) -> List[Piece]:
    if all(f.index is not None for f in plain):
        return plan_records(plain, *_cut(sum(f.count or 0 for f in plain), shard, num_shards))
    if any(f.first or f.last is not None for f in plain):
        raise IndexFileError("a record range of a file needs every file indexed", plain[0].path)
    pieces: List[Piece] = []
    total = sum(f.size for f in plain)
    lo, hi = _cut(total, shard, num_shards)
    before = 0
    for f in plain:
        a, b = max(lo - before, 0), min(hi - before, f.size)
        before += f.size
        if a >= b:
            continue
        pieces.append(Piece(f.path, "", a, (b if b < f.size else None), f.index))
    return pieces


def _compressed_pieces(packed: Sequence[FileInfo], shard: int, num_shards: int) -> List[Piece]:
    count = len(packed)
    if count == 0:
        return []
    if count >= num_shards:
        return [Piece(f.path, f.compression) for j, f in enumerate(packed) if j % num_shards == shard]
    j = shard % count
    sharers = len(range(j, num_shards, count))
    return [Piece(packed[j].path, packed[j].compression, every=(shard // count, sharers))]


def plan_shard(infos: Sequence[FileInfo], shard: int, num_shards: int) -> List[Piece]:
    """The pieces shard ``shard`` of ``num_shards`` reads, in file order (see module doc)."""
    _check_shard(shard, num_shards)
    plain = [f for f in infos if not f.compression and f.size > 0]
    packed = [f for f in infos if f.compression]
    pieces = _plain_pieces(plain, shard, num_shards) + _compressed_pieces(packed, shard, num_shards)
    order = {f.path: k for k, f in enumerate(infos)}
    pieces.sort(key=lambda p: order[p.path])
    return pieces


def shard_count(infos: Sequence[FileInfo], shard: int, num_shards: int) -> Optional[int]:
    """Records shard ``shard`` of ``num_shards`` reads, when indexes tell (every file
    plain and indexed), else None. Equals the sum over the pieces of ``plan_shard``."""
    _check_shard(shard, num_shards)
    total = total_records(infos)
    if total is None:
        return None
    lo, hi = _cut(total, shard, num_shards)
    return hi - lo


def read_piece(piece: Piece, check_crc: bool = True) -> Iterator[Tuple[int, memoryview]]:
    """An iterator of ``(offset, data)`` for each record of ``piece`` (CRCs checked by
    default; a bad record raises ``CorruptRecordError``/``TruncatedRecordError`` with path
    and offset).

    Local plain files are memory-mapped and read in place: by the index
    (``random_access.read_indexed``) or, without one, by a scan that resynchronises at
    the piece's start (``random_access.scan_mapped``); compressed and remote files are
    streamed (``reader.read_records``). The reader's own iterator is returned when the
    piece keeps every record (no generator layered on it: a fraction of a microsecond
    per record, which batched readers notice)."""
    if piece.index is not None and not piece.compression:
        idx = piece.index
        first = idx.first_at_or_after(piece.start)
        last = len(idx) if piece.end is None else idx.first_at_or_after(piece.end)
        records: Iterator[Tuple[int, memoryview]] = read_indexed(piece.path, idx, first, last, check_crc)
    elif not piece.compression and not files.is_remote(piece.path):
        records = scan_mapped(piece.path, piece.start, piece.end, check_crc)
    else:
        records = read_records(  # type: ignore[assignment]
            piece.path,
            piece.start,
            piece.end,
            compression_type=piece.compression,
            check_crc=check_crc,
            index=piece.index,
        )
    k, m = piece.every
    if m == 1:
        return records
    return (record for n, record in enumerate(records) if n % m == k)


__all__ = [
    "FileInfo",
    "Piece",
    "cut",
    "describe_file",
    "describe_files",
    "plan_records",
    "plan_shard",
    "read_piece",
    "shard_count",
    "total_records",
]
