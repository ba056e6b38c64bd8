"""Sharded, indexed, atomic Beam sink for TFRecord files: ``WriteToTFRecord``.

Shape (after Beam's ``iobase.WriteImpl``): records are written to files in a hidden
temporary directory beside the output (``.tfrecord-io-temp-<uuid>``); one finalize
step, which runs only after every shard was written, renames them to their final
names and removes the temporary directory. While the job runs, or if it fails or is
killed before finalize, nothing exists under the final names. Each rename is atomic,
so a final name only ever holds a whole shard; within a shard the index is renamed
before the data, so a data file is never newer than its index. Rerunning over an
existing output replaces it: same-named shards are overwritten by rename, and final
shards of the same prefix and template that the new output does not have (e.g. of a
different shard count) are deleted after the new shards are in place.

Frames come from :class:`tfrecord_io.format.writer.RecordWriter` (byte-identical to
TensorFlow's), which also writes each shard's index from the offsets it wrote.

Placement with ``num_shards=N``: records are dealt round-robin over the shards, and
each instance of the dealing step (one per worker thread; the runner reuses it for
bundle after bundle) goes on where its previous bundle stopped, from a shard drawn at
random (``os.urandom``) when the instance is set up. So the shards are even whatever
the records hold, identical records included, and however small the bundles are: one
instance's records differ by at most one between shards, and instances start at
independent random shards, so the differences between instances do not pile up on the
same shards. (A hash of each record's bytes sent every copy of a record to one shard; a
start taken from the first record of each bundle, as before, put each bundle's surplus
on the same low shards when bundles held the same records.) Which record lands in which
shard is not deterministic: it depends on bundling and on the random start, as with
Beam's own sink (``iobase._RoundRobinKeyFn`` starts each bundle at a random shard). Jobs
that need placement by where each record came from place it themselves
(:class:`WriteShardBatchesToTFRecord`; ``tfrecord-io reshard`` hashes the source file
and offset). With ``num_shards=0`` each bundle writes its own file(s) (rolling over at
``max_records_per_shard``/``max_bytes_per_shard``): the runner decides the count; files
are numbered by a content key (first record's CRC, counts), so the same bundles give
the same names and bytes.

Names and compression are Beam's (``apache_beam.io.WriteToTFRecord``): shard ``i`` of
``n`` is ``file_path_prefix + template(i, n) + file_name_suffix`` (default suffix ``""``,
template ``-SSSSS-of-NNNNN``), with the template read as Beam reads it (every occurrence
of the first run of ``S`` is the shard number, then of the first run of ``N`` the count:
:func:`_template_tokens`); ``shard_name_template=""`` writes exactly
``file_path_prefix + file_name_suffix``; ``compression_type=AUTO`` takes the compression
from the end of ``file_path_prefix + file_name_suffix`` as Beam's
``CompressionTypes.detect_compression_type`` does (``.gz``: GZIP, ``.deflate``: ZLIB,
which is Beam's DEFLATE; else plain). Empty shards are valid empty GZIP/ZLIB streams, as
Beam's. Where ours differs, on purpose (each tested in ``tests/test_beam_write.py``):
an index ``<shard>.index`` is written beside each uncompressed shard
(``write_index=False``: none), so with the default suffix ``""`` a glob ``prefix*``
matches the indexes too (our readers skip them; Beam's and ``tf.data``'s read them as
records: give a ``file_name_suffix`` and glob ``prefix*<suffix>``); under AUTO, the
suffixes of compressions TFRecord readers do not know (``.bz2``, ``.zst``, ``.xz``,
``.lzma``), which Beam would honour, are refused rather than written, and so are
``.gzip``, ``.zz`` and ``.zlib``, which Beam writes plain but our readers read as
compressed (an explicit ``compression_type`` writes them); ``num_shards > 1`` with
``shard_name_template=""`` is an error (Beam silently writes one file); a ``%`` in the
template is kept as it is (Beam's %-formatting fails on it after the write). A template
without a run of ``S`` is an error, as in Beam.
"""

from __future__ import annotations

import os
import re
import uuid
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import apache_beam as beam
import numpy as np
from apache_beam import coders
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.metrics import Metrics
from apache_beam.pvalue import AsList
from apache_beam.transforms import window

