"""``tfrecord-io reshard``: N files -> M shards, optionally changing compression and
keeping only records whose feature has a given value; every new shard indexed.

Three paths, chosen in this order: slices planned in the launcher from the indexes,
slices planned in the pipeline by scanning the files, and batches of records (all
described below). The write is always ``tfrecord_io``'s sink.

The batched path (compressed inputs, ``--where``, or no ``--num-shards``): the read is
the splitting read (one big input file keeps every worker busy); records move in
batches of up to :data:`READ_BATCH` from the read to the shards, never one element per
record (without ``--num-shards`` each batch goes to its bundle's file as one list:
``WriteRecordListsToTFRecord``); shards appear under their final names only when all of
them are complete. ``--where`` is decided for a whole batch by the compiled parser
(:class:`WhereFilter`), not by a protobuf parse of each record.

Placement (``--num-shards N``): each batch holds consecutive records of one input
file, and is dealt round-robin over the shards, from the shard a hash of the file's
name and the batch's first byte offset picks (:func:`place_batch`). So the shards are
even whatever the records hold (every shard gets ``len(batch) // N`` or one more of
each batch; identical records are spread like any others), and the placement depends
only on where records are, not on their bytes: the same inputs give the same shards.
(Batches are cut by the read: at ``READ_BATCH`` records, ~4 MiB, a corrupt region or
the end of a byte range. A runner that splits ranges dynamically while they are read,
as Dataflow may, can move records between shards; none is lost or duplicated.)

Slices (the usual case: ``--num-shards N``, no ``--where``, every input uncompressed
with an index that still describes it, as ``tfrecord-io build`` and the sink leave
them): the batched path above moves every record through the runner twice (read ->
shuffle -> writer), which costs more than the copy itself. But a reshard without a
filter needs no record's bytes to decide where it goes: the indexes give every file's
record count and offsets, so the launcher plans by counts (:func:`plan_slices`): the
files in path order, records in file order, and shard ``k`` of ``N`` gets records
``[k*T//N, (k+1)*T//N)`` of the ``T`` in all. That is exactly even (whatever the
records hold), deterministic (it depends on the paths and counts only, not on the
runner or the worker count), and keeps the records' order. Only the plan (a few
``(path, start, end, count)`` byte ranges per shard) crosses the shuffle; each shard
is written by one worker that copies its ranges' frames as they are, both CRCs of
every frame checked by the compiled scanner (``frame_copy``); a big input file is cut
into several shards' ranges, so it is still spread over the workers. The index is not
trusted: a frame that is bad, or frames that do not tile a range as the index says,
fail the job naming the file and byte offset. The plan is made in the launcher
because choosing the path needs every index anyway; it holds one index at a time and
keeps only each file's count (memory grows with files, not records), but it does read
every index, so its time grows with the records (0.04 CPU-s at 1,000,000 in 16 files,
the index text parsed by the compiled core; 0.36 before it).

Scanned slices (``--num-shards N``, no ``--where``, every input uncompressed, but some
index missing or stale, as for files TensorFlow wrote): the same slices, planned in the
pipeline instead: each file is scanned by a worker for its frame offsets (both CRCs
checked, the compiled scanner), the counts are summed into a side input, each file's
records are placed by the same rule (:func:`file_pieces`), and the pieces are grouped
by shard. Only the offsets cross the runner (8 bytes a record), never a record; the
shards are byte-identical to the launcher plan's. On 1,000,000 records of 835 bytes in
16 files this took the job from 22.7 s to 2.8 s (the batched path's two trips of every
record through the runner). Compressed inputs (no byte offsets to cut at) and
``--where`` take the batched path.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np

from tfrecord_io.errors import StorageAccessError, TFRecordError
from tfrecord_io.format.codec import Example
from tfrecord_io.format.crc import crc32c
from tfrecord_io.format.framing import encode_frame
from tfrecord_io.format.index import RecordIndex, build_index, find_index, load_index
from tfrecord_io.format.writer import _encode_frames
from tfrecord_io.pipelines.runtime.collect import ResultDir
from tfrecord_io.pipelines.runtime.inputs import no_input_error, resolve_inputs
from tfrecord_io.pipelines.runtime.progress import CountProgress, ProgressPrinter
from tfrecord_io.storage import files
from tfrecord_io.usage_errors import ArgumentError


def parse_where(text: Optional[str]) -> Optional[Tuple[str, str]]:
    if not text:
        return None
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ArgumentError(f"--where {text!r}: expected FEATURE=VALUE, e.g. --where label=3")
    return key, value


def matches(data: bytes, where: Tuple[str, str]) -> bool:
    """True when the Example's feature ``key`` holds ``value`` (compared as text for
    bytes, as a number for int/float lists; any element of a list may match)."""
    key, value = where
    example = Example()
    example.ParseFromString(data)
    fmap = example.features.feature
    if key not in fmap:
        return False
    feature = fmap[key]
    kind = feature.WhichOneof("kind")
    if kind == "bytes_list":
        return any(v == value.encode("utf-8") for v in feature.bytes_list.value)
    try:
        number = float(value)
    except ValueError:
        return False
    values = (
        feature.int64_list.value if kind == "int64_list" else feature.float_list.value if kind == "float_list" else []
    )
    return any(float(v) == number for v in values)


try:  # the compiled batch parser the Arrow read uses (mode 2: flat buffers, missing keys allowed)
    from tfrecord_io._speedups import parse_examples as _parse_examples
except ImportError:  # pragma: no cover - exercised when the extension is absent
    _parse_examples = None

_FLAT = 2
_BYTES, _FLOAT, _INT64 = 1, 2, 3  # the compiled parser's kind codes


class WhereFilter:
    """``--where FEATURE=VALUE`` over a batch of records at once: :func:`matches` for each
    record, by the compiled parser (the one ``tfrecord_io.arrow`` reads columns with)
    instead of a protobuf parse per record.

    The feature's wire type is not known before the records are read, so a batch is
    parsed for the key as the type that worked last (first: int64 when the value is a
    number, else bytes); the compiled parser refuses a batch where the key has another
    type, and the next type is tried. A batch no type fits whole (the key's type
    changes between its records, or something the compiled parser leaves to upb, or no
    compiled core) takes :func:`matches` record by record, as before."""

    def __init__(self, where: Tuple[str, str]):
        self.key, self.value = where
        self._raw_key = self.key.encode("utf-8", "surrogatepass")
        self._text = self.value.encode("utf-8")
        try:
            self._number: Optional[float] = float(self.value)
        except ValueError:
            self._number = None
        self._kinds = [_INT64, _FLOAT, _BYTES] if self._number is not None else [_BYTES, _INT64, _FLOAT]

    def keep(self, records: List[bytes]) -> List[bytes]:
        """The records whose feature ``key`` holds ``value`` (in their order)."""
        mask = self._mask(records)
        if mask is None:
            return [r for r in records if matches(r, (self.key, self.value))]
        return [r for r, keep in zip(records, mask) if keep]

    def _mask(self, records: List[bytes]) -> Optional[np.ndarray]:
        if _parse_examples is None or not records:
            return None
        for kind in list(self._kinds):
            cols = _parse_examples(records, [self._raw_key], [kind], _FLAT)
            if cols is None:
                continue
            if kind != self._kinds[0]:  # the next batch tries this type first
                self._kinds.remove(kind)
                self._kinds.insert(0, kind)
            return self._matching(kind, cols[0], len(records))
        return None

    def _matching(self, kind: int, col: tuple, n: int) -> np.ndarray:
        counts = np.frombuffer(col[1], dtype=np.int64)
        owner = np.repeat(np.arange(n), np.maximum(counts, 0))  # the record of each value
        if kind == _BYTES:
            data, sizes = col[0], np.frombuffer(col[2], dtype=np.int64)
            starts = np.cumsum(sizes) - sizes
            hit = np.zeros(len(sizes), dtype=bool)
            view = memoryview(data)
            for i in np.flatnonzero(sizes == len(self._text)):
                hit[i] = view[starts[i] : starts[i] + sizes[i]] == self._text
        elif self._number is None:
            return np.zeros(n, dtype=bool)  # a number never equals a text that is none
        else:
            values = np.frombuffer(col[0], dtype=np.int64 if kind == _INT64 else np.float32)
            hit = values.astype(np.float64) == self._number  # float(v) == number, as matches() compares
        mask = np.zeros(n, dtype=bool)
        mask[owner[hit]] = True
        return mask


#: Records per element out of the read: placed and handed to the writer as lists.
READ_BATCH = 1024

_MASK64 = (1 << 64) - 1


def _mix64(x: int) -> int:
    """SplitMix64's finaliser: a well-spread 64-bit hash of a 64-bit integer."""
    x &= _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def place_batch(path: str, first_offset: int, num_shards: int) -> int:
    """The shard the first record of a batch goes to; record ``j`` of the batch goes to
    ``(first + j) % num_shards``. From the file's base name (the same data read from
    another mount lands the same way) and the batch's first byte offset."""
    name = path.rsplit("/", 1)[-1].encode("utf-8", "surrogateescape")
    return _mix64((crc32c(name) << 32) ^ first_offset) % num_shards


