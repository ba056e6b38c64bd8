"""Reading TFRecord files: whole files, byte ranges, shards, and the ``tfrecord``
package's loader functions (same names and arguments).

``shard=(i, n)`` gives every record to exactly one of ``n`` shards, with an index
(records split by count) or without one (bytes split evenly, each range starting at
the first record boundary found by resynchronisation), which the ``tfrecord`` package
cannot do without duplicating records. A compressed file cannot be cut: each shard
reads the stream and keeps every ``n``-th record.

Every reader takes ``max_record_bytes`` (default ``DEFAULT_MAX_RECORD_BYTES``, 1 GiB;
``None``: no limit): a record over it raises ``RecordTooLargeError`` naming the file,
offset and size before any memory is allocated for it. A record is held in memory
once (one buffer of its size; the views handed out point into it).
"""

from __future__ import annotations

from collections import deque
from operator import itemgetter
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from .. import iterator_utils
from ..errors import ExampleCodecError, IndexFileError
from ..storage import files
from .codec import Description, parse_example_stream, parse_sequence_example
from .framing import DEFAULT_CHUNK_SIZE, DEFAULT_MAX_RECORD_BYTES, CorruptRegion, FrameStream
from .index import RecordIndex, load_index

IndexLike = Union[None, str, RecordIndex]
_second = itemgetter(1)


def _as_index(index: IndexLike) -> Optional[RecordIndex]:
    if index is None or isinstance(index, RecordIndex):
        return index
    return load_index(index)


def read_records(
    path: str,
    start: int = 0,
    end: Optional[int] = None,
    *,
    compression_type: Optional[str] = None,
    check_crc: bool = True,
    index: IndexLike = None,
    on_corrupt: str = "raise",
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    max_record_bytes: Optional[int] = DEFAULT_MAX_RECORD_BYTES,
) -> Iterator[Tuple[int, Union[memoryview, CorruptRegion]]]:
    """Yield ``(offset, data)`` for each record that *begins* in bytes ``[start, end)``.

    Ranges that tile a file read each record exactly once. Where ``start`` is not a
    record boundary, reading begins at the first record at or after it: taken from
    ``index`` when given, else found by resynchronisation. ``on_corrupt="raise"``
    (default) raises ``CorruptRecordError``/``TruncatedRecordError`` with the path and
    offset; ``"report"`` yields ``(offset, CorruptRegion)`` for each bad region that
    begins in the range and carries on after it.

    ``check_crc=False`` skips both CRC checks: only for data you trust, as a corrupt
    length is then only caught by the bounds check. A record over ``max_record_bytes``
    raises ``RecordTooLargeError`` (also with ``on_corrupt="report"``).
    """
    if on_corrupt not in ("raise", "report"):
        raise ValueError("on_corrupt must be 'raise' or 'report'")
    if start < 0:
        raise ValueError(f"{path}: byte range start {start} is negative")
    kind = files.normalize_compression(compression_type, path)
    if kind and (start != 0 or end is not None):
        raise ValueError(f"{path}: a {kind.upper()} file cannot be read by byte range; read it whole")
    if end is not None and end <= start:
        return
    idx = _as_index(index)
    size = None if kind else files.file_size(path)
    with files.open_read(path, kind) as raw:
        first = start
        if start > 0 and idx is not None:
            i = idx.first_at_or_after(start)
            if i >= len(idx):
                return
            first = int(idx.offsets[i])
            if end is not None and first >= end:
                return
        if first:
            raw.seek(first)
        stream = FrameStream(
            raw,
            path=path,
            offset=first,
            size=size,
            chunk_size=chunk_size,
            check_crc=check_crc,
            max_record_bytes=max_record_bytes,
        )
        if start > 0 and idx is None:
            if not stream.resync(limit=end):
                return
        yield from stream.frames(stop=end, report_corrupt=on_corrupt == "report")