from ..format.crc import crc32c
from ..format.frame_copy import copy_frames
from ..format.framing import FRAME_OVERHEAD
from ..format.index import (
    index_path_for,
)
from ..format.writer import RecordWriter
from ..storage import files
from .beam_arrow import expand_record_batches
from .beam_source import METRICS_NAMESPACE  # one namespace for the package's Beam metrics

DEFAULT_SHARD_NAME_TEMPLATE = "-SSSSS-of-NNNNN"
_FLUSH_RECORDS = 4096  # records buffered per shard before a bundle hands them on
_FLUSH_BYTES = 16 << 20


# ---------------------------------------------------------------------- names


#: A parsed shard template: literal text, or ``("S", width)`` / ``("N", width)`` for the
#: shard number / shard count, zero-padded to ``width`` digits.
_Token = Union[str, Tuple[str, int]]


def _split_on(tokens: List[_Token], run: str, kind: str) -> List[_Token]:
    """Every occurrence of ``run`` in the literal tokens becomes ``(kind, len(run))``
    (left to right, not overlapping: what ``str.replace`` does)."""
    out: List[_Token] = []
    for token in tokens:
        if not isinstance(token, str):
            out.append(token)
            continue
        for i, piece in enumerate(token.split(run)):
            if i:
                out.append((kind, len(run)))
            if piece:
                out.append(piece)
    return out


def _template_tokens(template: str) -> List[_Token]:
    """A shard template read as Beam's ``FileBasedSink._template_to_format`` reads it:
    every occurrence of the *first* run of ``S`` is the shard number, padded to that
    run's width, then every occurrence of the first run of ``N`` is the shard count. So
    ``-SSSSS-of-NNNNN-NNNNN`` fills both runs of N, and in ``-SS-SSS`` the second run reads
    as ``SS`` (filled) and a literal ``S``: the names Beam's sink gives. A template without
    a run of ``S`` is an error, as in Beam; ``""`` names one file."""
    if not template:
        return []
    s_run = re.search("S+", template)
    if s_run is None:
        raise ValueError(f"shard_name_template {template!r} needs a run of S for the shard number")
    tokens = _split_on([template], s_run.group(0), "S")
    n_run = re.search("N+", template)  # runs of S and of N never overlap
    return _split_on(tokens, n_run.group(0), "N") if n_run else tokens


def shard_name(prefix: str, suffix: str, template: str, shard: int, num_shards: int) -> str:
    """The final path of shard ``shard`` of ``num_shards``."""
    parts = []
    for token in _template_tokens(template):
        if isinstance(token, str):
            parts.append(token)
        else:
            kind, width = token
            parts.append(f"{shard if kind == 'S' else num_shards:0{width}d}")
    return prefix + "".join(parts) + suffix


def _shard_regex(prefix: str, suffix: str, template: str) -> re.Pattern[str]:
    parts = [re.escape(t) if isinstance(t, str) else rf"\d{{{t[1]},}}" for t in _template_tokens(template)]
    return re.compile(re.escape(prefix) + "".join(parts) + re.escape(suffix) + r"\Z")


def _existing_shards(prefix: str, suffix: str, template: str) -> List[str]:
    """Final-name files of this prefix/template now present (data files only)."""
    pattern = _shard_regex(prefix, suffix, template)
    found = files.match([prefix + "*" + suffix])[0].metadata_list
    return sorted(m.path for m in found if pattern.match(m.path))


# Suffixes Beam's AUTO compression honours that no TFRecord reader (TensorFlow's,
# ours, the ``tfrecord`` package's) can read back: refused, not written plain.
_FOREIGN_COMPRESSION_SUFFIXES = (".bz2", ".zst", ".zstd", ".xz", ".lzma")
# Suffixes tfrecord-io's readers take as compressed by the name (``files.normalize_compression``)
# that Beam's AUTO (``CompressionTypes.detect_compression_type``) does not: Beam's sink
# writes them uncompressed, which our readers would then misread, and writing them
# compressed would not be what Beam's sink writes. Refused under AUTO; an explicit
# compression_type decides.
_AMBIGUOUS_COMPRESSION_SUFFIXES = {".gzip": "GZIP", ".zz": "ZLIB (Beam's DEFLATE)", ".zlib": "ZLIB (Beam's DEFLATE)"}


