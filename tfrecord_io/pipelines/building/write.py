"""The build's write stage: one shard's rows (grouped by the runner's shuffle) ->
sorted into their order, each row's media read and encoded, the Examples streamed into
the shard file; rejected rows with their reasons into a per-shard file for the
finalize stage.

Encoding happens here, where the shard is written, so encoded media never crosses the
runner's shuffle: only rows (paths and small values, a few hundred bytes each) do.
Peak memory per worker: one shard's rows plus ``WRITE_BATCH`` Examples plus one
decoded image or clip, whatever the dataset's size.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, Iterable, List, Optional, Tuple

import apache_beam as beam
from apache_beam.metrics import Metrics

from tfrecord_io.beam.beam_sink import DEFAULT_SHARD_NAME_TEMPLATE, shard_name
from tfrecord_io.dataset import dataset_writer
from tfrecord_io.format.framing import FRAME_OVERHEAD
from tfrecord_io.format.index import index_path_for
from tfrecord_io.format.key_index import KeyIndexWriter, content_hash
from tfrecord_io.format.writer import RecordWriter
from tfrecord_io.pipelines.building import commit, dedup
from tfrecord_io.pipelines.building.build_spec import BuildSpec
from tfrecord_io.pipelines.building.row_plan import Resolver, _json_default, canonical, row_key, unpack
from tfrecord_io.pipelines.runtime.progress import CountProgress
from tfrecord_io.storage import files

WRITE_BATCH = 64


class ShardKeys:
    """The key index entries of one shard as its records are written: each record's key,
    frame offset, length and content hash; written sorted by key into a part file that
    the split's merge stage (``key_index_stage``) reads."""

    def __init__(self, key_column: Optional[str]):
        self._key_column = key_column
        self.keys: List[bytes] = []
        self.offsets: List[int] = []
        self.lengths: List[int] = []
        self.hashes: List[bytes] = []
        self._pos = 0

    def add(self, row: Dict[str, Any], data: bytes) -> None:
        self.keys.append(row_key(row, self._key_column).encode("utf-8"))
        self.offsets.append(self._pos)
        self.lengths.append(len(data))
        self.hashes.append(content_hash(data))
        self._pos += len(data) + FRAME_OVERHEAD

    def write(self, path: str, shard: int) -> str:
        order = sorted(range(len(self.keys)), key=self.keys.__getitem__)
        writer = KeyIndexWriter(path)
        try:
            writer.add_many(
                [self.keys[i] for i in order],
                [shard] * len(order),
                [self.offsets[i] for i in order],
                [self.lengths[i] for i in order],
                b"".join(self.hashes[i] for i in order),
            )
            writer.close()
        except BaseException:
            writer.abort()
            raise
        return path


def dataset_shard_name(name: str, split: str, shard: int, num_shards: int, compression: str) -> str:
    """A built dataset's shard file name, TFDS's: ``<name>-<split>.tfrecord-00000-of-00004[.gz]``
    (the sink's :func:`~tfrecord_io.beam.beam_sink.shard_name` with its default template)."""
    return shard_name(
        f"{name}-{split}.tfrecord",
        files.compression_suffix(compression),
        DEFAULT_SHARD_NAME_TEMPLATE,
        shard,
        num_shards,
    )


def shard_key(split: str, shard: int) -> str:
    """The shuffle's key of a shard (a string: every runner's coder takes it)."""
    return json.dumps([split, shard])


def in_order(parts: Iterable[bytes]) -> List[Dict[str, Any]]:
    """A shard's rows from the packed pieces the shuffle delivered (in any order),
    sorted by their order value; rows with the same key (the same order value) by their
    content, so the input's order never shows."""
    items: List[Tuple[Any, Dict[str, Any]]] = [item for part in parts for item in unpack(part)]
    items.sort(key=lambda t: t[0])
    out: List[Dict[str, Any]] = []
    i = 0
    while i < len(items):
        j = i + 1
        while j < len(items) and items[j][0] == items[i][0]:
            j += 1
        if j - i == 1:
            out.append(items[i][1])
        else:
            out.extend(sorted((r for _, r in items[i:j]), key=lambda r: (canonical(r), str(r.get("_row", "")))))
        i = j
    return out


