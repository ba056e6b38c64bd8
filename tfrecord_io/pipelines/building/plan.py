"""The build's planning stages: every row placed by hashes of its key, the split sizes
and the input fingerprint summed by a combiner, the shard counts derived from them as a
side input, rows grouped per shard by the runner's shuffle (TFDS's writer has the same
shape: counts by combiners, shard counts as a side input, group by shard, write).

Rows move in batches: a batch of rows is one element, so Beam's per-element cost
(tens of microseconds per stage) is paid per batch. What crosses the shuffle per row
is its place and the row itself (paths and small values), never encoded media.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import apache_beam as beam

from tfrecord_io.dataset import dataset_writer
from tfrecord_io.pipelines.building import placement
from tfrecord_io.pipelines.building.build_spec import BuildSpec
from tfrecord_io.pipelines.building.row_plan import PlanSummary, fingerprint, pack, prepare_batch, unpack
from tfrecord_io.pipelines.building.write import shard_key

SUMMARY_TAG = "summary"


class PrepareRows(beam.DoFn):
    """A batch of rows -> the batch placed (main output: ``[(split, shard_hash, order,
    row), ...]``, packed: it waits for the shard counts) and its :class:`PlanSummary`
    (``summary`` output)."""

    def __init__(self, spec: BuildSpec):
        self._spec = spec
        self._listings: Any = None

    def setup(self):
        from tfrecord_io.storage.s3_listing import FolderListings

        # folder listings kept between this stage's batches (spread manifests on S3): this
        # build's only, dropped with the stage
        self._listings = FolderListings()

    def process(self, batch: List[Dict[str, Any]]):
        spec = self._spec
        prepared, summary = prepare_batch(
            batch,
            key_column=spec.key_column,
            cutoffs=spec.cutoffs,
            seed=spec.seed,
            shuffle=spec.shuffle,
            media_columns=spec.media_sources,
            base_dir=spec.base_dir,
            vocab_sources=spec.vocab_sources,
            listings=self._listings,
        )
        if prepared:
            yield pack(prepared)
        yield beam.pvalue.TaggedOutput(SUMMARY_TAG, summary)


class MergeSummaries(beam.CombineFn):
    """The batches' summaries -> one, as a plain dict (rows, bytes per split, digest,
    vocabularies). Addition is order-independent, so the result does not depend on
    how the runner cut the input."""

    def __init__(self, spec: BuildSpec):
        self._splits = [name for name, _ in spec.cutoffs]
        self._vocab = list(spec.vocab_sources)

    def create_accumulator(self) -> PlanSummary:
        return PlanSummary(self._splits, self._vocab)

    def add_input(self, acc: PlanSummary, summary: PlanSummary) -> PlanSummary:
        return acc.merge(summary)

    def merge_accumulators(self, accumulators) -> PlanSummary:
        out = self.create_accumulator()
        for acc in accumulators:
            out.merge(acc)
        return out

    def extract_output(self, acc: PlanSummary) -> Dict[str, Any]:
        return acc.to_dict()


def shard_counts(spec: BuildSpec, summary: Dict[str, Any]) -> Dict[str, int]:
    sharding = spec.config.sharding
    return placement.shard_counts(summary["bytes"], sharding.num_shards, sharding.target_shard_bytes)


class PlaceInShards(beam.DoFn):
    """A placed batch -> one ``(shard key, packed [(order, row), ...])`` per shard it touches."""

    def process(self, packed: bytes, counts: Dict[str, int]):
        prepared: List[Tuple[str, int, Any, Dict[str, Any]]] = unpack(packed)
        by_shard: Dict[Tuple[str, int], List[Tuple[Any, Dict[str, Any]]]] = {}
        for split, shard_hash, order, row in prepared:
            by_shard.setdefault((split, shard_hash % counts[split]), []).append((order, row))
        for (split, shard), items in by_shard.items():
            yield shard_key(split, shard), pack(items)


def every_shard(counts: Dict[str, int]):
    """An empty piece for every shard of the plan, so a shard no row lands in is still
    written (an empty file), as readers expect ``-of-N`` to mean N files."""
    for split, n in sorted(counts.items()):
        for shard in range(n):
            yield shard_key(split, shard), pack([])


class ClaimVersion(beam.DoFn):
    """Once the fingerprint is known: claim the version for this run, or find it already
    published from the same inputs (``dataset_writer.claim_for_run``). Runs once (its
    input is the one summary); the shard writers wait for it as a side input."""

    def __init__(self, spec: BuildSpec):
        self._spec = spec

    def process(self, summary: Dict[str, Any]):
        spec = self._spec
        if not summary["rows"]:
            from tfrecord_io.pipelines.building.manifest import InputError

            raise InputError(f"the input of {spec.name!r} has no rows: nothing to build into {spec.version_dir}")
        fp = fingerprint(spec.fingerprint_settings(), summary)
        claim = dataset_writer.claim_for_run(spec.version_dir, spec.run_id, fp)
        yield {**claim, "fingerprint": fp}