def sink_compression(compression_type: Any, path: str) -> str:
    """The compression of the files ``WriteToTFRecord`` writes: ``""``, ``"gzip"`` or
    ``"zlib"``. ``AUTO`` looks at the end of ``path`` (prefix + suffix) as Beam does:
    ``.gz`` GZIP, ``.deflate`` ZLIB (Beam's DEFLATE: a zlib stream), anything else plain.
    Refused under AUTO, with an error that says what to do: Beam's other compressions
    (no TFRecord reader reads them), and ``.gzip``/``.zz``/``.zlib``, plain for Beam but
    compressed for tfrecord-io's readers."""
    value = getattr(compression_type, "value", compression_type)
    if value is None or str(value).lower() == "auto":
        lowered = path.lower()
        if lowered.endswith(_FOREIGN_COMPRESSION_SUFFIXES):
            raise ValueError(
                f"{path}: compression_type AUTO would pick {lowered.rsplit('.', 1)[-1]} from the name, which TFRecord "
                "readers cannot read; use .gz (GZIP) or .deflate (ZLIB), or set compression_type"
            )
        for suffix, kind in _AMBIGUOUS_COMPRESSION_SUFFIXES.items():
            if lowered.endswith(suffix):
                raise ValueError(
                    f"{path}: with compression_type AUTO, Beam's sink writes a name ending in {suffix} uncompressed, "
                    f"but tfrecord-io's readers read it as {kind}; set compression_type ({kind} or UNCOMPRESSED), "
                    "or end the name in .gz (GZIP) or .deflate (ZLIB)"
                )
    return files.normalize_compression(compression_type, path)


# ---------------------------------------------------------------------- writing


def _encoder(coder: coders.Coder):
    if isinstance(coder, coders.BytesCoder):
        return lambda value: value if isinstance(value, (bytes, bytearray, memoryview)) else coder.encode(value)
    return coder.encode


def _ensure_dir(path: str) -> None:
    """Create ``path`` if absent; tolerate a parallel worker creating it first."""
    if files.is_remote(path):
        try:
            files.beam_filesystems().mkdirs(path)
        except OSError:
            pass  # object stores have no directories; "exists" is fine
        return
    os.makedirs(path, exist_ok=True)


class _WriteSpec:
    """What every writing step needs to know: temp dir, compression, indexing."""

    def __init__(self, temp_dir: str, compression: str, write_index: bool):
        self.temp_dir = temp_dir
        self.compression = compression
        self.write_index = write_index and not compression

    def open(self, name: str) -> Tuple[RecordWriter, str, Optional[str]]:
        _ensure_dir(self.temp_dir)
        path = files.beam_filesystems().join(self.temp_dir, name)
        index_path = index_path_for(path) if self.write_index else None
        return RecordWriter(path, self.compression, index_path=index_path), path, index_path

    def result(self, writer: RecordWriter, path: str, index_path: Optional[str], key: Any) -> Dict[str, Any]:
        stored = writer.bytes_written if not self.compression else files.file_size(path)
        return {
            "temp_path": path,
            "temp_index_path": index_path,
            "records": writer.records_written,
            "bytes": stored,
            "key": key,
        }


class _BucketRecords(beam.DoFn):
    """Encode records and deal them round-robin over the shards: ``(shard, [records])``
    lists.

    The deal goes on across the bundles one instance processes, from a random shard
    drawn in ``setup`` (see the module docstring): a start per bundle taken from its
    first record put every bundle's surplus on the same shards when the bundles held the
    same records, and runners such as Flink (1,000 records a bundle by default) make many
    bundles. ``os.urandom``, not ``random``: local workers forked from one launcher share
    ``random``'s state and would all draw the same start. Handing on lists rather than
    single records makes the shuffle carry a few large elements instead of one per record.
    """

    def __init__(self, num_shards: int, coder: coders.Coder):
        self._n = num_shards
        self._coder = coder

    def setup(self):
        self._encode = _encoder(self._coder)
        self._passthrough = isinstance(self._coder, coders.BytesCoder)
        self._next = int.from_bytes(os.urandom(8), "little") % self._n  # the shard of the next record

    def start_bundle(self):
        self._buffers: List[List[bytes]] = [[] for _ in range(self._n)]
        self._sizes: List[int] = [0] * self._n

    def process(self, element) -> Iterator[Tuple[int, List[bytes]]]:
        data = element if self._passthrough and type(element) is bytes else bytes(self._encode(element))
        shard = self._next
        self._next = (shard + 1) % self._n
        buf = self._buffers[shard]
        buf.append(data)
        self._sizes[shard] += len(data)
        if len(buf) >= _FLUSH_RECORDS or self._sizes[shard] >= _FLUSH_BYTES:
            yield shard, buf
            self._buffers[shard] = []
            self._sizes[shard] = 0

    def finish_bundle(self):
        for shard, buf in enumerate(self._buffers):
            if buf:
                yield window.GlobalWindows.windowed_value((shard, buf))
        self._buffers = [[] for _ in range(self._n)]
        self._sizes = [0] * self._n


