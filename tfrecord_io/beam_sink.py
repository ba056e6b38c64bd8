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

Frames come from :class:`tfrecord_io.writer.RecordWriter` (byte-identical to
TensorFlow's), which also writes each shard's index from the offsets it wrote.

Determinism: with ``num_shards=N`` a record goes to shard ``crc32c(record) % N``, a
stable key (not round-robin by arrival, as Beam's sink does), and records of a shard
are written in the order the runner delivers them; so the same input in the same
order gives the same bytes. With ``num_shards=0`` each bundle writes its own file(s)
(rolling over at ``max_records_per_shard``/``max_bytes_per_shard``): the runner
decides the count; files are numbered by a content key (first record's CRC, counts),
so the same bundles give the same names.
"""

from __future__ import annotations

import os
import re
import uuid
from typing import Any, Dict, Iterator, List, Optional, Tuple

import apache_beam as beam
from apache_beam import coders
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.pvalue import AsList
from apache_beam.transforms import window

from . import files
from .beam_source import METRICS_NAMESPACE  # one namespace for the package's Beam metrics
from .crc import crc32c
from .framing import FRAME_OVERHEAD
from .index import INDEX_SUFFIX as INDEX_SUFFIX  # was defined here; still importable from here
from .index import index_path_for
from .writer import RecordWriter

DEFAULT_SHARD_NAME_TEMPLATE = "-SSSSS-of-NNNNN"
_FLUSH_RECORDS = 4096  # records buffered per shard before a bundle hands them on
_FLUSH_BYTES = 16 << 20


# ---------------------------------------------------------------------- names


def _template_parts(template: str) -> Tuple[str, int, int]:
    """Validate a shard template; returns (template, width of S run, width of N run)."""
    s_runs = re.findall(r"S+", template)
    n_runs = re.findall(r"N+", template)
    if len(s_runs) > 1 or len(n_runs) > 1:
        raise ValueError(f"shard_name_template {template!r}: at most one run of S and one of N")
    if template and not s_runs:
        raise ValueError(f"shard_name_template {template!r} needs a run of S for the shard number")
    return template, len(s_runs[0]) if s_runs else 0, len(n_runs[0]) if n_runs else 0


def shard_name(prefix: str, suffix: str, template: str, shard: int, num_shards: int) -> str:
    """The final path of shard ``shard`` of ``num_shards``."""
    _, s_width, n_width = _template_parts(template)
    name = template
    if s_width:
        name = re.sub(r"S+", f"{shard:0{s_width}d}", name, count=1)
    if n_width:
        name = re.sub(r"N+", f"{num_shards:0{n_width}d}", name, count=1)
    return f"{prefix}{name}{suffix}"


def _shard_regex(prefix: str, suffix: str, template: str) -> re.Pattern[str]:
    parts = []
    for piece in re.split(r"(S+|N+)", template):
        if piece and piece[0] in "SN" and set(piece) == {piece[0]}:
            parts.append(rf"\d{{{len(piece)},}}")
        else:
            parts.append(re.escape(piece))
    return re.compile(re.escape(prefix) + "".join(parts) + re.escape(suffix) + r"\Z")


def _existing_shards(prefix: str, suffix: str, template: str) -> List[str]:
    """Final-name files of this prefix/template now present (data files only)."""
    pattern = _shard_regex(prefix, suffix, template)
    found = FileSystems.match([prefix + "*" + suffix])[0].metadata_list
    return sorted(m.path for m in found if pattern.match(m.path))


# ---------------------------------------------------------------------- writing


def _encoder(coder: coders.Coder):
    if isinstance(coder, coders.BytesCoder):
        return lambda value: value if isinstance(value, (bytes, bytearray, memoryview)) else coder.encode(value)
    return coder.encode


def _ensure_dir(path: str) -> None:
    """Create ``path`` if absent; tolerate a parallel worker creating it first."""
    if files.is_remote(path):
        try:
            FileSystems.mkdirs(path)
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
        path = FileSystems.join(self.temp_dir, name)
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
    """Encode records and group them per shard within a bundle: ``(shard, [records])``.

    Handing on lists rather than single records makes the shuffle carry a few large
    elements instead of one per record.
    """

    def __init__(self, num_shards: int, coder: coders.Coder):
        self._n = num_shards
        self._coder = coder

    def setup(self):
        self._encode = _encoder(self._coder)
        self._passthrough = isinstance(self._coder, coders.BytesCoder)

    def start_bundle(self):
        self._buffers: List[List[bytes]] = [[] for _ in range(self._n)]
        self._sizes: List[int] = [0] * self._n

    def process(self, element) -> Iterator[Tuple[int, List[bytes]]]:
        data = element if self._passthrough and type(element) is bytes else bytes(self._encode(element))
        shard = crc32c(data) % self._n
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
    if not files.is_remote(dst):
        os.replace(src, dst)  # atomic, and overwrites an existing file on every OS
    else:
        if FileSystems.exists(dst):
            FileSystems.delete([dst])
        FileSystems.rename([src], [dst])


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
        elif FileSystems.exists(index_path_for(final)):  # an old index must not describe new data
            FileSystems.delete([index_path_for(final)])
        _rename(result["temp_path"], final)
        outputs.append(
            {"path": final, "index_path": final_index, "records": result["records"], "bytes": result["bytes"]}
        )
    keep = {o["path"] for o in outputs}
    stale = [p for p in _existing_shards(prefix, suffix, template) if p not in keep]
    for path in stale:
        doomed = [path] + [index_path_for(path)] * FileSystems.exists(index_path_for(path))
        FileSystems.delete(doomed)
    if FileSystems.exists(spec.temp_dir):
        FileSystems.delete([spec.temp_dir])
    yield from outputs


class WriteToTFRecord(beam.PTransform):
    """Write records to sharded TFRecord files, each with an index, atomically.

    Args:
      file_path_prefix: output path prefix; shard ``i`` of ``n`` is
        ``prefix + template(i, n) + file_name_suffix``.
      coder: encodes each element to record bytes (bytes pass through).
      file_name_suffix: default ``.tfrecord``.
      num_shards: a fixed count (records assigned by ``crc32c(record) % n``), or 0 to
        let bundles decide (optionally bounded by ``max_records_per_shard`` /
        ``max_bytes_per_shard``, which roll over to a new file).
      shard_name_template: ``-SSSSS-of-NNNNN`` by default; ``''`` means one file.
      compression_type: AUTO (from the suffix), UNCOMPRESSED, GZIP, ZLIB. Compressed
        shards get no index (offsets in a compressed stream cannot be seeked to).
      write_index: write ``<shard>.index`` (``offset size`` lines) beside each shard.

    Returns a PCollection of ``{path, index_path, records, bytes}``, one per shard, once
    every shard is in place (``bytes``: the stored size).
    """

    def __init__(
        self,
        file_path_prefix: str,
        coder: coders.Coder = coders.BytesCoder(),
        file_name_suffix: str = ".tfrecord",
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
        _template_parts(template)
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
        self._compression = files.normalize_compression(compression_type, self._prefix + self._suffix)
        self._write_index = bool(write_index)
        self._max_records = max_records_per_shard
        self._max_bytes = max_bytes_per_shard

    def expand(self, pcoll):
        directory = (
            os.path.dirname(self._prefix) if not files.is_remote(self._prefix) else self._prefix.rsplit("/", 1)[0]
        )
        temp_dir = FileSystems.join(directory or ".", f".tfrecord-io-temp-{uuid.uuid4().hex}")
        spec = _WriteSpec(temp_dir, self._compression, self._write_index)
        records = pcoll
        if not isinstance(pcoll.windowing.windowfn, window.GlobalWindows):
            # One set of shards for the whole input (re-windowing costs per element, so
            # it is skipped when the input is already globally windowed).
            records = pcoll | "GlobalWindow" >> beam.WindowInto(window.GlobalWindows())
        if self._num_shards:
            results = (
                records
                | "Bucket" >> beam.ParDo(_BucketRecords(self._num_shards, self._coder))
                | "GroupShards" >> beam.GroupByKey()
                | "WriteShards" >> beam.ParDo(_WriteShard(spec))
            )
        else:
            results = records | "WriteBundles" >> beam.ParDo(
                _WriteBundles(spec, self._coder, self._max_records, self._max_bytes)
            )
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


__all__ = ["DEFAULT_SHARD_NAME_TEMPLATE", "WriteToTFRecord", "shard_name"]