def _frames(records: List[bytes]) -> bytes:
    """The records as TFRecord frames, in one ``bytes`` (the compiled core's
    ``encode_frames``, else one ``encode_frame`` each)."""
    if _encode_frames is not None:
        return _encode_frames(records)
    return b"".join(map(encode_frame, records))


class PlaceBatch(beam.DoFn):
    """A batch ``(path, [offsets], [records])`` -> ``(shard, (frames, sizes))`` per shard it
    reaches, dealt round-robin from :func:`place_batch` (optionally only the records
    ``where`` matches). The records are framed here, in one call of the compiled core,
    so each crosses the shuffle inside one ``bytes`` (see ``WriteShardBatchesToTFRecord``)."""

    def __init__(self, num_shards: int, where: Optional[Tuple[str, str]]):
        self._n = num_shards
        self._where = where
        self._filter: Optional[WhereFilter] = None

    def process(self, batch):
        path, offsets, records = batch
        first = offsets[0]
        if self._where is not None:
            if self._filter is None:
                self._filter = WhereFilter(self._where)
            records = self._filter.keep(records)
        start = place_batch(path, first, self._n)
        for k in range(min(self._n, len(records))):
            chosen = records[k :: self._n]
            sizes = np.fromiter(map(len, chosen), dtype=np.int64, count=len(chosen))
            yield (start + k) % self._n, (_frames(chosen), sizes.tobytes())