class _WriteShard(beam.DoFn):
    """``(shard, [[records], ...])`` -> one temporary file; emits its result dict."""

    def __init__(self, spec: _WriteSpec):
        self._spec = spec
        self._records = Metrics.counter(METRICS_NAMESPACE, "records_written")

    def process(self, element) -> Iterator[Dict[str, Any]]:
        shard, batches = element
        writer, path, index_path = self._spec.open(f"shard-{shard:05d}-{uuid.uuid4().hex}.tfrecord")
        try:
            for batch in batches:
                if isinstance(batch, tuple):  # (frames, int64 sizes): framed where the records were
                    writer.write_frames(batch[0], np.frombuffer(batch[1], dtype=np.int64))
                else:
                    writer.write_records(batch)
            writer.close()
        except BaseException:
            writer.abort()
            raise
        self._records.inc(writer.records_written)
        yield self._spec.result(writer, path, index_path, (shard, 0))


class _WriteBundles(beam.DoFn):
    """num_shards=0: each bundle writes its own file(s), rolling over at the limits."""

    def __init__(self, spec: _WriteSpec, coder: coders.Coder, max_records: Optional[int], max_bytes: Optional[int]):
        self._spec = spec
        self._coder = coder
        self._max_records = max_records
        self._max_bytes = max_bytes
        self._records = Metrics.counter(METRICS_NAMESPACE, "records_written")

    def setup(self):
        self._encode = _encoder(self._coder)

    def start_bundle(self):
        self._writer: Optional[RecordWriter] = None
        self._done: List[Dict[str, Any]] = []
        self._pending: List[bytes] = []
        self._pending_bytes = 0

    def _open(self):
        self._writer, self._path, self._index_path = self._spec.open(f"bundle-{uuid.uuid4().hex}.tfrecord")
        self._first_crc: Optional[int] = None

    def _close(self):
        if self._writer is None:
            return
        self._flush()
        self._writer.close()
        self._records.inc(self._writer.records_written)
        key = (self._first_crc or 0, self._writer.records_written, self._writer.bytes_written)
        self._done.append(self._spec.result(self._writer, self._path, self._index_path, key))
        self._writer = None

    def _flush(self):
        if self._pending:
            self._writer.write_records(self._pending)
            self._pending = []
            self._pending_bytes = 0

    def process(self, element):
        data = self._encode(element)
        frame = len(data) + FRAME_OVERHEAD
        w = self._writer
        if w is not None:
            count = w.records_written + len(self._pending)
            size = w.bytes_written + self._pending_bytes
            if (self._max_records and count >= self._max_records) or (
                self._max_bytes and count and size + frame > self._max_bytes
            ):
                self._close()
                w = None
        if w is None:
            self._open()
            self._first_crc = crc32c(data)
        self._pending.append(data)
        self._pending_bytes += frame
        if len(self._pending) >= _FLUSH_RECORDS:
            self._flush()

    def finish_bundle(self):
        try:
            self._close()
        except BaseException:
            if self._writer is not None:
                self._writer.abort()
            raise
        for result in self._done:
            yield window.GlobalWindows.windowed_value(result)

    def teardown(self):
        writer = getattr(self, "_writer", None)
        if writer is not None:
            writer.abort()


# ---------------------------------------------------------------------- finalize


def _rename(src: str, dst: str) -> None:
    """Move a temporary file to its final name. A runner may run the finalize again after
    it failed part-way (Spark retries a task); the temporary files live in this write's
    own folder and only this rename removes them, so a missing ``src`` whose ``dst``
    exists was moved by the earlier attempt: done, and ``dst`` is kept (deleting it first
    and then failing on the missing ``src`` would lose a finished shard)."""
    fs = files.beam_filesystems()
    if not fs.exists(src) and fs.exists(dst):
        return
    if not files.is_remote(dst):
        os.replace(src, dst)  # atomic, and overwrites an existing file on every OS
    else:
        if fs.exists(dst):
            fs.delete([dst])
        fs.rename([src], [dst])


