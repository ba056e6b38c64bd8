"""``tfrecord-io build``: media rows -> encoded Examples -> split, shuffled, sharded
TFRecord files with indexes, ``dataset_info.json`` last, then ``LATEST``.

Determinism (why a rerun is byte-identical): every decision is a hash of the row's
key and the seed (``splits.py``): its split, its shard, and its position inside the
shard (shards are sorted by the shuffle hash before writing). Encoders are
deterministic (fixed codecs and parameters), Examples are serialised with sorted keys,
and frames are TensorFlow's. Nothing depends on input order, worker count, runner or
time; only ``dataset_info.json`` records when the build ran.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple

import apache_beam as beam
from apache_beam.metrics import Metrics

from tfrecord_io import files
from tfrecord_io.writer import RecordWriter

from . import dataset_dir, splits
from .config import ConfigError
from .encoders_config import make_encoders, media_columns
from .manifest import load_rows, row_key
from .progress import CountProgress, ProgressPrinter

TOOL_VERSION = "0.1.0"
META_DIR = ".shards"


def shard_name(name: str, split: str, shard: int, num_shards: int, compression: str) -> str:
    suffix = {"gzip": ".gz", "zlib": ".zz"}.get(compression, "")
    return f"{name}-{split}.tfrecord-{shard:05d}-of-{num_shards:05d}{suffix}"


class EncodeRow(beam.DoFn):
    """Row -> ``(split, shuffle_key, example_bytes)``; failures to the ``rejected`` output."""

    REJECTED = "rejected"

    def __init__(self, encoders: Dict[str, Any], sources: Dict[str, str], key_column: Optional[str],
                 cutoffs: List[Tuple[str, float]], seed: int):
        self._encoders = encoders
        self._sources = sources  # feature column -> input column
        self._key_column = key_column
        self._cutoffs = cutoffs
        self._seed = seed
        self.rows_in = Metrics.counter("build", "rows_in")
        self.examples_out = Metrics.counter("build", "examples_out")
        self.rejected = Metrics.counter("build", "rejected")

    def process(self, row: Dict[str, Any]):
        from transforms.errors import EncodeError, rejected_row
        from transforms.rows import encode_row

        self.rows_in.inc()
        view = {col: row.get(src) for col, src in self._sources.items()}
        try:
            data = encode_row(view, self._encoders)
        except EncodeError as err:
            self.rejected.inc()
            out = rejected_row(row, err)
            yield beam.pvalue.TaggedOutput(self.REJECTED, json.dumps(out, sort_keys=True, default=str, ensure_ascii=False))
            return
        key = row_key(row, self._key_column)
        split = splits.assign_split(key, self._cutoffs, self._seed)
        self.examples_out.inc()
        yield split, splits.shuffle_key(key, self._seed), data


class WriteShard(beam.DoFn):
    """Write one shard: records sorted by shuffle key, to a temporary name, then renamed
    into place with its index; emits the shard's metadata (also kept as a small JSON file
    beside the shards so the launcher can read it on any filesystem)."""

    def __init__(self, version_dir: str, name: str, compression: str, write_index: bool):
        self._dir = version_dir
        self._name = name
        self._compression = compression
        self._write_index = write_index and not compression

    def process(self, element):
        (split, shard, num_shards), items = element
        records = sorted((k, d) for k, d in items if d is not None)
        split_dir = os.path.join(self._dir, split)
        os.makedirs(split_dir, exist_ok=True)
        final = os.path.join(split_dir, shard_name(self._name, split, shard, num_shards, self._compression))
        index_path = final + ".index" if self._write_index else None
        tmp = os.path.join(split_dir, f".tmp-{os.path.basename(final)}-{os.getpid()}")
        writer = RecordWriter(tmp, self._compression, index_path=(tmp + ".index") if index_path else None)
        try:
            writer.write_records([d for _, d in records])
            writer.close()
        except BaseException:
            writer.abort()
            raise
        if index_path:
            os.replace(tmp + ".index", index_path)
        os.replace(tmp, final)
        meta = {
            "split": split,
            "shard": shard,
            "num_shards": num_shards,
            "path": os.path.relpath(final, self._dir),
            "index": os.path.relpath(index_path, self._dir) if index_path else None,
            "records": len(records),
            "bytes": os.path.getsize(final),
            "sha256": dataset_dir.sha256_file(final),
        }
        meta_dir = os.path.join(self._dir, META_DIR)
        os.makedirs(meta_dir, exist_ok=True)
        with open(os.path.join(meta_dir, f"{split}-{shard:05d}.json"), "w") as f:
            json.dump(meta, f)
        yield meta


def _shard_counts(size_by_split: Dict[str, int], fixed: Optional[int], target: int) -> Dict[str, int]:
    if fixed:
        return {s: fixed for s in size_by_split}
    return {s: max(1, math.ceil(size / target)) for s, size in size_by_split.items()}


@dataclass
class BuildSummary:
    version: str
    version_dir: str
    rows_in: int
    written: int
    rejected: int
    shards: List[Dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    rejected_path: Optional[str] = None

    def lines(self) -> List[str]:
        per_split: Dict[str, List[int]] = {}
        for s in self.shards:
            acc = per_split.setdefault(s["split"], [0, 0, 0])
            acc[0] += s["records"]
            acc[1] += s["bytes"]
            acc[2] += 1
        out = [
            f"build finished in {self.seconds:.1f}s: version {self.version} at {self.version_dir}",
            f"rows in: {self.rows_in}   written: {self.written}   rejected: {self.rejected}",
        ]
        for split, (records, size, count) in per_split.items():
            out.append(f"  {split:<12} {records:>8} records  {count:>4} shards  {size / 1e6:10.2f} MB")
        if self.rejected:
            out.append(f"rejected rows and reasons: {self.rejected_path}")
        return out


def resolve_auto_vocabularies(columns: Dict[str, Dict[str, Any]], sources: Dict[str, str], rows: List[Dict[str, Any]]) -> None:
    """``vocabulary: auto`` -> the sorted distinct values of the column, so label ids
    are the same on every rerun over the same inputs (and recorded in dataset_info.json)."""
    for name, settings in columns.items():
        if settings.get("vocabulary") == "auto":
            values = {str(r.get(sources[name])) for r in rows if r.get(sources[name]) not in (None, "")}
            settings["vocabulary"] = sorted(values)


def feature_spec(encoders: Dict[str, Any]) -> Dict[str, Any]:
    from transforms.rows import check_spec

    return {s.key: s.to_dict() for s in check_spec(encoders)}


def run_build(cfg: Dict[str, Any], options, progress: bool = True, log=print) -> BuildSummary:
    """Validate everything that can be checked up front, run the pipeline, publish."""
    started = time.monotonic()
    sources = {name: s.get("column") or name for name, s in cfg["columns"].items()}
    media_sources = [sources[c] for c in media_columns(cfg["columns"])]
    rows = load_rows(cfg["input"], media_sources, sorted(set(sources.values())))
    resolve_auto_vocabularies(cfg["columns"], sources, rows)
    encoders = make_encoders(cfg["columns"])
    spec = feature_spec(encoders)
    key_column = cfg.get("key")
    if key_column and not any(key_column in r for r in rows):
        raise ConfigError(f"key: column {key_column!r} is not in the input")
    out_dir = cfg["output"]["dir"]
    version = dataset_dir.new_version_name(cfg["output"]["version"])
    dataset_dir.check_output_dir(out_dir, cfg["name"], spec, version)
    version_dir = os.path.join(out_dir, version)
    os.makedirs(version_dir)
    compression = files.normalize_compression(cfg["output"]["compression"] or None)
    cutoffs = splits.split_cutoffs({k: v for k, v in cfg["splits"].items() if v > 0})
    seed = cfg["seed"]
    fixed = cfg["sharding"].get("num_shards")
    target = cfg["sharding"]["target_shard_bytes"]
    name = cfg["name"]

    log(f"building {name!r}: {len(rows)} rows -> {version_dir}")
    with ProgressPrinter("build", enabled=progress, rate_stage="encoded", total=len(rows)) as bar:
        with beam.Pipeline(options=options) as p:
            encoded = (
                p
                | "Rows" >> beam.Create(rows, reshuffle=False)
                | "Spread" >> beam.Reshuffle()
                | "Encode" >> beam.ParDo(EncodeRow(encoders, sources, key_column, cutoffs, seed)).with_outputs(
                    EncodeRow.REJECTED, main="examples"
                )
            )
            examples = encoded.examples | "CountEncoded" >> beam.ParDo(CountProgress(bar.dir, "encoded"))
            rejected = encoded[EncodeRow.REJECTED] | "CountRejected" >> beam.ParDo(CountProgress(bar.dir, "rejected"))
            sizes = (
                examples
                | "Sizes" >> beam.Map(lambda e: (e[0], len(e[2])))
                | "SizePerSplit" >> beam.CombinePerKey(sum)
            )
            split_names = p | "Splits" >> beam.Create([(s, 0) for s, _ in cutoffs])
            counts = (
                (sizes, split_names)
                | "AllSplits" >> beam.Flatten()
                | "Total" >> beam.CombinePerKey(sum)
                | "ShardCounts" >> beam.combiners.ToDict()
                | "NumShards" >> beam.Map(_shard_counts, fixed, target)
            )
            # Shard keys are (split, shard, num_shards) tuples. Typed as KV[Any, Any] they
            # are coded by Beam's (deterministic) FastPrimitivesCoder, which runners can
            # treat as opaque bytes; inferred as Tuple[...] they would use Python's
            # beam:coder:tuple:v1, which Prism 2.62 cannot decode at the GroupByKey
            # (apache/beam#32636). The grouping, and so the shards, are the same.
            keyed = examples | "AssignShard" >> beam.Map(
                lambda e, n: ((e[0], splits.assign_shard(str(e[1]), n[e[0]], seed), n[e[0]]), (e[1], e[2])),
                beam.pvalue.AsSingleton(counts),
            ).with_output_types(beam.typehints.KV[beam.typehints.Any, beam.typehints.Any])
            placeholders = counts | "EveryShard" >> beam.FlatMap(
                lambda n: [((s, i, k), (0, None)) for s, k in sorted(n.items()) for i in range(k)]
            ).with_output_types(beam.typehints.KV[beam.typehints.Any, beam.typehints.Any])
            (
                (keyed, placeholders)
                | "WithEmptyShards" >> beam.Flatten()
                | "GroupShards" >> beam.GroupByKey()
                | "WriteShards" >> beam.ParDo(WriteShard(version_dir, name, compression, cfg["output"]["write_index"]))
                | "CountShards" >> beam.ParDo(CountProgress(bar.dir, "shards"))
            )
            (
                rejected
                | "RejectedToOne" >> beam.combiners.ToList()
                | "WriteRejected" >> beam.ParDo(_WriteRejected(version_dir))
            )
    shards = _read_shard_meta(version_dir)
    written = sum(s["records"] for s in shards)
    rejected_path = os.path.join(version_dir, "rejected-00000-of-00001.jsonl")
    n_rejected = _count_lines(rejected_path)
    if written + n_rejected != len(rows):
        raise RuntimeError(
            f"build lost rows: {len(rows)} in, {written} written, {n_rejected} rejected; not publishing {version}"
        )
    info = {
        "name": name,
        "description": cfg.get("description", ""),
        "version": version,
        "tool": "tfrecord-io",
        "tool_version": TOOL_VERSION,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "features": spec,
        "encoders": {k: e.to_config() for k, e in encoders.items()},
        "compression": compression,
        "splits": _splits_info(shards),
        "rows_in": len(rows),
        "records": written,
        "rejected": n_rejected,
        "config": cfg,
    }
    shutil.rmtree(os.path.join(version_dir, META_DIR), ignore_errors=True)
    dataset_dir.write_info(version_dir, info)
    dataset_dir.publish(out_dir, version)
    if cfg.get("report"):  # the dataset is published; the page is a by-product (pipelines/report.py)
        from .report import write_build_report

        log("\n".join(write_build_report(version_dir, options, progress=progress).lines()))
    return BuildSummary(
        version=version,
        version_dir=version_dir,
        rows_in=len(rows),
        written=written,
        rejected=n_rejected,
        shards=shards,
        seconds=time.monotonic() - started,
        rejected_path=rejected_path if n_rejected else None,
    )


class _WriteRejected(beam.DoFn):
    """All rejected rows (few, by nature) into one JSONL file, sorted, atomically."""

    def __init__(self, version_dir: str):
        self._dir = version_dir

    def process(self, lines: List[str]):
        path = os.path.join(self._dir, "rejected-00000-of-00001.jsonl")
        tmp = path + f".tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            for line in sorted(lines):
                f.write(line + "\n")
        os.replace(tmp, path)
        yield path


def _read_shard_meta(version_dir: str) -> List[Dict[str, Any]]:
    meta_dir = os.path.join(version_dir, META_DIR)
    out = []
    for name in sorted(os.listdir(meta_dir)) if os.path.isdir(meta_dir) else []:
        with open(os.path.join(meta_dir, name)) as f:
            out.append(json.load(f))
    return sorted(out, key=lambda m: (m["split"], m["shard"]))


def _count_lines(path: str) -> int:
    if not os.path.exists(path):
        return 0
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def _splits_info(shards: Iterable[Dict[str, Any]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for s in shards:
        split = out.setdefault(s["split"], {"records": 0, "bytes": 0, "num_shards": s["num_shards"], "shards": []})
        split["records"] += s["records"]
        split["bytes"] += s["bytes"]
        split["shards"].append({k: s[k] for k in ("path", "index", "records", "bytes", "sha256")})
    return out