def record_ranges(size: int, n: int) -> List[Tuple[int, int]]:
    """Split ``[0, size)`` into ``n`` nearly equal byte ranges."""
    return [(size * i // n, size * (i + 1) // n) for i in range(n)]


def shard_range(path: str, shard: Tuple[int, int], index: Optional[RecordIndex]) -> Tuple[int, Optional[int]]:
    """The byte range ``[start, end)`` of shard ``i`` of ``n`` of an uncompressed file."""
    i, n = shard
    if not (0 <= i < n):
        raise ValueError(f"shard index {i} is not in [0, {n})")
    if index is not None:
        count = len(index)
        a, b = count * i // n, count * (i + 1) // n
        if a >= b:
            return 0, 0
        end = int(index.offsets[b]) if b < count else None
        return int(index.offsets[a]), end
    size = files.file_size(path)
    start, end = record_ranges(size, n)[i]
    return start, end


def tfrecord_iterator(
    data_path: str,
    index_path: Optional[str] = None,
    shard: Optional[Tuple[int, int]] = None,
    compression_type: Optional[str] = None,
    check_crc: bool = True,
    max_record_bytes: Optional[int] = DEFAULT_MAX_RECORD_BYTES,
) -> Iterator[memoryview]:
    """Yield each record's data (a ``memoryview``) of ``data_path``, or of one shard of it.

    Drop-in for ``tfrecord.reader.tfrecord_iterator``; the views stay valid after
    iteration moves on, and both CRCs are checked unless ``check_crc=False``.
    """
    # map/itemgetter drop the offsets in C: no Python-level loop step per record
    yield from map(
        _second, _offset_records(data_path, index_path, shard, compression_type, check_crc, max_record_bytes)
    )


def _offset_records(
    data_path: str,
    index_path: Optional[str],
    shard: Optional[Tuple[int, int]],
    compression_type: Optional[str],
    check_crc: bool,
    max_record_bytes: Optional[int],
) -> Iterator[Tuple[int, memoryview]]:
    """``(offset, data)`` of every record of the file or of one shard of it."""
    kind = files.normalize_compression(compression_type, data_path)
    limit = {"check_crc": check_crc, "max_record_bytes": max_record_bytes}
    if shard is None:
        yield from read_records(data_path, compression_type=kind, **limit)  # type: ignore[misc, arg-type]
        return
    i, n = shard
    if kind:
        if not (0 <= i < n):
            raise ValueError(f"shard index {i} is not in [0, {n})")
        for k, pair in enumerate(read_records(data_path, compression_type=kind, **limit)):  # type: ignore[arg-type]
            if k % n == i:
                yield pair  # type: ignore[misc]
        return
    index = load_index(index_path) if index_path else None
    if index is not None and not index.matches(files.file_size(data_path)):
        raise IndexFileError(
            f"index {index_path} does not describe this file (stale or for another file); rebuild it",
            data_path,
        )
    start, end = shard_range(data_path, shard, index)
    if end is not None and end <= start:
        return
    yield from read_records(data_path, start, end, index=index, **limit)  # type: ignore[misc, arg-type]


def _parsed_with_location(
    pairs: Iterator[Tuple[int, memoryview]], parse: Callable[[Iterator[memoryview]], Iterator[Any]], path: str
) -> Iterator[Any]:
    """``parse`` over the records of ``pairs``; a record that does not parse raises
    ``ExampleCodecError`` naming ``path`` and the record's byte offset.

    ``parse`` may read ahead (batches): the offsets of records taken but not yet
    parsed wait in a queue, and the one at its head is the record that failed.
    """
    pending: Deque[int] = deque()

    def records() -> Iterator[memoryview]:
        for offset, data in pairs:
            pending.append(offset)
            yield data

    try:
        for value in parse(records()):
            pending.popleft()
            yield value
    except ExampleCodecError as err:
        if err.path is not None or not pending:
            raise
        raise ExampleCodecError(err.reason, path, pending[0]) from None


def example_loader(
    data_path: str,
    index_path: Optional[str],
    description: Description = None,
    shard: Optional[Tuple[int, int]] = None,
    compression_type: Optional[str] = None,
    max_record_bytes: Optional[int] = DEFAULT_MAX_RECORD_BYTES,
) -> Iterator[Dict[str, Any]]:
    """Yield each Example of the file as a dict of NumPy arrays (see ``codec``).

    Records are parsed in small batches (``codec.parse_example_stream``): one call of
    the compiled parser per batch instead of one protobuf message per record. A record
    that is not an Example raises ``ExampleCodecError`` with the path and its offset.
    """
    pairs = _offset_records(data_path, index_path, shard, compression_type, True, max_record_bytes)
    yield from _parsed_with_location(pairs, lambda records: parse_example_stream(records, description), data_path)


def sequence_loader(
    data_path: str,
    index_path: Optional[str],
    context_description: Description = None,
    features_description: Description = None,
    shard: Optional[Tuple[int, int]] = None,
    compression_type: Optional[str] = None,
    max_record_bytes: Optional[int] = DEFAULT_MAX_RECORD_BYTES,
) -> Iterator[Tuple[Dict[str, Any], Dict[str, List[Any]]]]:
    """Yield ``(context, feature_lists)`` for each SequenceExample of the file."""
    pairs = _offset_records(data_path, index_path, shard, compression_type, True, max_record_bytes)

    def parse(records: Iterator[memoryview]) -> Iterator[Any]:
        for record in records:
            yield parse_sequence_example(record, context_description, features_description)

    yield from _parsed_with_location(pairs, parse, data_path)


def tfrecord_loader(
    data_path: str,
    index_path: Optional[str],
    description: Description = None,
    shard: Optional[Tuple[int, int]] = None,
    sequence_description: Description = None,
    compression_type: Optional[str] = None,
    shuffle_queue_size: Optional[int] = None,
    max_record_bytes: Optional[int] = DEFAULT_MAX_RECORD_BYTES,
) -> Iterator[Any]:
    """Examples (dicts) or, with ``sequence_description``, SequenceExamples
    (``(context, feature_lists)``) of one file, optionally through a shuffle buffer.

    The first six parameters are the ``tfrecord`` package's, in its order, so
    positional calls written for it keep their meaning."""
    if sequence_description is not None:
        loader: Iterator[Any] = sequence_loader(
            data_path, index_path, description, sequence_description, shard, compression_type, max_record_bytes
        )
    else:
        loader = example_loader(data_path, index_path, description, shard, compression_type, max_record_bytes)
    if shuffle_queue_size:
        loader = iterator_utils.shuffle_iterator(loader, shuffle_queue_size)
    return loader


def multi_tfrecord_loader(
    data_pattern: str,
    index_pattern: Optional[str],
    splits: Dict[str, float],
    description: Description = None,
    sequence_description: Description = None,
    compression_type: Optional[str] = None,
    infinite: bool = True,
    shard: Optional[Tuple[int, int]] = None,
    shuffle_queue_size: Optional[int] = None,
    max_record_bytes: Optional[int] = DEFAULT_MAX_RECORD_BYTES,
) -> Iterator[Any]:
    """Sample records from several files (``data_pattern.format(split)``) with the
    given weights. Zero-weight splits are never opened; see
    ``iterator_utils.sample_iterators`` for how ends are handled. ``shard=(i, n)``
    reads shard ``i`` of every split (the ``tfrecord`` package's 8th argument)."""
    weights = iterator_utils.check_weights(splits)
    names = [name for name, w in zip(splits, weights) if w > 0]

    def opener(name: str) -> Callable[[], Iterator[Any]]:
        return lambda: tfrecord_loader(
            data_pattern.format(name),
            index_pattern.format(name) if index_pattern else None,
            description=description,
            shard=shard,
            sequence_description=sequence_description,
            compression_type=compression_type,
            max_record_bytes=max_record_bytes,
        )

    openers = [opener(n) for n in names]
    chosen = [w for w in weights if w > 0]
    if infinite:
        iterators: Sequence[Iterator[Any]] = [iterator_utils.cycle(fn) for fn in openers]
    else:
        iterators = [fn() for fn in openers]
    loader = iterator_utils.sample_iterators(iterators, chosen, infinite=infinite)
    if shuffle_queue_size:
        loader = iterator_utils.shuffle_iterator(loader, shuffle_queue_size)
    return loader