def _batch_length(batch) -> int:
    return len(batch[2])


class KeepRecords(beam.DoFn):
    """``num_shards=0``: a batch ``(path, [offsets], [records])`` -> its list of records
    (those ``where`` matches), one element for the sink's bundle files
    (``WriteRecordListsToTFRecord``), never one per record."""

    def __init__(self, where: Optional[Tuple[str, str]]):
        self._where = where
        self._filter: Optional[WhereFilter] = None

    def process(self, batch):
        records = list(batch[2])
        if self._where is not None:
            if self._filter is None:
                self._filter = WhereFilter(self._where)
            records = self._filter.keep(records)
        if records:
            yield records


#: One piece of an output shard: ``(path, start, end, count)``, bytes ``[start, end)`` of
#: ``path`` holding ``count`` whole frames.
Piece = Tuple[str, int, int, int]


def usable_index(path: str) -> Optional[RecordIndex]:
    """The index of ``path`` when the slice path can copy by it: the file is stored
    uncompressed (by its name) and its index is found, parses, and still describes it
    (frames contiguous from 0 to the file's size, the check the Beam source makes);
    else None (the batched path reads the file itself)."""
    if files.normalize_compression("auto", path):
        return None
    index_path = find_index(path)
    if index_path is None:
        return None
    try:
        index = load_index(index_path)
        size = files.file_size(path)
    except StorageAccessError:
        raise
    except (TFRecordError, OSError):
        return None
    return index if index.matches(size) else None


def shard_of(g: int, total: int, num_shards: int) -> int:
    """The shard that record ``g`` (of ``total``, in global order) falls in: the largest
    ``k`` with ``k * total // num_shards <= g``."""
    return ((g + 1) * num_shards - 1) // total


def file_pieces(
    path: str, first: int, n: int, data_size: int, total: int, num_shards: int, offset_of
) -> List[Tuple[int, Piece]]:
    """The ``(shard, piece)`` pairs of one file whose ``n`` records are records
    ``[first, first + n)`` of the ``total`` in global order: one piece per shard its
    records reach (shard ``k`` takes records ``[k*T//N, (k+1)*T//N)``). ``offset_of(i)``
    is the byte offset of the file's record ``i``, asked only where a shard's slice starts
    or ends inside the file. The launcher's plan (:func:`plan_slices`) and the pipeline's
    (:class:`PiecesOfFile`) both place by this, so they give the same shards."""
    if n <= 0:
        return []
    out: List[Tuple[int, Piece]] = []
    for k in range(shard_of(first, total, num_shards), shard_of(first + n - 1, total, num_shards) + 1):
        lo, hi = k * total // num_shards, (k + 1) * total // num_shards
        a, b = max(lo, first) - first, min(hi, first + n) - first
        if a >= b:
            continue
        start = offset_of(a) if a else 0
        end = offset_of(b) if b < n else data_size
        out.append((k, (path, start, end, b - a)))
    return out