def _finalize(
    _: Any,
    results: List[Dict[str, Any]],
    spec: _WriteSpec,
    prefix: str,
    suffix: str,
    template: str,
    num_shards: int,
) -> Iterator[Dict[str, Any]]:
    """Rename every temporary shard to its final name; runs once, after all writes."""
    results = sorted(results, key=lambda r: (r["key"], r["temp_path"]))
    if num_shards:
        have = {r["key"][0] for r in results}
        for shard in range(num_shards):  # shards no record hashed to are still written
            if shard not in have:
                writer, path, index_path = spec.open(f"shard-{shard:05d}-{uuid.uuid4().hex}.tfrecord")
                writer.close()
                results.append(spec.result(writer, path, index_path, (shard, 0)))
        results.sort(key=lambda r: r["key"])
    elif not results:
        writer, path, index_path = spec.open(f"empty-{uuid.uuid4().hex}.tfrecord")
        writer.close()
        results.append(spec.result(writer, path, index_path, (0, 0, 0)))
    total = len(results)
    if not template and total != 1:
        raise ValueError(f"shard_name_template '' names one file, but there are {total} shards")
    outputs = []
    for number, result in enumerate(results):
        final = shard_name(prefix, suffix, template, number, total)
        final_index = index_path_for(final) if result["temp_index_path"] else None
        if final_index:
            _rename(result["temp_index_path"], final_index)
        elif files.beam_filesystems().exists(index_path_for(final)):  # an old index must not describe new data
            files.beam_filesystems().delete([index_path_for(final)])
        _rename(result["temp_path"], final)
        outputs.append(
            {"path": final, "index_path": final_index, "records": result["records"], "bytes": result["bytes"]}
        )
    keep = {o["path"] for o in outputs}
    stale = [p for p in _existing_shards(prefix, suffix, template) if p not in keep]
    fs = files.beam_filesystems()
    for path in stale:
        doomed = [path] + [index_path_for(path)] * fs.exists(index_path_for(path))
        fs.delete(doomed)
    if fs.exists(spec.temp_dir):
        fs.delete([spec.temp_dir])
    yield from outputs