class WriteShard(beam.DoFn):
    """``(shard key, [packed [(order, row), ...], ...])`` -> the shard written, its note out:
    ``{split, shard, num_shards, path, index, records, bytes, sha256, rejected, image_modes}``."""

    def __init__(self, spec: BuildSpec, progress_dir: Optional[str] = None):
        self._spec = spec
        self._progress_dir = progress_dir
        self._encoders: Optional[Dict[str, Any]] = None
        self.rows_in = Metrics.counter("build", "rows_in")
        self.examples_out = Metrics.counter("build", "examples_out")
        self.rejected = Metrics.counter("build", "rejected")
        self._last_beat = 0.0

    def setup(self):
        self._encoded = CountProgress(self._progress_dir, "encoded")
        self._rejected = CountProgress(self._progress_dir, "rejected")
        self._encoded.setup()
        self._rejected.setup()

    def finish_bundle(self):
        self._encoded.finish_bundle()
        self._rejected.finish_bundle()

    def _beat(self) -> None:
        """Keep the run's claim fresh while shards are written (see dataset_writer)."""
        now = time.monotonic()
        if now - self._last_beat >= dataset_writer.HEARTBEAT_S:
            self._last_beat = now
            dataset_writer.refresh_marker(self._spec.version_dir, self._spec.run_id)

    def process(self, element, counts, summary, claim):
        if claim["state"] == "new":  # else already published from the same inputs: nothing to write
            if self._encoders is None:
                from tfrecord_io.transforms.requirements import check_requirements

                encoders = self._spec.encoders(summary["vocab"])
                check_requirements(encoders)  # a library left out fails the job here, not each row
                self._encoders = encoders
            key, parts = element
            split, shard = json.loads(key)
            yield self._write(split, shard, counts[split], in_order(parts))

    def _watched_images(self) -> List[Tuple[str, str]]:
        """``(column, mode key)`` of each Image column whose mode the config leaves to the
        images (no ``mode:``, not raw): the modes written are collected per shard, so the
        version can tell TFDS the channels (``image_modes``, see ``tfds_info``)."""
        from tfrecord_io.transforms.encoders.image import Image

        assert self._encoders is not None
        return [
            (col, f"{enc.prefix(col)}/mode")
            for col, enc in self._encoders.items()
            if isinstance(enc, Image) and enc.mode is None and enc.reencode != "raw"
        ]

    def _encode(
        self, rows: List[Dict[str, Any]], rejected: List[str], modes: Optional[Dict[str, set]] = None
    ) -> Iterable[Tuple[Dict[str, Any], bytes]]:
        """Each row's Example, or its rejection (into ``rejected``); the image modes
        written into ``modes`` (column -> set). Counting is left to the caller, per
        batch: a metric's ``inc`` per row costs more than a row's plan."""
        from tfrecord_io.transforms.encode_errors import EncodeError, rejected_row
        from tfrecord_io.transforms.rows import encode_features, example_bytes

        spec = self._spec
        encoders = self._encoders
        assert encoders is not None
        key_column = spec.key_column
        media = set(spec.media_sources)
        # (feature column, input column, does the input column hold media paths to resolve)
        columns = [(col, src, src in media) for col, src in spec.sources.items()]
        resolve_path = Resolver(spec.base_dir)
        watched = self._watched_images() if modes is not None else []
        for row in rows:
            try:
                if key_column and row.get(key_column) is None:
                    raise EncodeError("input", "no value for the key column (rows are placed by it)", key_column)
                values: Dict[str, Any] = {}
                for col, src, is_media in columns:
                    if src in row:  # a column the row lacks stays absent: "no such column", not "missing value"
                        value = row[src]
                        values[col] = resolve_path(value) if is_media and isinstance(value, str) and value else value
                features = encode_features(values, encoders)
                data = example_bytes(features)
                if modes:
                    for col, key in watched:
                        mode = features.get(key)
                        if mode is not None:
                            modes[col].add(str(mode[0]))
            except EncodeError as err:
                self.rejected.inc()
                rejected.append(
                    json.dumps(rejected_row(row, err), sort_keys=True, default=_json_default, ensure_ascii=False)
                )
                self._rejected.add(1)
                continue
            yield row, data

    def _write(self, split: str, shard: int, num_shards: int, rows: List[Dict[str, Any]]) -> Dict[str, Any]:
        spec = self._spec
        self._beat()
        relpath = f"{split}/{dataset_shard_name(spec.name, split, shard, num_shards, spec.compression)}"
        final = files.join(spec.version_dir, relpath)
        index_path = index_path_for(final) if spec.write_index else None
        if not files.is_remote(final):
            os.makedirs(os.path.dirname(final), exist_ok=True)
        # Local: a temporary name, renamed when complete. Object store: one upload,
        # visible only once complete (an abort leaves it in the unpublished version).
        writer = RecordWriter(
            final, spec.compression, atomic=not files.is_remote(final), index_path=index_path, digest=True
        )
        rejected: List[str] = []
        modes: Dict[str, set] = {col: set() for col, _ in self._watched_images()}
        records = 0
        self.rows_in.inc(len(rows))
        rows, duplicates = dedup.by_key(rows, spec.key_column, spec.dedup, split, shard)
        keys = ShardKeys(spec.key_column)
        try:
            batch: List[bytes] = []
            for row, data in self._encode(rows, rejected, modes):
                keys.add(row, data)
                batch.append(data)
                if len(batch) >= WRITE_BATCH:
                    writer.write_records(batch)
                    records += len(batch)
                    self.examples_out.inc(len(batch))
                    self._encoded.add(len(batch))
                    batch = []
                    self._beat()
            if batch:
                writer.write_records(batch)
                records += len(batch)
                self.examples_out.inc(len(batch))
                self._encoded.add(len(batch))
            writer.close()
        except BaseException:
            writer.abort()
            raise
        key_part = keys.write(commit.key_part(spec.version_dir, split, shard), shard)
        if rejected:
            rejected.sort()
            files.write_bytes(
                commit.rejected_part(spec.version_dir, split, shard),
                "".join(line + "\n" for line in rejected).encode("utf-8"),
            )
        return {
            "split": split,
            "shard": shard,
            "num_shards": num_shards,
            "path": relpath,
            "index": index_path_for(relpath) if index_path else None,
            "records": records,
            # as written, hashed on the way out: not read back (a whole GET on an object store)
            "bytes": writer.stored_bytes,
            "sha256": writer.sha256,
            "rejected": len(rejected),
            "image_modes": {col: sorted(seen) for col, seen in modes.items()},
            "duplicates": len(duplicates),
            "duplicate_examples": duplicates[:5],
            "key_part": key_part,
        }