def plan_slices(counts: Sequence[Tuple[str, int, int]], num_shards: int, offset_of) -> List[List[Piece]]:
    """Shard ``k``'s byte ranges: records ``[k*T//N, (k+1)*T//N)`` of the ``T`` records of
    all files, files in path order and records in file order; one piece per file the
    slice touches, in that order (see the module docstring for why).

    ``counts``: ``(path, records, data size)`` per file; ``offset_of(path, i)``: the byte
    offset of record ``i`` of ``path``, asked only where a slice starts or ends inside a
    file (at most ``num_shards - 1`` places), so no file's offsets need to be held."""
    ordered = sorted(counts)
    total = sum(n for _, n, _ in ordered)
    plan: List[List[Piece]] = [[] for _ in range(num_shards)]
    first = 0  # global number of this file's first record
    for path, n, data_size in ordered:
        for k, piece in file_pieces(path, first, n, data_size, total, num_shards, lambda i, p=path: offset_of(p, i)):
            plan[k].append(piece)
        first += n
    return plan


def slice_plan(inputs: Sequence[str], num_shards: int, where) -> Optional[List[List[Piece]]]:
    """The slice plan when the job can take the slice path, else None: a fixed shard
    count, no ``--where`` (it must parse records), and every input with a usable index.

    Memory does not grow with the records: each index is loaded, checked and reduced to
    its count and size before the next; the few offsets where a slice starts inside a
    file are read from that file's index again (one index at a time, cached)."""
    if not num_shards or where is not None:
        return None
    counts = []
    for path in inputs:
        index = usable_index(path)
        if index is None:
            return None
        counts.append((path, len(index), index.data_size))
    cache: Dict[str, RecordIndex] = {}

    def offset_of(path: str, i: int) -> int:
        if path not in cache:
            cache.clear()  # slices visit files in order: one index held at a time
            index_path = find_index(path)
            assert index_path is not None  # usable above
            cache[path] = load_index(index_path)
        return int(cache[path].offsets[i])

    return plan_slices(counts, num_shards, offset_of)


def _shard_records(shard: Dict[str, Any]) -> int:
    return int(shard["records"])


class ScanFrames(beam.DoFn):
    """An uncompressed input file -> ``(path, offsets, data size)``: the byte offset of
    every frame as int64 ``bytes`` (8 bytes a record), both CRCs of every frame checked
    (``build_index``, the compiled scanner; a bad frame fails the job naming the file and
    byte offset). The scanned path's first stage: only these offsets, never a record,
    cross the runner."""

    def process(self, path: str):
        index = build_index(path)
        yield path, np.ascontiguousarray(index.offsets, dtype=np.int64).tobytes(), int(index.data_size)


def _file_count(scanned) -> Tuple[str, int, int]:
    path, offsets, data_size = scanned
    return path, len(offsets) // 8, data_size


class PiecesOfFile(beam.DoFn):
    """``(path, offsets, data size)`` + every file's ``(path, records, data size)`` (a
    side input: a few numbers per file) -> ``(shard, piece)`` for each shard the file's
    records reach, placed as the launcher's plan places them (:func:`file_pieces`)."""

    def __init__(self, num_shards: int):
        self._n = num_shards
        self._firsts: Optional[Dict[str, int]] = None
        self._total = 0

    def process(self, scanned, counts):
        if self._firsts is None:  # the counts are the same for every element: once per worker
            self._firsts, first = {}, 0
            for path, n, _ in sorted(counts):
                self._firsts[path] = first
                first += n
            self._total = first
        path, offsets, data_size = scanned
        starts = np.frombuffer(offsets, dtype=np.int64)
        first = self._firsts[path]
        yield from file_pieces(path, first, len(starts), data_size, self._total, self._n, lambda i: int(starts[i]))


def _shard_plan(grouped) -> Tuple[int, List[Piece]]:
    """``(shard, pieces)`` in the order the shard holds them (files in path order); a
    shard no record reaches has only its ``None`` marker and is written empty."""
    shard, pieces = grouped
    return shard, sorted(piece for piece in pieces if piece is not None)