class WriteToTFRecord(beam.PTransform):
    """Write records to sharded TFRecord files, each with an index, atomically.

    Args:
      file_path_prefix: output path prefix; shard ``i`` of ``n`` is
        ``prefix + template(i, n) + file_name_suffix``.
      coder: encodes each element to record bytes (bytes pass through). A
        ``pyarrow.RecordBatch`` or ``Table`` element is written as one Example per row
        (``tfrecord_io.arrow.batch_to_records``: nulls are absent features).
      file_name_suffix: default ``""`` (as Beam's); e.g. ``.tfrecord`` or ``.tfrecord.gz``.
      num_shards: a fixed count (records dealt round-robin from a random shard, so
        the shards are even whatever the records hold; see the module docstring), or 0
        to let bundles decide (optionally bounded by ``max_records_per_shard`` /
        ``max_bytes_per_shard``, which roll over to a new file).
      shard_name_template: ``-SSSSS-of-NNNNN`` by default; ``''`` means one file.
      compression_type: AUTO (from the end of prefix + suffix: ``.gz``, ``.deflate``),
        UNCOMPRESSED, GZIP, ZLIB (or DEFLATE). Compressed
        shards get no index (offsets in a compressed stream cannot be seeked to).
      write_index: write ``<shard>.index`` (``offset size`` lines) beside each shard.

    Returns a PCollection of ``{path, index_path, records, bytes}``, one per shard, once
    every shard is in place (``bytes``: the stored size).
    """

    def __init__(
        self,
        file_path_prefix: str,
        coder: coders.Coder = coders.BytesCoder(),
        file_name_suffix: str = "",
        num_shards: int = 0,
        shard_name_template: Optional[str] = DEFAULT_SHARD_NAME_TEMPLATE,
        compression_type: Any = CompressionTypes.AUTO,
        write_index: bool = True,
        max_records_per_shard: Optional[int] = None,
        max_bytes_per_shard: Optional[int] = None,
    ):
        super().__init__()
        if not file_path_prefix:
            raise ValueError("file_path_prefix must be a non-empty path")
        template = DEFAULT_SHARD_NAME_TEMPLATE if shard_name_template is None else shard_name_template
        _template_tokens(template)  # a bad template fails here, not after the write
        if template == "":
            if num_shards not in (0, 1) or max_records_per_shard or max_bytes_per_shard:
                raise ValueError("shard_name_template '' writes exactly one file: num_shards must be 1")
            num_shards = 1
        if num_shards < 0:
            raise ValueError("num_shards must be >= 0")
        if num_shards and (max_records_per_shard or max_bytes_per_shard):
            raise ValueError("give either num_shards or max_records_per_shard/max_bytes_per_shard, not both")
        for name, value in (
            ("max_records_per_shard", max_records_per_shard),
            ("max_bytes_per_shard", max_bytes_per_shard),
        ):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be positive")
        self._prefix = str(file_path_prefix)
        self._suffix = file_name_suffix or ""
        self._template = template
        self._num_shards = int(num_shards)
        self._coder = coder
        self._compression = sink_compression(compression_type, self._prefix + self._suffix)
        self._write_index = bool(write_index)
        self._max_records = max_records_per_shard
        self._max_bytes = max_bytes_per_shard

    def _bucketed(self, records):
        """Records -> ``(shard, [records])`` lists (the step a subclass replaces)."""
        return records | "Bucket" >> beam.ParDo(_BucketRecords(self._num_shards, self._coder))

    def _write(self, pcoll, spec: _WriteSpec):
        """The elements -> one result dict per temporary file (the step before finalize)."""
        records = expand_record_batches(pcoll)  # pyarrow RecordBatches/Tables -> Examples (beam_arrow)
        if not isinstance(pcoll.windowing.windowfn, window.GlobalWindows):
            # One set of shards for the whole input (re-windowing costs per element, so
            # it is skipped when the input is already globally windowed).
            records = records | "GlobalWindow" >> beam.WindowInto(window.GlobalWindows())
        if self._num_shards:
            return (
                self._bucketed(records)
                | "GroupShards" >> beam.GroupByKey()
                | "WriteShards" >> beam.ParDo(_WriteShard(spec))
            )
        return records | "WriteBundles" >> beam.ParDo(
            _WriteBundles(spec, self._coder, self._max_records, self._max_bytes)
        )

    def expand(self, pcoll):
        directory = (
            os.path.dirname(self._prefix) if not files.is_remote(self._prefix) else self._prefix.rsplit("/", 1)[0]
        )
        temp_dir = files.beam_filesystems().join(directory or ".", f".tfrecord-io-temp-{uuid.uuid4().hex}")
        spec = _WriteSpec(temp_dir, self._compression, self._write_index)
        results = self._write(pcoll, spec)
        return (
            pcoll.pipeline
            | "Once" >> beam.Create([None])
            | "Finalize"
            >> beam.FlatMap(
                _finalize,
                AsList(results),
                spec,
                self._prefix,
                self._suffix,
                self._template,
                self._num_shards,
            )
        )


class _CheckShard(beam.DoFn):
    """Pass ``(shard, [records])`` on after checking the shard number is in range."""

    def __init__(self, num_shards: int):
        self._n = num_shards

    def process(self, element):
        shard, batch = element
        if not (isinstance(shard, int) and 0 <= shard < self._n):
            raise ValueError(f"WriteShardBatchesToTFRecord: shard {shard!r} is not in 0..{self._n - 1}")
        yield shard, batch


class WriteShardBatchesToTFRecord(WriteToTFRecord):
    """``WriteToTFRecord`` for input the caller has already placed: ``(shard, batch)``
    pairs (``0 <= shard < num_shards``), e.g. placed by where each record came from
    rather than by arrival. A batch is a list of ``bytes`` records, or a pair
    ``(frames, sizes)``: the records already framed (``encode_frames``) and the int64
    bytes of their payload lengths, so a batch crosses the shuffle as two ``bytes``
    rather than one element per record. Same names, atomic finalize, indexes and
    result as ``WriteToTFRecord``; ``num_shards`` must be given."""

    def __init__(self, file_path_prefix: str, num_shards: int, **kwargs: Any):
        if int(num_shards) < 1:
            raise ValueError("WriteShardBatchesToTFRecord needs num_shards >= 1")
        super().__init__(file_path_prefix, num_shards=num_shards, **kwargs)

    def _bucketed(self, records):
        return records | "CheckShards" >> beam.ParDo(_CheckShard(self._num_shards))


