"""``BuildDataset``: a PCollection of rows -> a published, versioned TFRecord dataset.

::

    rows  (dicts, or lists of dicts with batched=True)
      | Batch            a batch of rows per element from here on
      | PrepareRows      key -> split, shard hash, order; size estimate; fingerprint digest
      |   summary:       MergeSummaries (combiner): rows, bytes per split, fingerprint, vocabularies
      |                  -> ShardCounts (side input), ClaimVersion (side input: claim once the fingerprint is known)
      | PlaceInShards    (shard, rows) pieces, plus an empty piece for every shard
      | GroupByShard     the runner's shuffle: rows, never encoded media
      | WriteShard       sort, drop/refuse repeated keys, read + encode media, write shard + index;
      |                  rejected rows and key index entries per shard
      |   KeyIndex       per split: the shards' key entries merged into <name>-<split>.keyindex
      | ToList | Finalize  counts checked, rejected rows merged, tfrecord_io_info.json, LATEST last
    -> one element: the version's tfrecord_io_info.json content

Everything whose cost grows with the rows runs in these stages, on the workers; the
process that builds the pipeline reads nothing. The same rows give the same shards,
byte for byte, whatever the runner, the worker count or the rows' order: placement and
order are hashes of each row's key, and the key is taken from the row as given (paths
relative to ``base_dir``), not from where the files are.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping, Optional, Union

import apache_beam as beam

from tfrecord_io.dataset import dataset_writer
from tfrecord_io.pipelines.building import commit
from tfrecord_io.pipelines.building.build_config import BuildConfig, as_build_config
from tfrecord_io.pipelines.building.build_spec import BuildSpec
from tfrecord_io.pipelines.building.content_dedup import DropIdentical
from tfrecord_io.pipelines.building.key_index_stage import MergeKeyIndex
from tfrecord_io.pipelines.building.plan import (
    SUMMARY_TAG,
    ClaimVersion,
    MergeSummaries,
    PlaceInShards,
    PrepareRows,
    every_shard,
    shard_counts,
)
from tfrecord_io.pipelines.building.write import WriteShard
from tfrecord_io.pipelines.runtime.progress import CountProgress

BATCH_ROWS = 1000


class _Finalize(beam.DoFn):
    def __init__(self, spec: BuildSpec):
        self._spec = spec

    def process(self, shards, summary, counts, claim, key_indexes):
        yield commit.finalize(self._spec, list(shards), summary, counts, claim, list(key_indexes))


class BuildDataset(beam.PTransform):
    """Build a versioned TFRecord dataset from a PCollection of rows.

    ``config`` is a build config as in ``configs/datasets/*.yaml`` (``name``,
    ``columns``, ``splits``, ``key``, ``seed``, ``shuffle``, ``sharding``, ``output``):
    a :class:`~tfrecord_io.pipelines.building.build_config.BuildConfig` (``load_config``), or a
    mapping or a YAML file's path, validated here once; its ``input`` and ``runner``
    sections are not used here. Rows are dicts column ->
    value; media columns (``image``, ``audio`` encoders) hold bytes or paths, relative
    ones resolved against ``base_dir``. Keep paths relative where you can: a row's key
    (its ``key`` column, or the whole row) decides its split, shard and position, so
    relative paths give the same shards wherever the data is mounted.

    The output is one element, the published version's ``tfrecord_io_info.json`` content
    (``reused: True`` when the version already held a build of the same inputs, which
    is verified and left as it is). Rows that cannot be encoded are in
    ``<version>/rejected-00000-of-00001.jsonl`` with their reasons; rows in = written
    + rejected, or nothing is published. ``version`` defaults to the config's
    ``output.version`` (``auto``: a UTC timestamp, chosen when this transform is made).

    ``batched=True``: the elements are already lists of rows (as the ``tfrecord-io
    build`` sources emit them), which skips a batching step.
    """

    def __init__(
        self,
        config: Union[BuildConfig, Mapping[str, Any], str],
        base_dir: Optional[str] = None,
        *,
        output_dir: Optional[str] = None,
        version: Optional[str] = None,
        batched: bool = False,
        run_id: Optional[str] = None,
        progress_dir: Optional[str] = None,
    ):
        super().__init__()
        if output_dir is not None and not isinstance(config, (BuildConfig, str)):
            # before validation: output.dir may be the one field the mapping lacks
            config = dict(config, output=dict(config.get("output") or {}, dir=output_dir))
            output_dir = None
        cfg = as_build_config(config, require_input=False)
        if output_dir is not None:
            out = output_dir if "://" in output_dir else os.path.normpath(output_dir)
            cfg = cfg.replace(output=dataclasses.replace(cfg.output, dir=out))
        requested = version if version is not None else cfg.output.version
        self.spec = BuildSpec(
            config=cfg,
            out_dir=cfg.output.dir,
            version=dataset_writer.new_version_name(requested),
            run_id=run_id or dataset_writer.new_run_id(),
            base_dir=base_dir,
        )
        self.spec.feature_spec()  # encoder settings checked now, not in a worker
        self._batched = batched
        self._progress_dir = progress_dir

    @classmethod
    def from_spec(cls, spec: BuildSpec, *, batched: bool = False, progress_dir: Optional[str] = None) -> BuildDataset:
        """The transform for a spec the launcher has checked already (``job.run_build``:
        its version claimed, its encoders made): nothing is parsed or built again."""
        self = cls.__new__(cls)
        beam.PTransform.__init__(self)
        self.spec = spec
        self._batched = batched
        self._progress_dir = progress_dir
        return self

    @property
    def version(self) -> str:
        return self.spec.version

    @property
    def version_dir(self) -> str:
        return self.spec.version_dir

    def expand(self, rows):
        spec = self.spec
        batches = rows if self._batched else rows | "Batch" >> beam.BatchElements(BATCH_ROWS // 4, BATCH_ROWS)
        prepared = batches | "PrepareRows" >> beam.ParDo(PrepareRows(spec)).with_outputs(SUMMARY_TAG, main="prepared")
        summary = prepared[SUMMARY_TAG] | "MergeSummaries" >> beam.CombineGlobally(MergeSummaries(spec))
        counts = summary | "ShardCounts" >> beam.Map(lambda s: shard_counts(spec, s))
        claim = summary | "ClaimVersion" >> beam.ParDo(ClaimVersion(spec))
        pieces = prepared["prepared"] | "PlaceInShards" >> beam.ParDo(
            PlaceInShards(), counts=beam.pvalue.AsSingleton(counts)
        )
        empty = counts | "EveryShard" >> beam.FlatMap(every_shard)
        side = {
            "counts": beam.pvalue.AsSingleton(counts),
            "summary": beam.pvalue.AsSingleton(summary),
            "claim": beam.pvalue.AsSingleton(claim),
        }
        shards = (
            (pieces, empty)
            | "Pieces" >> beam.Flatten()
            # str keys and bytes values (packed rows): standard coders every runner
            # decodes (Prism 2.62 cannot decode Python-specific composite coders at a
            # GroupByKey, apache/beam#32636)
            | "Typed" >> beam.Map(lambda kv: kv).with_output_types(beam.typehints.KV[str, bytes])
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShard" >> beam.ParDo(WriteShard(spec, self._progress_dir), **side)
        )
        if self._progress_dir:
            shards = shards | "CountShards" >> beam.ParDo(CountProgress(self._progress_dir, "shards"))
        if spec.dedup == "content":  # byte-identical Examples under other keys: only once all shards are written
            shards = (
                shards
                | "AllNotes" >> beam.combiners.ToList()
                | "DropIdentical" >> beam.ParDo(DropIdentical(spec), claim=side["claim"])
            )
        key_indexes = (
            shards
            | "BySplit" >> beam.Map(lambda note: (note["split"], note))
            | "GroupBySplit" >> beam.GroupByKey()
            | "KeyIndex" >> beam.ParDo(MergeKeyIndex(spec), claim=side["claim"])
        )
        return (
            shards
            | "ShardNotes" >> beam.combiners.ToList()
            | "Finalize" >> beam.ParDo(_Finalize(spec), key_indexes=beam.pvalue.AsList(key_indexes), **side)
        )


__all__ = ["BuildDataset"]