def _scanned_plan(p, inputs: List[str], num_shards: int):
    """The plan of the scanned path, made in the pipeline: scan each file for its frame
    offsets (spread over the workers), sum the counts (a side input), place each file's
    records, group the pieces by shard. Every shard gets an element, also when no
    record reaches it (fewer records than shards)."""
    scanned = p | "Files" >> beam.Create(inputs) | "Scan" >> beam.ParDo(ScanFrames())
    counts = scanned | "Count" >> beam.Map(_file_count)
    pieces = scanned | "Place" >> beam.ParDo(PiecesOfFile(num_shards), beam.pvalue.AsList(counts))
    every_shard = p | "Shards" >> beam.Create([(k, None) for k in range(num_shards)])
    return (
        (pieces, every_shard)
        | "Both" >> beam.Flatten()
        | "ByShard" >> beam.GroupByKey().with_input_types(beam.typehints.Tuple[int, beam.typehints.Any])
        | "Order" >> beam.Map(_shard_plan)
    )


def _uncompressed(inputs: Sequence[str]) -> bool:
    return not any(files.normalize_compression("auto", path) for path in inputs)


def _read_batches(p, inputs: List[str], progress_dir: Optional[str]):
    """The batched path's read: the splitting read, in batches, counted for progress."""
    from tfrecord_io.beam.beam_source import ReadAllRecordBatches

    return (
        p
        | "Files" >> beam.Create(inputs)
        | "Read" >> ReadAllRecordBatches(batch_size=READ_BATCH)
        | "CountRead" >> beam.ParDo(CountProgress(progress_dir, "read", weigh=_batch_length))
    )


def run_reshard(
    paths: List[str],
    output: str,
    options,
    num_shards: int = 0,
    compression: str = "",
    where: Optional[Tuple[str, str]] = None,
    write_index: bool = True,
    progress: bool = True,
    workers=None,
) -> Dict[str, Any]:
    from tfrecord_io.beam.beam_sink import (
        CopyFrameSlicesToTFRecord,
        WriteRecordListsToTFRecord,
        WriteShardBatchesToTFRecord,
    )
    from tfrecord_io.dataset import dataset_writer

    dataset_writer.use_filesystems(options, [*paths, output])
    inputs = resolve_inputs(paths)
    if not inputs:
        raise no_input_error(paths)
    results = ResultDir.for_job(options, "reshard", output)  # before anything is written
    suffix = ".tfrecord" + files.compression_suffix(compression)
    sink_args = dict(
        file_name_suffix=suffix,
        compression_type=compression or "uncompressed",
        write_index=write_index and not compression,
    )
    plan = slice_plan(inputs, num_shards, where)
    bar = ProgressPrinter("reshard", enabled=progress, rate_stage="read", options=options, output=output)
    with bar, results:
        runner, run_options = workers.pipeline_runner(options) if workers is not None else (None, options)
        with beam.Pipeline(runner=runner, options=run_options) as p:
            if plan is not None:
                written = (
                    p
                    | "Plan" >> beam.Create(list(enumerate(plan)))
                    | "Write" >> CopyFrameSlicesToTFRecord(output, num_shards, **sink_args)
                    # Records are counted as their shards are in place: copies are not records.
                    | "CountWritten" >> beam.ParDo(CountProgress(bar.dir, "read", weigh=_shard_records))
                )
            elif num_shards and where is None and _uncompressed(inputs):
                written = (
                    _scanned_plan(p, inputs, num_shards)
                    | "Write" >> CopyFrameSlicesToTFRecord(output, num_shards, **sink_args)
                    | "CountWritten" >> beam.ParDo(CountProgress(bar.dir, "read", weigh=_shard_records))
                )
            elif num_shards:
                written = (
                    _read_batches(p, inputs, bar.dir)
                    | "Place"
                    >> beam.ParDo(PlaceBatch(num_shards, where)).with_output_types(
                        beam.typehints.Tuple[int, beam.typehints.Any]
                    )
                    | "Write" >> WriteShardBatchesToTFRecord(output, num_shards, **sink_args)
                )
            else:
                written = (
                    _read_batches(p, inputs, bar.dir)
                    | "Keep" >> beam.ParDo(KeepRecords(where)).with_output_types(beam.typehints.Any)
                    | "Write" >> WriteRecordListsToTFRecord(output, **sink_args)
                )
            written | "Collect" >> results.sink()
        shards = sorted(results.read(), key=lambda s: s["path"])
    return {"inputs": inputs, "shards": shards, "records": sum(s["records"] for s in shards), "seconds": bar.elapsed}