class _WriteBundleLists(_WriteBundles):
    """num_shards=0 for input in lists: each bundle writes its own file, one
    ``write_records`` call per list (no limits: one file per bundle)."""

    def process(self, element):
        if not element:
            return
        if self._writer is None:
            self._open()
            self._first_crc = crc32c(element[0])
        self._writer.write_records(element)


class WriteRecordListsToTFRecord(WriteToTFRecord):
    """``WriteToTFRecord`` with ``num_shards=0`` for input in lists of ``bytes`` records
    (e.g. one list per read batch), written as they come: each bundle writes its own
    file, the runner decides the count. Why: one Beam element per record costs tens of
    microseconds per stage, more than the writing itself; a list crosses each stage as
    one element. Same names, atomic finalize, indexes and result as ``WriteToTFRecord``;
    no ``num_shards`` or per-shard limits."""

    def __init__(self, file_path_prefix: str, **kwargs: Any):
        if kwargs.get("num_shards") or kwargs.get("max_records_per_shard") or kwargs.get("max_bytes_per_shard"):
            raise ValueError("WriteRecordListsToTFRecord writes one file per bundle: no num_shards or limits")
        super().__init__(file_path_prefix, num_shards=0, **kwargs)

    def _write(self, pcoll, spec: _WriteSpec):
        if not isinstance(pcoll.windowing.windowfn, window.GlobalWindows):
            pcoll = pcoll | "GlobalWindow" >> beam.WindowInto(window.GlobalWindows())
        return pcoll | "WriteBundles" >> beam.ParDo(_WriteBundleLists(spec, self._coder, None, None))


class _CopySlices(beam.DoFn):
    """``(shard, [(path, start, end, count), ...])`` -> one temporary file holding those
    byte ranges' frames, copied as they are with both CRCs checked
    (``frame_copy.copy_frames``); emits its result dict."""

    def __init__(self, spec: _WriteSpec, num_shards: int):
        self._spec = spec
        self._n = num_shards
        self._records = Metrics.counter(METRICS_NAMESPACE, "records_written")

    def process(self, element) -> Iterator[Dict[str, Any]]:
        shard, pieces = element
        if not (isinstance(shard, int) and 0 <= shard < self._n):
            raise ValueError(f"CopyFrameSlicesToTFRecord: shard {shard!r} is not in 0..{self._n - 1}")
        writer, path, index_path = self._spec.open(f"shard-{shard:05d}-{uuid.uuid4().hex}.tfrecord")
        try:
            for source, start, end, count in pieces:
                copy_frames(source, start, end, count, writer)
            writer.close()
        except BaseException:
            writer.abort()
            raise
        self._records.inc(writer.records_written)
        yield self._spec.result(writer, path, index_path, (shard, 0))


class CopyFrameSlicesToTFRecord(WriteToTFRecord):
    """``WriteToTFRecord`` for input that is a plan, not records: ``(shard, pieces)`` with
    ``pieces`` a list of ``(path, start, end, count)``, byte ranges of whole frames of
    uncompressed TFRecord files (from their indexes), in the order shard ``shard`` holds
    them. Each shard is written by one worker that copies its ranges' frames unchanged
    (both CRCs checked; no record crosses a shuffle, only the plan does). Same names,
    atomic finalize, indexes and result as ``WriteToTFRecord``; one element per shard
    (spread over the workers as given: ``beam.Create`` of the plan does that)."""

    def __init__(self, file_path_prefix: str, num_shards: int, **kwargs: Any):
        if int(num_shards) < 1:
            raise ValueError("CopyFrameSlicesToTFRecord needs num_shards >= 1")
        super().__init__(file_path_prefix, num_shards=num_shards, **kwargs)

    def _write(self, pcoll, spec: _WriteSpec):
        # No Reshuffle here: a plan made with beam.Create is already redistributed (Create
        # reshuffles two or more elements), and another one costs a stage per job.
        return pcoll | "CopyShards" >> beam.ParDo(_CopySlices(spec, self._num_shards))


__all__ = [
    "CopyFrameSlicesToTFRecord",
    "DEFAULT_SHARD_NAME_TEMPLATE",
    "WriteRecordListsToTFRecord",
    "WriteShardBatchesToTFRecord",
    "WriteToTFRecord",
    "shard_name",
    "sink_compression",
]
